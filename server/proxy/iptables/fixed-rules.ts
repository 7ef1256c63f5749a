import { KUBE_EXTERNAL_SERVICES, KUBE_FIREWALL, KUBE_FORWARD, KUBE_MARK_MASQ, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_PROXY_FIREWALL, KUBE_SERVICES } from '../xtables/chain-names.ts';
import { isLoopbackIP } from '../../net/ip.ts';
import { comment, LineBuffer } from '../xtables/restore-writer.ts';
import { NFACCT_CT_STATE_INVALID, type BuildContext } from './rules.ts';

/**
 * The service-independent half of the rules: fixed chains kube-proxy rewrites
 * on every sync (postrouting masquerade, the mark, forwarding, the martian
 * guard, and the KUBE-SERVICES -> KUBE-NODEPORTS tail).
 */

/** FixedRules are the chains and rules that do not depend on any service. */
export interface FixedRules {
  readonly filterChains: readonly string[];
  /** filterHead: rules before the services' (KUBE-FIREWALL). */
  readonly filterHead: LineBuffer;
  /** filterTail: rules after the services' (KUBE-FORWARD). */
  readonly filterTail: LineBuffer;
  readonly natChains: readonly string[];
  readonly natHead: LineBuffer;
  /** natTail: the KUBE-SERVICES -> KUBE-NODEPORTS rule(s); must stay last in KUBE-SERVICES. */
  readonly natTail: LineBuffer;
  /** warnings: node-port addresses left out (loopback when not allowed), for the log. */
  readonly warnings: readonly string[];
}

/** buildFixedRules writes the service-independent chains, as kube-proxy writes them on every sync. */
export function buildFixedRules(ctx: BuildContext): FixedRules {
  const mark = ctx.masqueradeMark;
  const filterChains = [KUBE_SERVICES, KUBE_EXTERNAL_SERVICES, KUBE_FORWARD, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL];
  const filterHead = new LineBuffer();
  const filterTail = new LineBuffer();
  const natHead = new LineBuffer();
  const natTail = new LineBuffer();
  const warnings: string[] = [];

  natHead.write('-A', KUBE_POSTROUTING, '-m', 'mark', '!', '--mark', `${mark}/${mark}`, '-j', 'RETURN');
  // Clear the mark so a packet that traverses the stack again is not masqueraded twice.
  natHead.write('-A', KUBE_POSTROUTING, '-j', 'MARK', '--xor-mark', mark);
  const masq = ['-A', KUBE_POSTROUTING, '-m', 'comment', '--comment', comment('kubernetes service traffic requiring SNAT'), '-j', 'MASQUERADE'];
  if (ctx.randomFully) masq.push('--random-fully');
  natHead.write(...masq);
  natHead.write('-A', KUBE_MARK_MASQ, '-j', 'MARK', '--or-mark', mark);

  if (ctx.family === 'IPv4' && ctx.localhostNodePorts) {
    // route_localnet opens 127.0.0.0/8 to the network (https://issues.k8s.io/90259);
    // this is kubelet's guard against such martian packets, which kube-proxy duplicates.
    filterChains.push(KUBE_FIREWALL);
    filterHead.write(
      '-A',
      KUBE_FIREWALL,
      '-m',
      'comment',
      '--comment',
      comment('block incoming localnet connections'),
      '-d',
      '127.0.0.0/8',
      '!',
      '-s',
      '127.0.0.0/8',
      '-m',
      'conntrack',
      '!',
      '--ctstate',
      'RELATED,ESTABLISHED,DNAT',
      '-j',
      'DROP',
    );
  }

  const nodePortsComment = comment('kubernetes service nodeports; NOTE: this must be the last rule in this chain');
  if (ctx.nodePortsMatchAll) {
    const dest = ['-m', 'addrtype', '--dst-type', 'LOCAL'];
    if (ctx.family === 'IPv6') dest.push('!', '-d', '::1/128');
    else if (!ctx.localhostNodePorts) dest.push('!', '-d', '127.0.0.0/8');
    natTail.write('-A', KUBE_SERVICES, '-m', 'comment', '--comment', nodePortsComment, ...dest, '-j', KUBE_NODEPORTS);
  } else {
    for (const ip of ctx.nodePortIPs) {
      const loopback = isLoopbackIP(ip);
      if (loopback && ctx.family === 'IPv6') {
        warnings.push(`--nodeport-addresses includes localhost (${ip}) but localhost node ports are not supported on IPv6`);
        continue;
      }
      if (loopback && !ctx.localhostNodePorts) {
        warnings.push(`--nodeport-addresses includes localhost (${ip}) but iptables.localhostNodePorts is false`);
        continue;
      }
      natTail.write('-A', KUBE_SERVICES, '-m', 'comment', '--comment', nodePortsComment, '-d', ip, '-j', KUBE_NODEPORTS);
    }
  }

  // INVALID packets can reset connections by mistake unless conntrack is liberal (kubernetes#74839).
  if (!ctx.conntrackTCPLiberal) {
    const rule = ['-A', KUBE_FORWARD, '-m', 'conntrack', '--ctstate', 'INVALID'];
    if (ctx.nfacct.ctStateInvalid) rule.push('-m', 'nfacct', '--nfacct-name', NFACCT_CT_STATE_INVALID);
    filterTail.write(...rule, '-j', 'DROP');
  }
  // Forward marked (service) traffic even when the FORWARD policy is DROP, and its replies.
  filterTail.write('-A', KUBE_FORWARD, '-m', 'comment', '--comment', comment('kubernetes forwarding rules'), '-m', 'mark', '--mark', `${mark}/${mark}`, '-j', 'ACCEPT');
  filterTail.write('-A', KUBE_FORWARD, '-m', 'comment', '--comment', comment('kubernetes forwarding conntrack rule'), '-m', 'conntrack', '--ctstate', 'RELATED,ESTABLISHED', '-j', 'ACCEPT');

  return {
    filterChains,
    filterHead,
    filterTail,
    natChains: [KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ],
    natHead,
    natTail,
    warnings,
  };
}

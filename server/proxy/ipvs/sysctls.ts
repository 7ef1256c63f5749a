import { IPVS_SCHEDULERS } from '../../config/modes.ts';
import { ConfigInvalidError } from '../../errors.ts';

/** The sysctls kube-proxy's IPVS proxier sets in NewProxier. */
export const SYSCTL_VS_CONNTRACK = 'net/ipv4/vs/conntrack';
export const SYSCTL_CONN_REUSE = 'net/ipv4/vs/conn_reuse_mode';
export const SYSCTL_EXPIRE_NODEST_CONN = 'net/ipv4/vs/expire_nodest_conn';
export const SYSCTL_EXPIRE_QUIESCENT_TEMPLATE = 'net/ipv4/vs/expire_quiescent_template';
export const SYSCTL_IP_FORWARD = 'net/ipv4/ip_forward';
export const SYSCTL_ARP_IGNORE = 'net/ipv4/conf/all/arp_ignore';
export const SYSCTL_ARP_ANNOUNCE = 'net/ipv4/conf/all/arp_announce';

/** IpvsSysctl is one setting: value null means "leave it", with why. */
export interface IpvsSysctl {
  readonly name: string;
  readonly value: string | null;
  readonly why: string;
}

/** kernelVersion reads "6.1.0-18-amd64" as [6, 1, 0]; null when unreadable. */
export function kernelVersion(release: string): number[] | null {
  const m = /^(\d+)\.(\d+)(?:\.(\d+))?/.exec(release);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)] : null;
}

function before(v: number[], min: number[]): boolean {
  for (let i = 0; i < min.length; i++) if ((v[i] ?? 0) !== min[i]) return (v[i] ?? 0) < min[i];
  return false;
}

/**
 * ipvsSysctls lists the settings in kube-proxy's order: conntrack for IPVS
 * (the iptables masquerade rules need it), conn_reuse_mode 0 on kernels from
 * 4.1 before 5.9 (whose reuse handling stalled connections, kubernetes#93297),
 * expire_nodest_conn and expire_quiescent_template (connections to a deleted or
 * weight-0 real server end instead of hanging), ip_forward, and with strictARP
 * arp_ignore=1 / arp_announce=2 so the node does not answer ARP for service
 * addresses on kube-ipvs0 (what MetalLB-style L2 load balancers need).
 */
export function ipvsSysctls(strictARP: boolean, release: string): IpvsSysctl[] {
  const out: IpvsSysctl[] = [{ name: SYSCTL_VS_CONNTRACK, value: '1', why: 'IPVS connections must pass through conntrack for the masquerade rules' }];
  const v = kernelVersion(release);
  if (v && before(v, [4, 1])) out.push({ name: SYSCTL_CONN_REUSE, value: null, why: `kernel ${release} is older than 4.1 and has no conn_reuse_mode` });
  else if (v && !before(v, [5, 9])) out.push({ name: SYSCTL_CONN_REUSE, value: null, why: `kernel ${release} handles connection reuse well (>= 5.9): conn_reuse_mode left as is` });
  else out.push({ name: SYSCTL_CONN_REUSE, value: '0', why: 'kernels before 5.9 stall reused connections with conn_reuse_mode 1' });
  out.push(
    { name: SYSCTL_EXPIRE_NODEST_CONN, value: '1', why: 'connections to a deleted real server end at once' },
    { name: SYSCTL_EXPIRE_QUIESCENT_TEMPLATE, value: '1', why: 'persistence does not pin clients to a weight-0 real server' },
    { name: SYSCTL_IP_FORWARD, value: '1', why: 'IPVS forwards to real servers on other hosts' },
  );
  if (strictARP) {
    out.push(
      { name: SYSCTL_ARP_IGNORE, value: '1', why: 'strictARP: answer ARP only for addresses of the receiving interface' },
      { name: SYSCTL_ARP_ANNOUNCE, value: '2', why: 'strictARP: never announce kube-ipvs0 addresses' },
    );
  }
  return out;
}

/**
 * validateScheduler returns the IPVS scheduler to use ("" means rr), refusing
 * names kube-proxy does not accept: a scheduler name reaches ipvsadm batches.
 */
export function validateScheduler(name: string): string {
  const s = name === '' ? 'rr' : name;
  if (!(IPVS_SCHEDULERS as readonly string[]).includes(s)) {
    throw new ConfigInvalidError(`ipvs.scheduler ${JSON.stringify(name)} is not an IPVS scheduler kproxy supports (${IPVS_SCHEDULERS.join(', ')})`);
  }
  return s;
}

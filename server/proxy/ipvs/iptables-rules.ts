import type { IptablesDump } from '../../kernel/iptables-save-parser.ts';
import type { IPFamily } from '../../net/ip.ts';
import { KUBE_EXTERNAL_SERVICES, KUBE_NODEPORTS, isServiceChainName } from '../xtables/chain-names.ts';
import type { JumpRule } from '../xtables/jump-chains.ts';
import type { LocalDetector } from '../local-detector.ts';
import { chainLine, comment, LineBuffer } from '../xtables/restore-writer.ts';
import type { OutFilterEntry } from './builder.ts';
import {
  FILTER_CHAINS,
  IPSETS,
  KUBE_FORWARD,
  KUBE_IPVS_FILTER,
  KUBE_IPVS_OUT_FILTER,
  KUBE_LOAD_BALANCER,
  KUBE_MARK_MASQ,
  KUBE_NODE_PORT,
  KUBE_POSTROUTING,
  KUBE_PROXY_FIREWALL,
  KUBE_SERVICES,
  KUBE_SOURCE_RANGES_FIREWALL,
  NAT_CHAINS,
  setName,
  type SetKey,
} from './names.ts';

/**
 * The iptables rules IPVS mode still needs: masquerade decisions, node port
 * and load balancer handling, source-range firewalling and the filter that
 * keeps service addresses from exposing host ports. They match ipsets, so
 * their number does not grow with Services. Written as kube-proxy's
 * writeIptablesRules writes them, in the same order.
 */

/** IptablesContext is what the rules depend on besides which sets have entries. */
export interface IptablesContext {
  readonly family: IPFamily;
  /** masqueradeMark: "0x00004000". */
  readonly masqueradeMark: string;
  readonly masqueradeAll: boolean;
  readonly localDetector: LocalDetector;
  readonly randomFully: boolean;
}

/** ipsetMatchRules is kube-proxy's ipsetWithIptablesChain: a rule per non-empty set (LOCAL sets before the others). */
const SET_RULES: readonly { set: SetKey; table: 'nat' | 'filter'; from: string; to: string; match: string; proto?: string }[] = [
  { set: 'loopBack', table: 'nat', from: KUBE_POSTROUTING, to: 'MASQUERADE', match: 'dst,dst,src' },
  { set: 'loadBalancer', table: 'nat', from: KUBE_SERVICES, to: KUBE_LOAD_BALANCER, match: 'dst,dst' },
  { set: 'loadBalancerLocal', table: 'nat', from: KUBE_LOAD_BALANCER, to: 'RETURN', match: 'dst,dst' },
  { set: 'nodePortLocalTCP', table: 'nat', from: KUBE_NODE_PORT, to: 'RETURN', match: 'dst', proto: 'tcp' },
  { set: 'nodePortTCP', table: 'nat', from: KUBE_NODE_PORT, to: KUBE_MARK_MASQ, match: 'dst', proto: 'tcp' },
  { set: 'nodePortLocalUDP', table: 'nat', from: KUBE_NODE_PORT, to: 'RETURN', match: 'dst', proto: 'udp' },
  { set: 'nodePortUDP', table: 'nat', from: KUBE_NODE_PORT, to: KUBE_MARK_MASQ, match: 'dst', proto: 'udp' },
  { set: 'nodePortLocalSCTP', table: 'nat', from: KUBE_NODE_PORT, to: 'RETURN', match: 'dst,dst', proto: 'sctp' },
  { set: 'nodePortSCTP', table: 'nat', from: KUBE_NODE_PORT, to: KUBE_MARK_MASQ, match: 'dst,dst', proto: 'sctp' },
  { set: 'loadBalancerFW', table: 'filter', from: KUBE_PROXY_FIREWALL, to: KUBE_SOURCE_RANGES_FIREWALL, match: 'dst,dst' },
  { set: 'loadBalancerSourceCIDR', table: 'filter', from: KUBE_SOURCE_RANGES_FIREWALL, to: 'RETURN', match: 'dst,dst,src' },
  { set: 'loadBalancerSourceIP', table: 'filter', from: KUBE_SOURCE_RANGES_FIREWALL, to: 'RETURN', match: 'dst,dst,src' },
];

const COMMENTS = new Map(IPSETS.map((i) => [i.key, i.comment]));

/** IptablesRules is the restore input plus its rule counts. */
export interface IptablesRules {
  readonly text: string;
  readonly lines: number;
  readonly rulesByTable: { nat: number; filter: number };
}

/**
 * buildIptablesRules writes the nat and filter tables of IPVS mode.
 * nonEmpty names the sets holding entries after this sync; outFilter lists the
 * LB IPs the node must not reach; stale adds removal lines for chains of the
 * iptables mode left on the node (see staleModeChains).
 */
export function buildIptablesRules(ctx: IptablesContext, nonEmpty: ReadonlySet<SetKey>, outFilter: readonly OutFilterEntry[], stale: StaleChains = NO_STALE): IptablesRules {
  const name = (k: SetKey) => setName(k, ctx.family);
  const setComment = (k: SetKey) => comment(COMMENTS.get(k)!);
  const mark = ctx.masqueradeMark;
  const nat = new LineBuffer();
  const filter = new LineBuffer();
  let natRules = 0;
  let filterRules = 0;
  const n = (...w: string[]) => {
    nat.write(...w);
    natRules++;
  };
  const f = (...w: string[]) => {
    filter.write(...w);
    filterRules++;
  };

  nat.writeLine('*nat');
  for (const c of NAT_CHAINS) nat.writeLine(chainLine(c));
  for (const c of stale.nat.chains) nat.writeLine(chainLine(c));
  filter.writeLine('*filter');
  for (const c of FILTER_CHAINS) filter.writeLine(chainLine(c));
  for (const c of stale.filter.chains) filter.writeLine(chainLine(c));

  // Connections to localhost never go to a service.
  n('-A', KUBE_SERVICES, '-s', ctx.family === 'IPv6' ? '::1/128' : '127.0.0.0/8', '-j', 'RETURN');

  for (const r of SET_RULES) {
    if (!nonEmpty.has(r.set)) continue;
    const w = ['-A', r.from, ...(r.proto ? ['-p', r.proto] : []), '-m', 'comment', '--comment', setComment(r.set), '-m', 'set', '--match-set', name(r.set), r.match, '-j', r.to];
    if (r.table === 'nat') n(...w);
    else f(...w);
  }

  if (nonEmpty.has('clusterIP')) {
    const head = ['-A', KUBE_SERVICES, '-m', 'comment', '--comment', setComment('clusterIP'), '-m', 'set', '--match-set', name('clusterIP')];
    if (ctx.masqueradeAll) n(...head, 'dst,dst', '-j', KUBE_MARK_MASQ);
    // Off-cluster traffic to a cluster IP (a static route to the service range) may leave the node again.
    else if (ctx.localDetector.implemented) n(...head, 'dst,dst', ...ctx.localDetector.ifNotLocal, '-j', KUBE_MARK_MASQ);
    // Without a detector: the node's own connections pick a VIP on kube-ipvs0 as source; masquerade those.
    else n(...head, 'src,dst', '-j', KUBE_MARK_MASQ);
  }

  const externalIPRules = (head: string[]) => {
    // Traffic from off the machine (not bridged from a pod, not local) is accepted here...
    n(...head, '-m', 'physdev', '!', '--physdev-is-in', '-m', 'addrtype', '!', '--src-type', 'LOCAL', '-j', 'ACCEPT');
    // ...and so is traffic to external IPs that are local addresses (GCE-style LB IPs in the local table).
    n(...head, '-m', 'addrtype', '--dst-type', 'LOCAL', '-j', 'ACCEPT');
  };
  if (nonEmpty.has('externalIP')) {
    const head = ['-A', KUBE_SERVICES, '-m', 'comment', '--comment', setComment('externalIP'), '-m', 'set', '--match-set', name('externalIP'), 'dst,dst'];
    n(...head, '-j', KUBE_MARK_MASQ);
    externalIPRules(head);
  }
  if (nonEmpty.has('externalIPLocal')) {
    externalIPRules(['-A', KUBE_SERVICES, '-m', 'comment', '--comment', setComment('externalIPLocal'), '-m', 'set', '--match-set', name('externalIPLocal'), 'dst,dst']);
  }

  n('-A', KUBE_SERVICES, '-m', 'addrtype', '--dst-type', 'LOCAL', '-j', KUBE_NODE_PORT);
  n('-A', KUBE_LOAD_BALANCER, '-j', KUBE_MARK_MASQ);
  f('-A', KUBE_SOURCE_RANGES_FIREWALL, '-j', 'DROP');
  // For IPVS the node's packets to an LB IP carry the LB IP (bound on kube-ipvs0) as source too.
  for (const e of outFilter) {
    f('-A', KUBE_IPVS_OUT_FILTER, '-s', e.ip, '-m', 'ipvs', '--vaddr', e.ip, '--vproto', e.protocol, '--vport', String(e.port), '-j', 'DROP');
  }
  // Accept service traffic at the end of KUBE-SERVICES, so other rules cannot break IPVS.
  for (const k of ['clusterIP', 'loadBalancer'] as const) {
    if (nonEmpty.has(k)) n('-A', KUBE_SERVICES, '-m', 'set', '--match-set', name(k), 'dst,dst', '-j', 'ACCEPT');
  }

  f('-A', KUBE_FORWARD, '-m', 'comment', '--comment', comment('kubernetes forwarding rules'), '-m', 'mark', '--mark', `${mark}/${mark}`, '-j', 'ACCEPT');
  f('-A', KUBE_FORWARD, '-m', 'comment', '--comment', comment('kubernetes forwarding conntrack rule'), '-m', 'conntrack', '--ctstate', 'RELATED,ESTABLISHED', '-j', 'ACCEPT');
  f('-A', KUBE_NODE_PORT, '-m', 'comment', '--comment', setComment('healthCheckNodePort'), '-m', 'set', '--match-set', name('healthCheckNodePort'), 'dst', '-j', 'ACCEPT');

  // Service addresses are local: without this, any host port would answer on them (kubernetes#72236).
  for (const k of ['loadBalancer', 'clusterIP', 'externalIP', 'externalIPLocal'] as const) f('-A', KUBE_IPVS_FILTER, '-m', 'set', '--match-set', name(k), 'dst,dst', '-j', 'RETURN');
  f('-A', KUBE_IPVS_FILTER, '-m', 'set', '--match-set', name('healthCheckNodePort'), 'dst', '-j', 'RETURN');
  f('-A', KUBE_IPVS_FILTER, '-m', 'conntrack', '--ctstate', 'NEW', '-m', 'set', '--match-set', name('ipvsIPs'), 'dst', '-j', 'REJECT');

  n('-A', KUBE_POSTROUTING, '-m', 'mark', '!', '--mark', `${mark}/${mark}`, '-j', 'RETURN');
  // Clear the mark so a packet that traverses the stack again is not masqueraded twice.
  n('-A', KUBE_POSTROUTING, '-j', 'MARK', '--xor-mark', mark);
  n('-A', KUBE_POSTROUTING, '-m', 'comment', '--comment', comment('kubernetes service traffic requiring SNAT'), '-j', 'MASQUERADE', ...(ctx.randomFully ? ['--random-fully'] : []));
  n('-A', KUBE_MARK_MASQ, '-j', 'MARK', '--or-mark', mark);

  for (const j of stale.nat.jumps) nat.writeLine(`-D ${j}`);
  for (const c of stale.nat.chains) nat.writeLine(`-X ${c}`);
  for (const j of stale.filter.jumps) filter.writeLine(`-D ${j}`);
  for (const c of stale.filter.chains) filter.writeLine(`-X ${c}`);
  nat.writeLine('COMMIT');
  filter.writeLine('COMMIT');
  return { text: nat.text() + filter.text(), lines: nat.lines + filter.lines, rulesByTable: { nat: natRules, filter: filterRules } };
}

/** JUMP_RULES are kube-proxy's iptablesJumpChain for IPVS mode, prepended where missing. */
export const JUMP_RULES: readonly JumpRule[] = [
  ['nat', 'OUTPUT', KUBE_SERVICES, 'kubernetes service portals'],
  ['nat', 'PREROUTING', KUBE_SERVICES, 'kubernetes service portals'],
  ['nat', 'POSTROUTING', KUBE_POSTROUTING, 'kubernetes postrouting rules'],
  ['filter', 'FORWARD', KUBE_FORWARD, 'kubernetes forwarding rules'],
  ['filter', 'INPUT', KUBE_NODE_PORT, 'kubernetes health check rules'],
  ['filter', 'INPUT', KUBE_PROXY_FIREWALL, 'kube-proxy firewall rules'],
  ['filter', 'FORWARD', KUBE_PROXY_FIREWALL, 'kube-proxy firewall rules'],
  ['filter', 'INPUT', KUBE_IPVS_FILTER, 'kubernetes ipvs access filter'],
  ['filter', 'OUTPUT', KUBE_IPVS_OUT_FILTER, 'kubernetes ipvs access filter'],
].map(([table, from, to, text]) => ({ table: table as JumpRule['table'], from, to, args: ['-m', 'comment', '--comment', text, '-j', to] }));

/** StaleChains are chains of the iptables mode to delete, with the rules ("CHAIN spec") jumping into them. */
export interface StaleChains {
  readonly nat: { readonly chains: readonly string[]; readonly jumps: readonly string[] };
  readonly filter: { readonly chains: readonly string[]; readonly jumps: readonly string[] };
}

export const NO_STALE: StaleChains = { nat: { chains: [], jumps: [] }, filter: { chains: [], jumps: [] } };

/** Chains only the iptables mode uses (IPVS mode shares KUBE-SERVICES in nat, KUBE-FORWARD and KUBE-PROXY-FIREWALL). */
const IPTABLES_MODE_ONLY: Record<'nat' | 'filter', (c: string) => boolean> = {
  nat: (c) => c === KUBE_NODEPORTS || isServiceChainName(c),
  filter: (c) => c === KUBE_SERVICES || c === KUBE_EXTERNAL_SERVICES || c === KUBE_NODEPORTS,
};

/**
 * staleModeChains finds what an iptables-mode proxy (kproxy's or kube-proxy's)
 * left on a node now running IPVS mode: its per-service chains and the filter
 * chains that would still REJECT or DROP service traffic by stale rules.
 * Full syncs delete them, jump rules first.
 */
export function staleModeChains(dump: IptablesDump): StaleChains {
  const pick = (table: 'nat' | 'filter') => {
    const t = dump.tables.get(table);
    if (!t) return { chains: [], jumps: [] };
    const chains = [...t.chains.values()]
      .filter((c) => !c.builtin && IPTABLES_MODE_ONLY[table](c.name))
      .map((c) => c.name)
      .sort();
    const set = new Set(chains);
    // Chains IPVS mode declares are flushed by the restore itself: their rules need no -D.
    const declared = new Set<string>(table === 'nat' ? NAT_CHAINS : FILTER_CHAINS);
    const jumps: string[] = [];
    for (const c of t.chains.values()) {
      if (set.has(c.name) || declared.has(c.name)) continue;
      for (const r of c.rules) if (r.target !== null && set.has(r.target)) jumps.push(`${c.name} ${r.spec}`);
    }
    return { chains, jumps };
  };
  return { nat: pick('nat'), filter: pick('filter') };
}

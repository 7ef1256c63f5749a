import { fmtBytes, fmtCompact } from './format.ts';
import type { ChainView, IpvsRates, RealServerFacts, VirtualServerFacts } from './protocol.ts';

/**
 * What the pages show of IPVS mode's objects: virtual servers (table
 * "ipvs"), sets ("ipsets") and kube-ipvs0's addresses ("addresses"). Pure
 * helpers: the components only lay out what these return.
 */

/** TableLayout: how the Rules page draws a table's lines. */
export type TableLayout = 'ipvs' | 'list' | 'rules';

/** tableLayout: virtual servers with weights and connections; sets and addresses as plain lists; iptables rules. */
export function tableLayout(table: string): TableLayout {
  if (table === 'ipvs') return 'ipvs';
  if (table === 'ipsets' || table === 'addresses') return 'list';
  return 'rules';
}

/** realServerKey: "10.244.1.5:8080", "[fd00::5]:8080" (the endpoint key it serves). */
export function realServerKey(rs: Pick<RealServerFacts, 'address' | 'port'>): string {
  return rs.address.includes(':') ? `[${rs.address}]:${rs.port}` : `${rs.address}:${rs.port}`;
}

/** VS_ROLE names what a virtual server is for on the Service page. */
export const VS_ROLE: Record<string, string> = {
  'cluster-ip': 'cluster IP',
  'node-port': 'node port',
  'external-ip': 'external IP',
  'load-balancer-ip': 'load balancer IP',
};

/** schedulerText: "round robin (rr)", with persistence and flags. */
export function schedulerText(vs: Pick<VirtualServerFacts, 'scheduler' | 'persistence' | 'flags'>): string {
  const name = SCHEDULERS[vs.scheduler];
  const parts = [name ? `${name} (${vs.scheduler})` : vs.scheduler];
  if (vs.flags.length) parts.push(vs.flags.join(', '));
  if (vs.persistence > 0) parts.push(`persistent ${vs.persistence} s`);
  return parts.join(' · ');
}

const SCHEDULERS: Record<string, string> = {
  rr: 'round robin',
  wrr: 'weighted round robin',
  lc: 'least connection',
  wlc: 'weighted least connection',
  lblc: 'locality-based least connection',
  lblcr: 'locality-based least connection with replication',
  dh: 'destination hashing',
  sh: 'source hashing',
  sed: 'shortest expected delay',
  nq: 'never queue',
  mh: 'Maglev hashing',
  fo: 'weighted failover',
  ovf: 'weighted overflow',
};

/** RealServerRow is one real server as the cards and the flow picture show it. */
export interface RealServerRow {
  readonly key: string;
  readonly facts: RealServerFacts;
  /** share: weight / total weight, the part of new connections it gets (IPVS schedulers honour weights). */
  readonly share: number;
  /** state: takes new connections, draining (weight 0 set by kproxy), or weight 0 set by someone else. */
  readonly state: 'active' | 'draining' | 'weight-0';
}

/** realServers lists a virtual server's real servers with their share of new connections. */
export function realServers(chain: Pick<ChainView, 'rules'>): RealServerRow[] {
  const facts = chain.rules.flatMap((r) => (r.ipvs ? [r.ipvs] : []));
  const total = facts.reduce((a, f) => a + f.weight, 0);
  return facts.map((f) => ({
    key: realServerKey(f),
    facts: f,
    share: total > 0 ? f.weight / total : 0,
    state: f.weight > 0 ? 'active' : f.draining ? 'draining' : 'weight-0',
  }));
}

/** fmtRate: per-second figures between two reads ("12/s", "0.4/s", "–" before a second read). */
export function fmtRate(rate: IpvsRates | null, what: 'conns' | 'packets' | 'bytes'): string {
  if (!rate) return '–';
  const v = rate[what];
  if (what === 'bytes') return `${fmtBytes(Math.round(v))}/s`;
  if (v > 0 && v < 10) return `${v.toFixed(1)}/s`;
  return `${fmtCompact(Math.round(v))}/s`;
}

const CARD_ORDER: Record<string, number> = { ipvs: 0, ipsets: 1, nat: 2, filter: 3 };

/**
 * ipvsCards orders a port's objects for the Service page in IPVS mode: its
 * virtual servers first (what it owns), then its set members, then the
 * iptables rules matching those sets.
 */
export function ipvsCards(chains: readonly ChainView[]): ChainView[] {
  return chains
    .map((c, i) => ({ c, i }))
    .sort((a, b) => (CARD_ORDER[a.c.table] ?? 9) - (CARD_ORDER[b.c.table] ?? 9) || a.i - b.i)
    .map((x) => x.c);
}

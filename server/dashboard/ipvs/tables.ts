import { canonicalEntry, type IpsetSet } from '../../kernel/ipset.ts';
import { hostPort, realServerKey, virtualServerKey, type IpvsForward, type IpvsProtocol, type IpvsRealServer, type IpvsService, type IpvsVirtualServer } from '../../kernel/ipvs-batch.ts';
import { compareReals, compareServices, type IpvsCounters, type IpvsServiceStats } from '../../kernel/ipvs-listing.ts';
import type { InterfaceAddress } from '../../kernel/netif.ts';
import { DUMMY_DEVICE, IPSETS, setSpec, type DrainingRealServer, type IpvsIntent } from '../../proxy/ipvs/index.ts';
import type { KernelChain, KernelRule, KernelTable } from '../kernel-view.ts';
import type { IpvsRates, IpvsTraffic, RealServerFacts, VirtualServerFacts } from '../protocol.ts';
import type { Yield } from '../yield.ts';
import type { RateTracker } from './rates.ts';

/**
 * IPVS objects in the dashboard's shape (tables -> chains -> rules):
 *
 *   ipvs       chain "TCP 10.96.0.10:80" (policy "rr persistent 600")   rule "-> 10.244.1.5:8080 Masq weight 1"
 *   ipsets     chain "KUBE-CLUSTER-IP" (policy "hash:ip,port family inet") rule "10.96.0.10,tcp:80"
 *   addresses  chain "kube-ipvs0"                                        rule "10.96.0.10/32"
 *
 * built from what the kernel lists (with connections, traffic and rates) or
 * from what kproxy planned. Order carries no meaning in IPVS, sets or link
 * addresses, so both sides are sorted alike and drift never reports "order".
 */

export const IPVS_TABLE = 'ipvs';
export const SETS_TABLE = 'ipsets';
export const ADDRESSES_TABLE = 'addresses';

/** CHUNK: virtual servers converted between two yields (about 10,000 objects, 30-40 ms). */
const CHUNK = 1000;

/** virtualServerName is a virtual server's chain name, as `ipvsadm -Ln` starts its line: "TCP 10.96.0.10:80". */
export function virtualServerName(vs: Pick<IpvsVirtualServer, 'protocol' | 'address' | 'port'>): string {
  return `${vs.protocol} ${hostPort(vs.address, vs.port)}`;
}

/** parseVirtualServerName reads a chain name back ("UDP [fd00::a]:53"), or null when it is not one. */
export function parseVirtualServerName(name: string): { protocol: IpvsProtocol; address: string; port: number } | null {
  const m = /^(TCP|UDP|SCTP) (?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)):(\d{1,5})$/.exec(name);
  if (!m) return null;
  return { protocol: m[1] as IpvsProtocol, address: m[2] ?? m[3], port: Number(m[4]) };
}

/** schedulerPolicy is a virtual server's settings as `ipvsadm -Ln` prints them after the address: "mh (mh-port) persistent 600". */
export function schedulerPolicy(vs: Pick<IpvsVirtualServer, 'scheduler' | 'persistence' | 'schedFlags'>): string {
  let s = vs.scheduler;
  if (vs.schedFlags.length) s += ` (${vs.schedFlags.join(',')})`;
  if (vs.persistence > 0) s += ` persistent ${vs.persistence}`;
  return s;
}

const FORWARD_TITLE: Record<IpvsForward, string> = { masq: 'Masq', route: 'Route', tunnel: 'Tunnel' };

/** realServerSpec is a real server's rule text: "-> 10.244.1.5:8080 Masq weight 1". */
export function realServerSpec(rs: Pick<IpvsRealServer, 'address' | 'port' | 'forward' | 'weight'>): string {
  return `-> ${realServerKey(rs)} ${FORWARD_TITLE[rs.forward]} weight ${rs.weight}`;
}

/** setPolicy is a set's type as its chain policy ("hash:ip,port family inet", "bitmap:port"). */
export function setPolicy(set: Pick<IpsetSet, 'type' | 'family'>): string {
  return set.family ? `${set.type} family ${set.family}` : set.type;
}

/** DrainIndex maps "vsKey/rsKey" to when kproxy gave that real server weight 0. */
export type DrainIndex = ReadonlyMap<string, number>;

export function drainIndex(draining: readonly DrainingRealServer[]): DrainIndex {
  return new Map(draining.map((d) => [`${d.vsKey}/${realServerKey(d.rs)}`, d.since]));
}

const ZERO: IpvsCounters = { conns: 0, inPackets: 0, outPackets: 0, inBytes: 0, outBytes: 0 };

function traffic(c: IpvsCounters, rate: IpvsRates | null): IpvsTraffic {
  return { conns: c.conns, inPackets: c.inPackets, outPackets: c.outPackets, inBytes: c.inBytes, outBytes: c.outBytes, rate };
}

function chain(name: string, policy: string | null, rules: KernelRule[], packets = 0, bytes = 0, ipvs?: VirtualServerFacts): KernelChain {
  return { name, builtin: false, policy, packets, bytes, rules, ...(ipvs ? { ipvs } : {}) };
}

/** realServerRule is one real server with its figures; weight 0 counts as draining only when kproxy drains it. */
function realServerRule(vsKey: string, rs: IpvsRealServer, c: IpvsCounters, rate: IpvsRates | null, drains: DrainIndex): KernelRule {
  const since = rs.weight === 0 ? drains.get(`${vsKey}/${realServerKey(rs)}`) : undefined;
  const ipvs: RealServerFacts = {
    address: rs.address,
    port: rs.port,
    forward: FORWARD_TITLE[rs.forward],
    weight: rs.weight,
    active: rs.activeConns ?? 0,
    inactive: rs.inactiveConns ?? 0,
    draining: since !== undefined,
    ...(since !== undefined ? { drainingSince: since } : {}),
    ...traffic(c, rate),
  };
  return { spec: realServerSpec(rs), target: null, packets: c.inPackets + c.outPackets, bytes: c.inBytes + c.outBytes, ipvs };
}

function virtualServerChain(s: IpvsService, stats: IpvsServiceStats | undefined, rates: RateTracker | null, drains: DrainIndex): KernelChain {
  const vsKey = virtualServerKey(s);
  const vc = stats?.counters ?? ZERO;
  let active = 0;
  let inactive = 0;
  const rules = [...s.reals].sort(compareReals).map((rs) => {
    active += rs.activeConns ?? 0;
    inactive += rs.inactiveConns ?? 0;
    const rk = realServerKey(rs);
    const c = stats?.reals.get(rk) ?? ZERO;
    return realServerRule(vsKey, rs, c, rates?.rate(`${vsKey}/${rk}`, c) ?? null, drains);
  });
  const facts: VirtualServerFacts = {
    protocol: s.protocol,
    address: s.address,
    port: s.port,
    scheduler: s.scheduler,
    persistence: s.persistence,
    flags: s.schedFlags,
    active,
    inactive,
    ...traffic(vc, rates?.rate(vsKey, vc) ?? null),
  };
  return chain(virtualServerName(s), schedulerPolicy(s), rules, vc.inPackets + vc.outPackets, vc.inBytes + vc.outBytes, facts);
}

function table(name: string, chains: Iterable<KernelChain>): KernelTable {
  return { name, chains: new Map([...chains].map((c) => [c.name, c])) };
}

/**
 * virtualServerTable is the "ipvs" table from `ipvsadm -Ln --exact` (weights,
 * connections) joined with `--stats --exact` (traffic); rates come from the
 * tracker (null: none). A virtual server the stats listing missed (created
 * between the two listings) shows zero traffic.
 */
export async function virtualServerTable(
  services: readonly IpvsService[],
  stats: ReadonlyMap<string, IpvsServiceStats>,
  rates: RateTracker | null,
  drains: DrainIndex,
  pause: Yield,
): Promise<KernelTable> {
  const sorted = [...services].sort(compareServices);
  const chains: KernelChain[] = [];
  for (let i = 0; i < sorted.length; i++) {
    if (i > 0 && i % CHUNK === 0) await pause();
    chains.push(virtualServerChain(sorted[i], stats.get(virtualServerKey(sorted[i])), rates, drains));
  }
  return table(IPVS_TABLE, chains);
}

/** sortMembers orders set members for reading: ports numerically, everything else as text. */
export function sortMembers(members: Iterable<string>): string[] {
  const list = [...members];
  if (list.every((m) => /^\d+$/.test(m))) return list.sort((a, b) => Number(a) - Number(b));
  return list.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

const memberRule = (m: string): KernelRule => ({ spec: m, target: null, packets: 0, bytes: 0 });

/** setTable is the "ipsets" table: every set the kernel lists (kproxy's and others'), members sorted. */
export function setTable(sets: Iterable<IpsetSet>): KernelTable {
  const list = [...sets].sort((a, b) => (a.name < b.name ? -1 : 1));
  return table(
    SETS_TABLE,
    list.map((s) => chain(s.name, setPolicy(s), sortMembers(s.entries).map(memberRule))),
  );
}

const byAddress = (a: string, b: string) => compareReals({ address: a, port: 0 }, { address: b, port: 0 });

/** addressTable is the "addresses" table: kube-ipvs0's addresses, or no chain when the link is missing. */
export function addressTable(addresses: readonly InterfaceAddress[] | undefined): KernelTable {
  if (!addresses) return table(ADDRESSES_TABLE, []);
  const sorted = [...addresses].sort((a, b) => byAddress(a.address, b.address));
  return table(ADDRESSES_TABLE, [
    chain(
      DUMMY_DEVICE,
      null,
      sorted.map((a) => memberRule(`${a.address}/${a.prefixLength}`)),
    ),
  ]);
}

/**
 * canonicalSet spells entries as `ipset save` lists them, so equal sets compare
 * equal. Only nets can be spelled two ways ("1.2.3.4/32" is listed "1.2.3.4");
 * the builder's addresses and ports are canonical already, and re-parsing a
 * 50,000-member KUBE-LOOP-BACK would cost a quarter second for nothing.
 */
function canonicalSet(s: IpsetSet): IpsetSet {
  if (s.type !== 'hash:ip,port,net') return s;
  return { ...s, entries: new Set([...s.entries].map((e) => canonicalEntry(s.type, e) ?? e)) };
}

/**
 * plannedTables are the IPVS-side tables kproxy believes the kernel holds:
 * the wanted virtual servers with their real servers at weight 1 plus the
 * draining ones at weight 0, every set of IPVS mode with its entries, and
 * kube-ipvs0 with its addresses. Figures are zero (nothing was counted).
 */
export async function plannedTables(p: IpvsIntent, pause: Yield): Promise<KernelTable[]> {
  const drainsByVs = new Map<string, DrainingRealServer[]>();
  for (const d of p.draining) (drainsByVs.get(d.vsKey) ?? drainsByVs.set(d.vsKey, []).get(d.vsKey)!).push(d);
  const drains = drainIndex(p.draining);
  const wanted = [...p.virtualServers.values()].sort((a, b) => compareServices(a.vs, b.vs));
  const chains: KernelChain[] = [];
  for (let i = 0; i < wanted.length; i++) {
    if (i > 0 && i % CHUNK === 0) await pause();
    const w = wanted[i];
    const reals: IpvsRealServer[] = [...w.reals.values()];
    for (const d of drainsByVs.get(w.key) ?? []) if (!w.reals.has(realServerKey(d.rs))) reals.push({ address: d.rs.address, port: d.rs.port, weight: 0, forward: 'masq' });
    chains.push(virtualServerChain({ ...w.vs, reals }, undefined, null, drains));
  }
  const sets = p.link || p.sets.size ? IPSETS.map((info) => canonicalSet({ ...setSpec(info, p.family), entries: p.sets.get(info.key) ?? new Set<string>() })) : [];
  const addresses = p.link ? [...p.binds].map((ip): InterfaceAddress => ({ ifname: DUMMY_DEVICE, family: p.family, address: ip, prefixLength: ip.includes(':') ? 128 : 32 })) : undefined;
  return [table(IPVS_TABLE, chains), setTable(sets), addressTable(addresses)];
}

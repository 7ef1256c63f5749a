/**
 * edge-expectations: what "programmed exactly" means for an edge case
 * (edge-cluster.ts), read back from its objects and decided as kube-proxy
 * does (written from its rules, not from kproxy's code): for every service
 * port of every family the node runs, where a new connection to each of its
 * addresses must go, and which sources its firewall lets in and keeps out.
 * Re-exported by edge-cluster.ts.
 */
import { ipFromBigInt, ipToBigInt, parseCIDR, type IPFamily } from '../../../server/net/ip.ts';
import type { EndpointSlice, Node, Service } from '../../../server/proxy/kube-objects.ts';
import { EXTERNAL_CLIENT, NODE_IPS, POD_CLIENT_INDEX, type EdgeCase } from './edge-cluster.ts';

const family6 = (ip: string): IPFamily => (ip.includes(':') ? 'IPv6' : 'IPv4');

export type EdgeProto = 'tcp' | 'udp' | 'sctp';
export type EdgeFrom = 'pod' | 'external' | 'node';

/** EdgeDestination is one address of a service port and what a new connection to it must reach. */
export interface EdgeDestination {
  readonly kind: 'cluster IP' | 'external IP' | 'load balancer IP' | 'node port';
  readonly proto: EdgeProto;
  readonly ip: string;
  readonly port: number;
  /** from: where a trace's packet enters (a pod of this node for the cluster IP, a client outside the cluster for the rest). */
  readonly from: EdgeFrom;
  /** src: the packet's source (for a load balancer IP with source ranges, the first allowed source). */
  readonly src: string;
  /** policy: the traffic policy that decides (internalTrafficPolicy for the cluster IP, externalTrafficPolicy for the rest). */
  readonly policy: 'Cluster' | 'Local';
  /** endpoints: "ip:port" ("[ip]:port" for IPv6) a new connection may reach, sorted; empty: it must reach none (refused or dropped). */
  readonly endpoints: readonly string[];
}

/** EdgeExpectation is what "programmed exactly" means for one service port of one family. */
export interface EdgeExpectation {
  /** servicePort: "ns/name:port" ("ns/name" for an unnamed port), kube-proxy's service port name. */
  readonly servicePort: string;
  readonly family: IPFamily;
  readonly protocol: 'TCP' | 'UDP' | 'SCTP';
  readonly destinations: readonly EdgeDestination[];
  /** endpoints: every endpoint some destination reaches (sorted). */
  readonly endpoints: readonly string[];
  /** clusterEndpoints / localEndpoints: the endpoints of each policy (kube-proxy's CategorizeEndpoints). */
  readonly clusterEndpoints: readonly string[];
  readonly localEndpoints: readonly string[];
  /** hasEndpoints: some usable endpoint exists anywhere (none: REJECT; only elsewhere under a Local policy: DROP). */
  readonly hasEndpoints: boolean;
  /** sourceRanges: the port's loadBalancerSourceRanges of this family (canonical), empty when unfiltered. */
  readonly sourceRanges: readonly string[];
  /**
   * allowedSources / deniedSources: for its load balancer IPs, sources just
   * inside (first and last address) and just outside (the address before and
   * after) each range; with many ranges a sample: the first and last four and
   * evenly spread ones between (sampledRanges). Without source ranges,
   * allowedSources is an outside client and deniedSources is empty.
   */
  readonly allowedSources: readonly string[];
  readonly deniedSources: readonly string[];
}

export interface ExpectationOptions {
  /** sampledRanges: how many of a port's source ranges to take sources from (default 64; Infinity: all). */
  readonly sampledRanges?: number;
}

interface Ep {
  readonly key: string;
  readonly local: boolean;
  readonly ready: boolean;
  readonly serving: boolean;
  readonly terminating: boolean;
  readonly zoneHints: readonly string[];
}

const hostPort = (ip: string, port: number) => (ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`);
const sorted = (xs: Iterable<string>) => [...new Set(xs)].sort();

/** nodeFacts reads the case's own Node: its zone and InternalIP per family. */
function nodeFacts(c: EdgeCase): { zone: string; ips: Partial<Record<IPFamily, string>> } {
  const n = c.objects.find((o): o is Node => o.kind === 'Node' && o.metadata?.name === c.node);
  const ips: Partial<Record<IPFamily, string>> = {};
  for (const a of n?.status?.addresses ?? []) if (a.type === 'InternalIP' && a.address) ips[family6(a.address)] ??= a.address;
  return { zone: n?.metadata?.labels?.['topology.kubernetes.io/zone'] ?? '', ips };
}

/**
 * categorize decides a port's endpoints as kube-proxy's CategorizeEndpoints
 * does: Cluster policy takes the ready endpoints (narrowed to this zone's when
 * every ready endpoint has zone hints and one names this zone), or, with none
 * ready, the serving terminating ones; Local policy takes this node's ready
 * endpoints, or, with none ready here, this node's serving terminating ones.
 */
function categorize(eps: readonly Ep[], zone: string): { cluster: string[]; local: string[]; hasAny: boolean } {
  const ready = eps.filter((e) => e.ready);
  const hinted = ready.length > 0 && zone !== '' && ready.every((e) => e.zoneHints.length > 0) && ready.some((e) => e.zoneHints.includes(zone));
  let cluster = hinted ? ready.filter((e) => e.zoneHints.includes(zone)) : ready;
  if (cluster.length === 0) cluster = eps.filter((e) => e.serving && e.terminating);
  const localReady = eps.filter((e) => e.local && e.ready);
  const local = localReady.length > 0 ? localReady : eps.filter((e) => e.local && e.serving && e.terminating);
  const hasAny = eps.some((e) => e.ready || (e.serving && e.terminating));
  return { cluster: sorted(cluster.map((e) => e.key)), local: sorted(local.map((e) => e.key)), hasAny };
}

/** boundarySources: the first and last address of each sampled range (allowed) and the addresses around it that no range holds (denied). */
function boundarySources(ranges: readonly string[], f: IPFamily, sample: number): { allowed: string[]; denied: string[] } {
  const bits = f === 'IPv4' ? 32 : 128;
  const spans = ranges.map((r) => {
    const c = parseCIDR(r)!;
    const first = ipToBigInt(c.ip)!;
    return { first, last: first + (1n << BigInt(bits - c.prefix)) - 1n };
  });
  // Sorted by start, so "does any range hold x" is a binary search over ranges that may overlap (the longest reach so far kept).
  const byStart = [...spans].sort((a, b) => (a.first < b.first ? -1 : a.first > b.first ? 1 : 0));
  const reach: bigint[] = [];
  for (const s of byStart) reach.push(reach.length && reach[reach.length - 1] > s.last ? reach[reach.length - 1] : s.last);
  const inAny = (x: bigint) => {
    let lo = 0;
    let hi = byStart.length - 1;
    let at = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (byStart[mid].first <= x) {
        at = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return at >= 0 && reach[at] >= x;
  };
  const picked = new Set<number>();
  const n = spans.length;
  if (sample >= n) for (let i = 0; i < n; i++) picked.add(i);
  else {
    for (let i = 0; i < Math.min(4, n); i++) picked.add(i).add(n - 1 - i);
    const spread = Math.max(0, sample - picked.size);
    for (let i = 1; i <= spread; i++) picked.add(Math.floor((i * (n - 1)) / (spread + 1)));
  }
  const max = (1n << BigInt(bits)) - 1n;
  const node = ipToBigInt(NODE_IPS[f])!;
  const allowed: string[] = [];
  const denied: string[] = [];
  for (const i of [...picked].sort((a, b) => a - b)) {
    const { first, last } = spans[i];
    allowed.push(ipFromBigInt(first, f));
    if (last !== first) allowed.push(ipFromBigInt(last, f));
    for (const x of [first - 1n, last + 1n]) if (x >= 0n && x <= max && x !== node && !inAny(x)) denied.push(ipFromBigInt(x, f));
  }
  return { allowed: [...new Set(allowed)], denied: [...new Set(denied)] };
}

/**
 * expectations says, for every service port of every family the node runs,
 * where a new connection to each of its addresses must go. Read from the
 * case's objects, so it holds for any case, fixed or random.
 */
export function expectations(c: EdgeCase, opts: ExpectationOptions = {}): EdgeExpectation[] {
  const sample = opts.sampledRanges ?? 64;
  const facts = nodeFacts(c);
  const slices = new Map<string, EndpointSlice[]>();
  for (const o of c.objects) {
    if (o.kind !== 'EndpointSlice') continue;
    const s = o as EndpointSlice;
    const key = `${s.metadata?.namespace}/${s.metadata?.labels?.['kubernetes.io/service-name']}`;
    if (!slices.has(key)) slices.set(key, []);
    slices.get(key)!.push(s);
  }
  const out: EdgeExpectation[] = [];
  for (const o of c.objects) {
    if (o.kind !== 'Service') continue;
    const svc = o as Service;
    const spec = svc.spec!;
    const ns = svc.metadata!.namespace!;
    const name = svc.metadata!.name!;
    for (const f of c.families) {
      const clusterIP = (spec.clusterIPs ?? []).find((ip) => family6(ip) === f);
      if (!clusterIP) continue;
      const lbIPs = (svc.status?.loadBalancer?.ingress ?? []).map((i) => i.ip!).filter((ip) => ip && family6(ip) === f);
      const externalIPs = (spec.externalIPs ?? []).filter((ip) => family6(ip) === f);
      const ranges = (spec.loadBalancerSourceRanges ?? []).filter((r) => family6(r) === f).map((r) => parseCIDR(r)!.text);
      const sources = ranges.length > 0 ? boundarySources(ranges, f, sample) : { allowed: [EXTERNAL_CLIENT[f]], denied: [] };
      // The node's own address in a range also lets the load balancer IP itself in (kube-proxy's allowFromNode); not a source traced here.
      const itpLocal = spec.internalTrafficPolicy === 'Local';
      const etpLocal = spec.externalTrafficPolicy === 'Local';
      for (const p of spec.ports ?? []) {
        const portName = p.name ?? '';
        const protocol = (p.protocol ?? 'TCP') as EdgeExpectation['protocol'];
        const seen = new Set<string>();
        const eps: Ep[] = [];
        for (const s of slices.get(`${ns}/${name}`) ?? []) {
          if (s.addressType !== f) continue;
          const sp = (s.ports ?? []).find((x) => (x.name ?? '') === portName && (x.protocol ?? 'TCP') === protocol);
          if (!sp?.port) continue;
          for (const e of s.endpoints ?? []) {
            const key = hostPort(e.addresses![0], sp.port);
            if (seen.has(key)) continue;
            seen.add(key);
            eps.push({
              key,
              local: e.nodeName === c.node,
              ready: e.conditions?.ready ?? true,
              serving: e.conditions?.serving ?? e.conditions?.ready ?? true,
              terminating: e.conditions?.terminating ?? false,
              zoneHints: (e.hints?.forZones ?? []).map((z) => z.name ?? ''),
            });
          }
        }
        const cat = categorize(eps, facts.zone);
        const proto = protocol.toLowerCase() as EdgeProto;
        const podClient = podClientOf(c, f);
        const ext = etpLocal ? cat.local : cat.cluster;
        const d: EdgeDestination[] = [
          { kind: 'cluster IP', proto, ip: clusterIP, port: p.port!, from: 'pod', src: podClient, policy: itpLocal ? 'Local' : 'Cluster', endpoints: itpLocal ? cat.local : cat.cluster },
        ];
        const external = (kind: EdgeDestination['kind'], ip: string, port: number, src = EXTERNAL_CLIENT[f]) =>
          d.push({ kind, proto, ip, port, from: 'external', src, policy: etpLocal ? 'Local' : 'Cluster', endpoints: ext });
        for (const ip of externalIPs) external('external IP', ip, p.port!);
        for (const ip of lbIPs) external('load balancer IP', ip, p.port!, sources.allowed[0]);
        if (p.nodePort && facts.ips[f]) external('node port', facts.ips[f]!, p.nodePort);
        out.push({
          servicePort: portName ? `${ns}/${name}:${portName}` : `${ns}/${name}`,
          family: f,
          protocol,
          destinations: d,
          endpoints: sorted(d.flatMap((x) => x.endpoints)),
          clusterEndpoints: cat.cluster,
          localEndpoints: cat.local,
          hasEndpoints: cat.hasAny,
          sourceRanges: ranges,
          allowedSources: lbIPs.length ? sources.allowed : [],
          deniedSources: lbIPs.length ? sources.denied : [],
        });
      }
    }
  }
  return out;
}

/** podClientOf: an address of this node's pod CIDR (its Node's podCIDRs) that no endpoint uses, the source of "from a pod" traces. */
export function podClientOf(c: EdgeCase, f: IPFamily): string {
  const n = c.objects.find((o): o is Node => o.kind === 'Node' && o.metadata?.name === c.node);
  const cidr = (n?.spec?.podCIDRs ?? []).map((x) => parseCIDR(x)).find((x) => x?.family === f);
  if (!cidr) throw new Error(`case ${c.name}: its node has no ${f} pod CIDR`);
  return ipFromBigInt(ipToBigInt(cidr.ip)! + BigInt(POD_CLIENT_INDEX + 2), f);
}

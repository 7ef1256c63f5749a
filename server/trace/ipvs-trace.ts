import type { KernelChain } from '../dashboard/kernel-view.ts';
import type { TraceStep } from '../dashboard/protocol.ts';
import { cidrContains, parseCIDR } from '../net/ip.ts';
import { newFlow, withStep, type Finished, type Flow } from './flow.ts';
import type { MatchEnv, SetMatcher } from './iptables-rule.ts';
import { iptablesJourney, IptablesWalker, localOf, type IpvsStages } from './iptables-walk.ts';
import { commentOf } from './service-names.ts';
import type { ExplainInput, ModeTracer } from './mode.ts';
import { hostPort, isLocalAddress, type NodeFacts, type Packet } from './packet.ts';
import { dnatReason, notServiceReason, sourceRangeReason, target, unknownPortReason } from './reason.ts';
import { percent } from './result.ts';
import type { Stage } from './stages.ts';
import type { TraceTables } from './tables.ts';

/**
 * IPVS mode: the iptables rules IPVS mode still writes (matching kube-proxy's
 * ipsets, read from the "ipsets" table), then the virtual server for the
 * packet's protocol, address and port (the "ipvs" table) with its real
 * servers, weights and scheduler. IPVS takes packets for its addresses where
 * it hooks into netfilter: LOCAL_IN after filter INPUT, LOCAL_OUT right after
 * nat OUTPUT; it forwards them DNATed out through OUTPUT and POSTROUTING
 * (ip_vs_nat_xmit). A virtual server without real servers answers ICMP port
 * unreachable (ip_vs_leave). The kernels kproxy is tested on have no IPVS, so
 * this part is checked against the IPVS mode's simulated kernel only.
 */

const IPVS_TABLE = 'ipvs';
const SETS_TABLE = 'ipsets';
const ADDRESSES_TABLE = 'addresses';

interface Members {
  readonly dims: readonly string[];
  readonly exact: ReadonlySet<string>;
  /** nets: hash:ip,port,net members as head ("10.0.0.21,tcp:80") → networks. */
  readonly nets: ReadonlyMap<string, readonly ReturnType<typeof parseCIDR>[]>;
}

const members = new WeakMap<KernelChain, Members>();

function membersOf(chain: KernelChain): Members {
  let m = members.get(chain);
  if (!m) {
    const type = (chain.policy ?? '').split(' ')[0];
    const dims = type.replace(/^(hash|bitmap):/, '').split(',');
    const exact = new Set<string>();
    const nets = new Map<string, ReturnType<typeof parseCIDR>[]>();
    for (const r of chain.rules) {
      if (dims[2] === 'net') {
        const i = r.spec.lastIndexOf(',');
        const head = r.spec.slice(0, i);
        const last = r.spec.slice(i + 1);
        const net = parseCIDR(last.includes('/') ? last : `${last}/${last.includes(':') ? 128 : 32}`);
        (nets.get(head) ?? nets.set(head, []).get(head)!).push(net);
      } else exact.add(r.spec);
    }
    m = { dims, exact, nets };
    members.set(chain, m);
  }
  return m;
}

/** ipsetMatcher answers `-m set --match-set NAME FLAGS` from the read's "ipsets" table. */
function ipsetMatcher(t: TraceTables): SetMatcher {
  return (name, flags, p) => {
    const chain = t.chain(SETS_TABLE, name);
    if (!chain) return null;
    const m = membersOf(chain);
    const bitmap = (chain.policy ?? '').startsWith('bitmap:');
    const part = (dim: string, dir: string | undefined): string | null => {
      const src = dir === 'src';
      if (dim === 'ip') return src ? p.src : p.dst;
      if (dim === 'port') {
        const port = src ? p.srcPort : p.dstPort;
        if (port === null) return null;
        return bitmap ? String(port) : `${p.proto}:${port}`;
      }
      return null;
    };
    const parts: string[] = [];
    for (let i = 0; i < m.dims.length; i++) {
      if (m.dims[i] === 'net') {
        const ip = flags[i] === 'src' ? p.src : p.dst;
        const nets = m.nets.get(parts.join(',')) ?? [];
        return nets.some((n) => n !== null && (n.family === 'IPv6') === ip.includes(':') && cidrContains(n, ip));
      }
      const v = part(m.dims[i], flags[i]);
      if (v === null) return null;
      parts.push(v);
    }
    return m.exact.has(parts.join(','));
  };
}

/** SHARE: how each scheduler spreads new connections over real servers, for the step's note. */
function schedulerShare(scheduler: string): { byWeight: boolean; note: string } {
  switch (scheduler) {
    case 'rr':
      return { byWeight: false, note: 'round robin over real servers with weight > 0' };
    case 'wrr':
      return { byWeight: true, note: 'weighted round robin' };
    case 'sh':
    case 'dh':
    case 'mh':
      return { byWeight: true, note: `${scheduler}: a hash of the ${scheduler === 'dh' ? 'destination' : 'source'} address picks one (shares by weight over many clients)` };
    default:
      return { byWeight: true, note: `${scheduler}: the choice depends on current connections (shares by weight when the servers are equally busy)` };
  }
}

function virtualServerStage(t: TraceTables, hook: string): Stage {
  return (flow: Flow) => {
    const p = flow.pkt;
    if (p.ipvs) return { going: [flow], done: [] };
    const name = `${p.proto.toUpperCase()} ${hostPort(p.dst, p.dstPort)}`;
    const vs = t.chain(IPVS_TABLE, name);
    if (!vs) return { going: [flow], done: [] };
    const scheduler = vs.ipvs?.scheduler ?? (vs.policy ?? 'wlc').split(' ')[0];
    const persistence = vs.ipvs?.persistence ?? Number(/persistent (\d+)/.exec(vs.policy ?? '')?.[1] ?? 0);
    const reals = vs.rules.map((r, index) => ({ r, index, weight: r.ipvs?.weight ?? Number(/weight (\d+)/.exec(r.spec)?.[1] ?? 0) })).filter((x) => x.weight > 0);
    const tableName = t.name(IPVS_TABLE);
    if (reals.length === 0) {
      const s: TraceStep = {
        table: tableName,
        chain: vs.name,
        hook: 'ipvs',
        rule: null,
        index: null,
        packets: vs.packets,
        bytes: vs.bytes,
        verdict: 'no real server: ICMP port unreachable',
        note: vs.rules.length ? `${vs.rules.length} real server${vs.rules.length === 1 ? '' : 's'} at weight 0 (draining) take no new connections` : 'the virtual server has no real servers',
      };
      return { going: [], done: [{ flow: withStep(flow, s), end: 'reject', by: s }] };
    }
    const share = schedulerShare(scheduler);
    const total = share.byWeight ? reals.reduce((n, x) => n + x.weight, 0) : reals.length;
    const going = reals.map(({ r, index, weight }) => {
      const chance = (share.byWeight ? weight : 1) / total;
      const address = r.ipvs ? hostPort(r.ipvs.address, r.ipvs.port) : (/-> (\S+)/.exec(r.spec)?.[1] ?? '');
      const hp = r.ipvs ? { ip: r.ipvs.address, port: r.ipvs.port } : { ip: address.replace(/^\[|\]?:\d+$/g, ''), port: Number(address.split(':').at(-1)) };
      const s: TraceStep = {
        table: tableName,
        chain: vs.name,
        hook,
        rule: r.spec,
        index,
        packets: r.packets,
        bytes: r.bytes,
        verdict: `DNAT to ${address}`,
        note: `scheduler ${share.note}: ${percent(chance)}`,
      };
      let f: Flow = { ...withStep(flow, s), p: flow.p * chance, pkt: { ...p, dst: hp.ip, dstPort: hp.port, dnat: true, ipvs: true } };
      if (persistence > 0)
        f = { ...f, affinity: [...f.affinity, { chain: vs.name, text: `persistent ${persistence} s: a client's new connections within ${persistence} s of its last go to the same real server` }] };
      return f;
    });
    return { going, done: [] };
  };
}

/** withKubeIpvs0: the addresses IPVS mode binds on kube-ipvs0 are the node's own (addrtype LOCAL, the routing decision). */
function withKubeIpvs0(t: TraceTables, facts: NodeFacts): NodeFacts {
  const link = t.chain(ADDRESSES_TABLE, 'kube-ipvs0');
  if (!link || link.rules.length === 0) return facts;
  let bound = boundOf.get(link);
  if (!bound) {
    // Once per read: a big node binds every service address there (20,000 at 10,000 Services).
    bound = new Set(link.rules.map((r) => r.spec.split('/')[0]));
    boundOf.set(link, bound);
  }
  const own = facts.localAddresses;
  const all = bound;
  return { ...facts, localAddresses: { has: (ip) => own.has(ip) || all.has(ip) } };
}

const boundOf = new WeakMap<KernelChain, ReadonlySet<string>>();

/** virtualServersOf lists a table's virtual servers by address ("TCP 10.96.0.10:80" under 10.96.0.10), once per read. */
function virtualServersOf(t: TraceTables): ReadonlyMap<string, readonly string[]> {
  const table = t.table(IPVS_TABLE);
  if (!table) return new Map();
  let m = byAddressOf.get(table);
  if (!m) {
    const out = new Map<string, string[]>();
    for (const name of table.chains.keys()) {
      const a = /^\S+ \[?([^\]]+?)\]?:\d+$/.exec(name)?.[1];
      if (a) (out.get(a) ?? out.set(a, []).get(a)!).push(name);
    }
    m = out;
    byAddressOf.set(table, m);
  }
  return m;
}

const byAddressOf = new WeakMap<object, ReadonlyMap<string, readonly string[]>>();

function ipvsStages(t: TraceTables): IpvsStages {
  return { localIn: virtualServerStage(t, 'input'), localOut: virtualServerStage(t, 'output') };
}

function virtualServerOf(steps: readonly TraceStep[]): string | null {
  return steps.find((s) => s.table === IPVS_TABLE)?.chain ?? null;
}

export const ipvsTracer: ModeTracer = {
  kind: 'ipvs',
  sharedTables: [IPVS_TABLE, SETS_TABLE, ADDRESSES_TABLE],
  walk(tables: TraceTables, pkt: Packet, facts: NodeFacts): Finished[] {
    const env: MatchEnv = { facts: withKubeIpvs0(tables, facts), sets: ipsetMatcher(tables) };
    return iptablesJourney(new IptablesWalker(tables, env), newFlow(pkt), localOf(env), ipvsStages(tables));
  },
  serviceAccept(s: TraceStep): boolean {
    // IPVS mode accepts service traffic in nat KUBE-SERVICES only to hand it to IPVS: the virtual server decides.
    return s.verdict === 'ACCEPT' && s.chain === 'KUBE-NODE-PORT' && s.table.endsWith('filter');
  },
  explain(i: ExplainInput): { service: string | null; reason: string } {
    const { summary: s, q } = i;
    const top = s.main[0]?.f;
    const steps = top ? top.flow.steps : s.path;
    const byAddress = i.names?.byAddress(q.proto, q.dst, q.dstPort) ?? null;
    const nodePort = byAddress ? null : (i.names?.byNodePort(q.proto, q.dstPort) ?? null);
    const svc = byAddress?.name ?? nodePort;
    const kind = byAddress?.kind ?? (nodePort ? 'node port' : null);
    const vs = virtualServerOf(steps);
    const by = top?.by ?? null;
    switch (s.verdict) {
      case 'dnat': {
        const chain = i.tables.chain(IPVS_TABLE, vs ?? '');
        const scheduler = chain?.ipvs?.scheduler ?? (chain?.policy ?? '').split(' ')[0];
        const label = svc ?? `virtual server ${vs}`;
        const reason = dnatReason(label, kind, q, s, null, `IPVS scheduler ${scheduler}`);
        // kube-proxy's IPVS mode falls back to every endpoint when a Local policy finds none on this node (kubernetes#97081).
        const local = steps.some((x) => /externalTrafficPolicy=local/.test(commentOf(x.rule) ?? ''));
        return {
          service: svc,
          reason: local ? `${reason}; externalTrafficPolicy Local (IPVS mode falls back to every endpoint when none is on this node; replies from another node's then miss the client)` : reason,
        };
      }
      case 'reject':
        if (by?.table === IPVS_TABLE) {
          return {
            service: svc,
            reason: `${svc ?? target(q)}: virtual server ${vs} has no real server (no ready endpoints, or a Local traffic policy and none on this node), so IPVS answers ICMP port unreachable: the connection is refused`,
          };
        }
        if (by?.chain === 'KUBE-IPVS-FILTER') {
          const ports = (virtualServersOf(i.tables).get(q.dst) ?? []).map((n) => `${n.split(':').at(-1)}/${n.split(' ')[0].toLowerCase()}`);
          return {
            service: null,
            reason: unknownPortReason(
              q,
              i.names?.portsOf(q.dst) ?? (ports.length ? { name: `virtual servers of ${q.dst}`, ports } : null),
              'service address',
              'refused by KUBE-IPVS-FILTER (the address is on kube-ipvs0, the port is no virtual server)',
            ),
          };
        }
        return { service: svc, reason: `${target(q)} is refused by ${by ? `${by.table} ${by.chain}` : 'the rules'}` };
      case 'drop':
        if (by?.chain === 'KUBE-SOURCE-RANGES-FIREWALL')
          return { service: svc, reason: sourceRangeReason(svc, q, 'KUBE-SOURCE-RANGES-FIREWALL: the address and port are in KUBE-LOAD-BALANCER-FW, the source in neither source set') };
        return { service: svc, reason: `${target(q)} is dropped by ${by ? `${by.table} ${by.chain}${by.rule ? ` (${commentOf(by.rule) ?? by.rule})` : ' (policy)'}` : 'the rules'}` };
      case 'accept': {
        const hc = steps.some((x) => x.verdict === 'ACCEPT' && /health check node port/.test(commentOf(x.rule) ?? ''));
        if (hc) return { service: svc, reason: `${target(q)} is a health check node port (KUBE-HEALTH-CHECK-NODE-PORT): accepted (filter KUBE-NODE-PORT), answered by kproxy's health server` };
        return { service: svc, reason: `${target(q)} is accepted without a virtual server` };
      }
      default: {
        const local = isLocalAddress(withKubeIpvs0(i.tables, i.facts), q.dst);
        const owner = i.names?.portsOf(q.dst) ?? null;
        if (owner) return { service: null, reason: unknownPortReason(q, owner, 'service address', `no virtual server takes it; it ${local ? 'goes to the node itself' : 'is routed as it is'}`) };
        return { service: null, reason: notServiceReason(q, local) };
      }
    }
  },
};

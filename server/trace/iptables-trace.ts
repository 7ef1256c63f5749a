import type { TraceStep } from '../dashboard/protocol.ts';
import type { Finished } from './flow.ts';
import { newFlow } from './flow.ts';
import type { MatchEnv } from './iptables-rule.ts';
import { iptablesJourney, IptablesWalker, localOf } from './iptables-walk.ts';
import type { ExplainInput, ModeTracer } from './mode.ts';
import { isLocalAddress, type NodeFacts, type Packet } from './packet.ts';
import { dnatReason, noEndpointsReason, noLocalReason, notServiceReason, sourceRangeReason, target, unknownPortReason } from './reason.ts';
import { candidates } from './dst-index.ts';
import { commentOf, serviceInComment } from './service-names.ts';
import type { TraceTables } from './tables.ts';

/**
 * iptables mode: the packet through nat and filter as the kernel lists them
 * (`iptables-save -c`, both flavours), explained from kube-proxy's rule
 * comments ("ns/name:port cluster IP", "… has no endpoints").
 */

/** KIND_SUFFIX: how KUBE-SERVICES comments name the address a rule catches. */
const KIND_SUFFIX: readonly [string, string][] = [
  [' cluster IP', 'cluster IP'],
  [' external IP', 'external IP'],
  [' loadbalancer IP', 'load balancer IP'],
];

/** serviceOfSteps: the first service port a kproxy rule on the way names. */
export function serviceOfSteps(steps: readonly TraceStep[]): string | null {
  for (const s of steps) {
    if (!s.chain.startsWith('KUBE-')) continue;
    const svc = serviceInComment(commentOf(s.rule));
    if (svc) return svc;
  }
  return null;
}

/** kindOfSteps: which of a service's addresses the packet was caught by (cluster IP, external IP, load balancer IP, node port). */
export function kindOfSteps(steps: readonly TraceStep[]): string | null {
  for (const s of steps) {
    const c = commentOf(s.rule);
    if (c && s.chain === 'KUBE-SERVICES') for (const [suffix, kind] of KIND_SUFFIX) if (c.endsWith(suffix)) return kind;
    if (s.chain === 'KUBE-NODEPORTS' || s.chain === 'KUBE-NODE-PORT') return 'node port';
  }
  return null;
}

/**
 * addressOwner finds the service ports listening on an address from the
 * rules themselves (KUBE-SERVICES in nat, and filter's rejects for ports
 * without endpoints), for "port 81 is not a port of …".
 */
function addressOwner(t: TraceTables, ip: string): { name: string; ports: string[]; kind: string } | null {
  const ports = new Set<string>();
  let name: string | null = null;
  let kind = 'service address';
  for (const [table, chain] of [
    ['nat', 'KUBE-SERVICES'],
    ['filter', 'KUBE-SERVICES'],
    ['filter', 'KUBE-EXTERNAL-SERVICES'],
  ] as const) {
    const c = t.chain(table, chain);
    if (!c) continue;
    // The chain's rules for this destination (the index of the walk: no pass over 10,000 rules).
    for (const i of candidates(c, ip, 0)) {
      const r = c.rules[i];
      if (!new RegExp(`-d ${ip.replace(/[.]/g, '\\.')}(?:/(?:32|128))?(?: |$)`).test(r.spec)) continue;
      const port = /--dport (\d+)/.exec(r.spec)?.[1];
      const proto = /-p (\w+)/.exec(r.spec)?.[1];
      if (port && proto) ports.add(`${port}/${proto}`);
      const cm = commentOf(r.spec);
      name ??= serviceInComment(cm);
      if (cm) for (const [suffix, k] of KIND_SUFFIX) if (cm.endsWith(suffix)) kind = k;
    }
  }
  return name ? { name: name.replace(/:[^:/]*$/, ''), ports: [...ports].sort(), kind } : null;
}

function explainStop(f: Finished, i: ExplainInput, svc: string | null): string {
  const by = f.by;
  const q = i.q;
  const c = commentOf(by?.rule ?? null) ?? '';
  const where = by ? `${by.verdict.split(' ')[0]} in ${by.table} ${by.chain}` : 'stopped';
  if (by && c.endsWith(' has no endpoints')) return noEndpointsReason(serviceInComment(c) ?? svc, q, where);
  if (by && c.endsWith(' has no local endpoints')) {
    const policy = by.chain === 'KUBE-EXTERNAL-SERVICES' ? 'externalTrafficPolicy' : 'internalTrafficPolicy';
    return noLocalReason(policy, serviceInComment(c) ?? svc, q, where);
  }
  if (by && / traffic not accepted by KUBE-FW-/.test(c)) return sourceRangeReason(serviceInComment(c) ?? svc, q, `${where}: the firewall chain did not let it through to DNAT`);
  if (by && c === 'block incoming localnet connections') return `${target(q)}: packets to 127.0.0.0/8 from another host are dropped (${where}, the guard for node ports on localhost)`;
  if (!by) return `${target(q)} was stopped`;
  const what = by.rule === null ? `by the ${by.chain} chain's policy` : `by ${by.table} ${by.chain} rule ${(by.index ?? 0) + 1}`;
  return `${target(q)} is ${f.end === 'drop' ? 'dropped' : 'refused'} ${what}${by.chain.startsWith('KUBE-') ? '' : ', not a kproxy rule'}`;
}

export const iptablesTracer: ModeTracer = {
  kind: 'iptables',
  sharedTables: [],
  walk(tables: TraceTables, pkt: Packet, facts: NodeFacts): Finished[] {
    const env: MatchEnv = { facts, sets: () => null };
    return iptablesJourney(new IptablesWalker(tables, env), newFlow(pkt), localOf(env));
  },
  serviceAccept(s: TraceStep): boolean {
    return s.verdict === 'ACCEPT' && s.chain.startsWith('KUBE-') && s.chain !== 'KUBE-FORWARD';
  },
  explain(i: ExplainInput): { service: string | null; reason: string } {
    const { summary: s, q } = i;
    const top = s.main[0]?.f;
    const steps = top ? top.flow.steps : s.path;
    const svc = serviceOfSteps(steps);
    switch (s.verdict) {
      case 'dnat': {
        const kind = kindOfSteps(steps);
        const svl = s.endpoints.length > 0 && [...s.path, ...s.endpoints[0].path].some((x) => x.chain.startsWith('KUBE-SVL-'));
        const local = svl ? (kind === 'cluster IP' ? 'internalTrafficPolicy' : 'externalTrafficPolicy') : null;
        return { service: svc, reason: dnatReason(svc, kind, q, s, local) };
      }
      case 'reject':
      case 'drop':
        return { service: svc ?? serviceInComment(commentOf(top?.by?.rule ?? null)), reason: explainStop(top!, i, svc) };
      case 'accept': {
        const by = steps.find((x) => x.verdict === 'ACCEPT' && x.chain.startsWith('KUBE-'));
        const c = commentOf(by?.rule ?? null) ?? '';
        const name = serviceInComment(c) ?? svc;
        if (c.endsWith(' health check node port'))
          return { service: name, reason: `${target(q)} is the health check node port of ${name}: accepted (${by!.table} ${by!.chain}), answered by kproxy's health server` };
        return { service: name, reason: `${target(q)} is accepted by ${by ? `${by.table} ${by.chain}` : 'the rules'}${c ? ` (${c})` : ''} without DNAT` };
      }
      default: {
        const local = isLocalAddress(i.facts, q.dst);
        const owner = i.names?.portsOf(q.dst) ?? addressOwner(i.tables, q.dst);
        if (owner) {
          const kind = 'kind' in owner ? (owner as { kind: string }).kind : 'service address';
          return { service: null, reason: unknownPortReason(q, owner, kind, `no rule changes the packet, which ${local ? 'goes to the node itself' : 'is routed as it is'}`) };
        }
        return { service: null, reason: notServiceReason(q, local) };
      }
    }
  },
};

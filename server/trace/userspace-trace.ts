import type { TraceStep } from '../dashboard/protocol.ts';
import { iptablesTracer } from './iptables-trace.ts';
import type { ExplainInput, ModeTracer } from './mode.ts';
import { hostPort } from './packet.ts';
import { target } from './reason.ts';
import { commentOf, serviceInComment } from './service-names.ts';

/**
 * userspace mode: the portals (KUBE-PORTALS-CONTAINER / -HOST for service
 * addresses, KUBE-NODEPORT-CONTAINER / -HOST for node ports) are iptables
 * rules, walked as iptables mode's are; their REDIRECT (or DNAT to the bind
 * address) hands the connection to kproxy's proxy socket for that service
 * port, and from there the relay picks the endpoint (round robin, ClientIP
 * affinity), in kproxy's own process: no kernel rule decides it. The trace
 * ends at the proxy socket and says so; the Service page's relay panel shows
 * the rotation.
 */

const PORTAL = /^KUBE-(PORTALS|NODEPORT)-(CONTAINER|HOST)$/;

function portalStep(steps: readonly TraceStep[]): TraceStep | undefined {
  return steps.find((s) => PORTAL.test(s.chain) && /^(REDIRECT|DNAT) to /.test(s.verdict));
}

export const userspaceTracer: ModeTracer = {
  kind: 'userspace',
  sharedTables: [],
  walk: (tables, pkt, facts) => iptablesTracer.walk(tables, pkt, facts),
  serviceAccept: (s) => s.verdict === 'ACCEPT' && s.chain.startsWith('KUBE-'),
  explain(i: ExplainInput): { service: string | null; reason: string } {
    const { summary: s, q } = i;
    const top = s.main[0]?.f;
    const portal = s.verdict === 'dnat' && top ? portalStep(top.flow.steps) : undefined;
    if (!portal || !top) return iptablesTracer.explain(i);
    const svc = serviceInComment(commentOf(portal.rule)) ?? i.names?.byAddress(q.proto, q.dst, q.dstPort)?.name ?? null;
    const nodePort = portal.chain.startsWith('KUBE-NODEPORT-');
    const kind = nodePort ? 'node port' : (i.names?.byAddress(q.proto, q.dst, q.dstPort)?.kind ?? 'service address');
    const socket = hostPort(top.flow.pkt.dst, top.flow.pkt.dstPort);
    const how = portal.verdict.startsWith('REDIRECT') ? 'redirected' : 'DNATed';
    return {
      service: svc,
      reason: `${svc ?? target(q)}: a new connection to ${kind} ${target(q)} is ${how} to kproxy's proxy socket ${socket} (userspace mode), which relays it to one of the Service's endpoints (round robin, or the client's by ClientIP affinity) from the node's own address; with no endpoint the relay resets it`,
    };
  },
};

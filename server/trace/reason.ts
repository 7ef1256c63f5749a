import type { TraceQuery } from '../dashboard/protocol.ts';
import { hostPort } from './packet.ts';
import { percent, type Summary } from './result.ts';

/** Sentences shared by every mode's explanation, in Service terms. */

export function target(q: TraceQuery): string {
  return `${hostPort(q.dst, q.dstPort)}/${q.proto}`;
}

/** shares says how the endpoints split new connections ("25% each", "60%, 40%"). */
function shares(s: Summary): string {
  const ps = s.endpoints.map((e) => e.probability);
  if (ps.length > 1 && ps.every((p) => Math.abs(p - ps[0]) < 0.0005)) return `${percent(ps[0])} each`;
  return s.endpoints.map((e) => `${e.address} ${percent(e.probability)}`).join(', ');
}

/**
 * dnatReason: "shop/web:http: a new connection to cluster IP 10.96.0.10:80/tcp is DNATed to one of 3 endpoints (33.3% each); …".
 * local names the policy that limited it to this node's endpoints, if one did; how adds the mode's way of choosing.
 */
export function dnatReason(svc: string | null, kind: string | null, q: TraceQuery, s: Summary, local: string | null, how = ''): string {
  const who = svc ?? target(q);
  const where = kind ? `${kind} ${target(q)}` : target(q);
  const n = s.endpoints.length;
  const to = n === 1 ? `its endpoint ${s.endpoints[0].address}` : `one of ${n} endpoints (${shares(s)}${how ? `, ${how}` : ''})`;
  const parts = [`${who}: a new connection to ${where} is DNATed to ${to}`];
  if (local) parts.push(`${local} Local: only this node's endpoints`);
  const masqueraded = s.endpoints.filter((e) => e.masquerade);
  if (s.masquerade) parts.push("the source is masqueraded to the node's address");
  else if (masqueraded.length === 0) parts.push("the client's source address is kept");
  else {
    // Hairpin: a pod reaching itself through the Service is masqueraded, so its own reply comes back through the node.
    const hairpin = masqueraded.every((e) => e.address.startsWith(q.src.includes(':') ? `[${q.src}]:` : `${q.src}:`));
    parts.push(`the client's source address is kept, except at ${masqueraded.map((e) => e.address).join(', ')}${hairpin ? ' (the client itself: hairpin, masqueraded)' : ' (masqueraded)'}`);
  }
  return parts.join('; ');
}

export function noEndpointsReason(svc: string | null, q: TraceQuery, how: string): string {
  return `${svc ?? target(q)} has no ready endpoints: the connection is refused (${how})`;
}

export function noLocalReason(policy: 'externalTrafficPolicy' | 'internalTrafficPolicy', svc: string | null, q: TraceQuery, how: string): string {
  const rest = policy === 'externalTrafficPolicy' ? '; pods and the node itself still reach its endpoints' : '';
  return `${policy} Local and no endpoint on this node: ${svc ?? target(q)} drops the packet (${how})${rest}`;
}

export function sourceRangeReason(svc: string | null, q: TraceQuery, how: string): string {
  return `source ${q.src} is outside loadBalancerSourceRanges${svc ? ` of ${svc}` : ''}: dropped (${how})`;
}

export function unknownPortReason(q: TraceQuery, owner: { name: string; ports: string[] } | null, kind: string, outcome: string): string {
  const of = owner ? ` (${owner.name}; its ports: ${owner.ports.join(', ')})` : '';
  return `port ${q.dstPort}/${q.proto} is not a port of ${kind} ${q.dst}${of}: ${outcome}`;
}

export function notServiceReason(q: TraceQuery, local: boolean): string {
  return `${target(q)} is no Service's address on this node: no Service rule changes the packet${local ? ', which goes to the node itself' : ', which is routed as it is'}`;
}

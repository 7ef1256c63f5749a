import { TraceInputError } from '../errors.ts';
import { canonicalIP, isLoopbackIP, type IPFamily } from '../net/ip.ts';
import type { TraceFrom, TraceQuery } from '../dashboard/protocol.ts';

/**
 * The packet a trace follows: what was asked (TraceQuery) and what the rules
 * did to it so far (mark, DNAT, masquerade). Plain data: each rule that
 * changes the packet makes a new one, so branches (a probability, a numgen
 * choice) never share a mutable packet.
 */

export const TRACE_PROTOCOLS = ['tcp', 'udp', 'sctp'] as const;
export const TRACE_FROM: readonly TraceFrom[] = ['pod', 'external', 'node'];

/** RawTraceQuery is a trace request as typed (CLI flags, query parameters). */
export interface RawTraceQuery {
  readonly proto?: string;
  readonly src?: string;
  readonly dst?: string;
  readonly from?: string;
}

/** AskedPacket is a parsed request: from may still be open (decided from the node's addresses). */
export interface AskedPacket extends Omit<TraceQuery, 'from'> {
  readonly from: TraceFrom | null;
  readonly family: IPFamily;
}

/** splitAddress reads "IP", "IP:PORT" or "[IPv6]:PORT"; null when it is none of them. */
function splitAddress(text: string): { ip: string; port: number | null } | null {
  let host: string;
  let port: string | null = null;
  const bracket = /^\[([^\]]+)\](?::(\d+))?$/.exec(text);
  if (bracket) {
    host = bracket[1];
    port = bracket[2] ?? null;
  } else if (!text.includes(':') || text.indexOf(':') !== text.lastIndexOf(':')) {
    // No colon, or an IPv6 address without a port.
    host = text;
  } else {
    const i = text.lastIndexOf(':');
    host = text.slice(0, i);
    port = text.slice(i + 1);
  }
  const ip = canonicalIP(host);
  if (!ip) return null;
  if (port === null) return { ip, port: null };
  if (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535) return null;
  return { ip, port: Number(port) };
}

/**
 * parseTraceQuery checks a trace request and names the first bad field in
 * TraceInputError: proto (tcp, udp, sctp), src (IP or IP:PORT), dst (IP:PORT),
 * from (pod, external, node; optional), and that src and dst are one family.
 */
export function parseTraceQuery(raw: RawTraceQuery): AskedPacket {
  const proto = (raw.proto ?? '').trim().toLowerCase();
  if (!proto) throw new TraceInputError('proto: missing (tcp, udp or sctp)');
  if (!(TRACE_PROTOCOLS as readonly string[]).includes(proto)) throw new TraceInputError(`proto: ${JSON.stringify(raw.proto)} is not tcp, udp or sctp`);
  const srcText = (raw.src ?? '').trim();
  if (!srcText) throw new TraceInputError('src: missing (the source IP, optionally IP:PORT)');
  const src = splitAddress(srcText);
  if (!src) throw new TraceInputError(`src: ${JSON.stringify(raw.src)} is not an IP address or IP:PORT`);
  const dstText = (raw.dst ?? '').trim();
  if (!dstText) throw new TraceInputError('dst: missing (the destination IP:PORT)');
  const dst = splitAddress(dstText);
  if (!dst) throw new TraceInputError(`dst: ${JSON.stringify(raw.dst)} is not IP:PORT`);
  if (dst.port === null) throw new TraceInputError(`dst: ${JSON.stringify(raw.dst)} has no port (write IP:PORT, [IPv6]:PORT)`);
  const family: IPFamily = dst.ip.includes(':') ? 'IPv6' : 'IPv4';
  if (src.ip.includes(':') !== (family === 'IPv6')) throw new TraceInputError(`src: ${src.ip} is not of the destination's family (${family})`);
  const fromText = (raw.from ?? '').trim().toLowerCase();
  if (fromText && !(TRACE_FROM as readonly string[]).includes(fromText)) throw new TraceInputError(`from: ${JSON.stringify(raw.from)} is not pod, external or node`);
  return {
    proto: proto as TraceQuery['proto'],
    src: src.ip,
    srcPort: src.port,
    dst: dst.ip,
    dstPort: dst.port,
    from: fromText ? (fromText as TraceFrom) : null,
    family,
  };
}

/** NodeFacts are what the rules test about the node itself. */
export interface NodeFacts {
  /** localAddresses: the node's own addresses (addrtype LOCAL, fib type local); loopback is always local. */
  readonly localAddresses: { has(ip: string): boolean };
  /**
   * recentEntries (optional): the sources an xt_recent list holds now
   * (/proc/net/xt_recent/NAME), for iptables mode's ClientIP affinity; null
   * when unknown, and then affinity is reported as "sticky if the client has an entry".
   */
  recentEntries?(list: string): ReadonlySet<string> | null;
  /**
   * nodeIPs (optional): the node's own addresses in preference order (its Node's
   * InternalIPs, or its interfaces'), where a REDIRECT from outside lands; without
   * one, the tracer names the loopback address.
   */
  readonly nodeIPs?: readonly string[];
}

/** redirectTarget is where a REDIRECT sends a packet: the node itself (loopback for its own packets, as the kernel does). */
export function redirectTarget(facts: NodeFacts, pkt: Pick<Packet, 'family' | 'from'>): string {
  const loopback = pkt.family === 'IPv6' ? '::1' : '127.0.0.1';
  if (pkt.from === 'node') return loopback;
  return facts.nodeIPs?.find((ip) => ip.includes(':') === (pkt.family === 'IPv6')) ?? loopback;
}

/** isLocalAddress: the address is the node's (the kernel's local routing table, as addrtype and fib read it). */
export function isLocalAddress(facts: NodeFacts, ip: string): boolean {
  return facts.localAddresses.has(ip) || isLoopbackIP(ip);
}

/** resolveFrom decides where an asked packet enters: given, else the node when the source is one of its addresses, else outside. */
export function resolveFrom(asked: AskedPacket, facts: NodeFacts): TraceQuery {
  const from = asked.from ?? (isLocalAddress(facts, asked.src) ? 'node' : 'external');
  return { proto: asked.proto, src: asked.src, srcPort: asked.srcPort, dst: asked.dst, dstPort: asked.dstPort, from };
}

/** Packet is the packet as the rules have left it so far. */
export interface Packet {
  readonly proto: TraceQuery['proto'];
  readonly family: IPFamily;
  readonly src: string;
  readonly srcPort: number | null;
  readonly dst: string;
  readonly dstPort: number;
  readonly from: TraceFrom;
  /** mark: the packet mark (kube-proxy's masquerade bit lives here). */
  readonly mark: number;
  /** dnat: the destination was rewritten (conntrack status DNAT). */
  readonly dnat: boolean;
  /** origDst / origDstPort: the destination before any DNAT. */
  readonly origDst: string;
  readonly origDstPort: number;
  /** masquerade: a MASQUERADE (or masquerade statement) took it. */
  readonly masquerade: boolean;
  /** ipvs: IPVS forwarded it to a real server (what `-m ipvs` matches). */
  readonly ipvs: boolean;
}

export function initialPacket(q: TraceQuery, family: IPFamily): Packet {
  return {
    proto: q.proto,
    family,
    src: q.src,
    srcPort: q.srcPort,
    dst: q.dst,
    dstPort: q.dstPort,
    from: q.from,
    mark: 0,
    dnat: false,
    origDst: q.dst,
    origDstPort: q.dstPort,
    masquerade: false,
    ipvs: false,
  };
}

/** hostPort writes an address and port as "10.0.0.1:80" or "[fd00::1]:80". */
export function hostPort(ip: string, port: number): string {
  return ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/** parseHostPort reads "10.0.0.1:80" or "[fd00::1]:80" (a DNAT target); null when it is not one. */
export function parseHostPort(text: string): { ip: string; port: number | null } | null {
  return splitAddress(text);
}

/** PROTO_NUMBERS: IP protocol numbers as iptables and ipvsadm may print them. */
export const PROTO_NUMBERS: Readonly<Record<string, string>> = { '6': 'tcp', '17': 'udp', '132': 'sctp' };

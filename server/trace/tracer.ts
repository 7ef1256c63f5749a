import type { KernelTables } from '../dashboard/kernel-view.ts';
import type { KernelKind, TraceDrift, TraceResult } from '../dashboard/protocol.ts';
import { TraceUnavailableError } from '../errors.ts';
import { iptablesTracer } from './iptables-trace.ts';
import { ipvsTracer } from './ipvs-trace.ts';
import { nftablesTracer } from './nftables-trace.ts';
import { userspaceTracer } from './userspace-trace.ts';
import type { ModeTracer, ServiceNames } from './mode.ts';
import { initialPacket, resolveFrom, type AskedPacket, type NodeFacts } from './packet.ts';
import { markDrift, summarize } from './result.ts';
import { TraceTables } from './tables.ts';

/**
 * The packet tracer: "where does this packet go, and why", answered from a
 * kernel read (the dashboard's KernelTables: what the kernel holds, not what
 * kproxy meant to write), for the mode that wrote it. One ModeTracer per mode.
 */
const TRACERS: Record<KernelKind, ModeTracer> = {
  iptables: iptablesTracer,
  nftables: nftablesTracer,
  ipvs: ipvsTracer,
  userspace: userspaceTracer,
};

/** TraceRead is one kernel read and what goes with it. */
export interface TraceRead {
  readonly mode: KernelKind;
  readonly read: KernelTables;
  readonly readAt: number | null;
  readonly simulated: boolean;
  readonly facts: NodeFacts;
  /** drift: the confirmed differences between kproxy's intent and this read; null when unknown. */
  readonly drift: readonly TraceDrift[] | null;
  /** names: kproxy's model of the Services, where it has one (IPVS objects carry no names). */
  readonly names?: ServiceNames | null;
}

/** traceKernel traces one packet through a kernel read. */
export function traceKernel(r: TraceRead, asked: AskedPacket): TraceResult {
  const tracer = TRACERS[r.mode];
  if (!tracer) throw new TraceUnavailableError(`the packet tracer does not know ${r.mode} mode yet`);
  const q = resolveFrom(asked, r.facts);
  const tables = new TraceTables(r.read, asked.family, tracer.sharedTables);
  const finished = tracer.walk(tables, initialPacket(q, asked.family), r.facts);
  const summary = summarize(finished, (s) => tracer.serviceAccept(s));
  const { service, reason } = tracer.explain({ q, tables, summary, names: r.names ?? null, facts: r.facts });
  const others = summary.others.map((o) => [...o.f.flow.steps]);
  const marked = markDrift(summary.path, summary.endpoints, others, r.drift);
  const notes = [...summary.notes];
  const familyTables = [...r.read.tables.keys()].filter((t) => tables.name(t.replace(/^ip6-/, '')) === t);
  if (familyTables.length === 0) notes.unshift(`this node holds no ${asked.family} rules of ${r.mode} mode`);
  const drifted =
    marked.drift && marked.drift.length > 0 ? `; the kernel differs from what kproxy wrote on this path (${marked.drift.length} finding${marked.drift.length === 1 ? '' : 's'}, see drift)` : '';
  return {
    query: q,
    mode: r.mode,
    family: asked.family,
    verdict: summary.verdict,
    reason: reason + drifted,
    service,
    endpoints: marked.endpoints,
    masquerade: summary.masquerade,
    path: marked.path,
    drift: marked.drift,
    notes,
    readAt: r.readAt,
    simulated: r.simulated,
  };
}

/** MAX_RECENT_LISTS: xt_recent lists read for one trace (one per endpoint of an affinity Service on the way). */
const MAX_RECENT_LISTS = 64;

/**
 * traceWithRecent traces twice when iptables affinity is on the way: first to
 * learn which xt_recent lists the rules consult, then with those lists read
 * (readList: /proc/net/xt_recent/NAME), so a client the kernel remembers is
 * followed to its endpoint. Nothing is read when no affinity rule is met.
 */
export async function traceWithRecent(r: TraceRead, asked: AskedPacket, readList: (name: string) => Promise<ReadonlySet<string> | null>): Promise<TraceResult> {
  const wanted = new Set<string>();
  const first = traceKernel({ ...r, facts: { ...r.facts, recentEntries: (name) => (wanted.add(name), null) } }, asked);
  if (wanted.size === 0) return first;
  const lists = new Map<string, ReadonlySet<string> | null>();
  for (const name of [...wanted].slice(0, MAX_RECENT_LISTS)) lists.set(name, await readList(name));
  if ([...lists.values()].every((l) => l === null)) return first;
  return traceKernel({ ...r, facts: { ...r.facts, recentEntries: (name) => lists.get(name) ?? null } }, asked);
}

import { errorMessage, TraceUnavailableError } from '../errors.ts';
import { hostInterfaces, type NetInterfaces } from '../kernel/netif.ts';
import type { DashboardTraceParts, PacketTracer, PacketTracerFactory } from '../dashboard/packet-tracer.ts';
import type { TraceDrift, TraceResult } from '../dashboard/protocol.ts';
import { readRecentList } from './host.ts';
import { parseTraceQuery, type RawTraceQuery } from './packet.ts';
import { serviceNames } from './service-index.ts';
import { traceWithRecent } from './tracer.ts';

/** DashboardTraceHost is what a dashboard's tracer reads of the node beside the dashboard. */
export interface DashboardTraceHost {
  /** netInterfaces: the node's addresses (default `ip -j addr show`). */
  readonly netInterfaces?: NetInterfaces;
  /** readRecent: an xt_recent list (default /proc/net/xt_recent/NAME); none in a simulated kernel. */
  readonly readRecent?: (name: string) => Promise<ReadonlySet<string> | null>;
}

export interface DashboardTraceOptions extends DashboardTraceParts, DashboardTraceHost {}

/**
 * dashboardTracer is the PacketTracerFactory the composition hands the
 * dashboard (server/assemble.ts): a DashboardTrace over each dashboard's parts.
 */
export function dashboardTracer(host: DashboardTraceHost = {}): PacketTracerFactory {
  return (parts) => new DashboardTrace({ ...parts, ...host });
}

/** ADDRESSES_TTL_MS: the node's addresses are listed at most this often for traces. */
const ADDRESSES_TTL_MS = 5000;

/**
 * DashboardTrace answers GET /api/v1/trace: the packet tracer over the
 * dashboard's own kernel read (the one the Rules page shows, refreshed under
 * its rate limit), with the drift it confirmed, kproxy's model for names and
 * the node's addresses. With --dry-run the read is the simulated kernel and
 * the simulated node's addresses (its Node object's) count as local.
 */
export class DashboardTrace implements PacketTracer {
  readonly #o: DashboardTraceOptions;
  readonly #netInterfaces: NetInterfaces;
  #addresses: { at: number; set: ReadonlySet<string> } | null = null;

  constructor(opts: DashboardTraceOptions) {
    this.#o = opts;
    this.#netInterfaces = opts.netInterfaces ?? hostInterfaces();
  }

  async #local(): Promise<ReadonlySet<string>> {
    const now = this.#o.clock.monotonic();
    if (this.#addresses && now - this.#addresses.at < ADDRESSES_TTL_MS) return this.#addresses.set;
    let listed: string[];
    try {
      listed = (await this.#netInterfaces.addresses()).map((a) => a.address);
    } catch (err) {
      throw new TraceUnavailableError(`cannot list the node's addresses for the trace: ${errorMessage(err)}`, { cause: err });
    }
    const simulated = this.#o.provider.simulated ? this.#o.states().flatMap((s) => s.node.addresses) : [];
    const set = new Set([...listed, ...simulated]);
    this.#addresses = { at: now, set };
    return set;
  }

  /** trace checks the request (TraceInputError, 400, names the field) and traces it through the current read. */
  async trace(raw: RawTraceQuery): Promise<TraceResult> {
    const asked = parseTraceQuery(raw);
    const { reader, provider } = this.#o;
    this.#o.touch();
    if (!reader.tables) await reader.refresh();
    else void reader.refresh();
    const read = reader.tables;
    if (!read) throw new TraceUnavailableError(`there is no kernel read to trace through: ${reader.status().error ?? 'the first read has not finished'}`);
    const report = reader.drift.report(Infinity);
    const drift: TraceDrift[] | null = report.checkedAt === null ? null : report.findings.map((f) => ({ table: f.table, chain: f.chain, kind: f.kind, detail: f.detail }));
    const names = serviceNames(this.#o.states().flatMap((s) => [...s.services.values()]));
    const facts = { localAddresses: await this.#local(), nodeIPs: this.#o.states().flatMap((s) => s.node.addresses) };
    const readRecent = provider.simulated ? async () => null : (this.#o.readRecent ?? ((name: string) => readRecentList(name)));
    return traceWithRecent({ mode: provider.kind, read, readAt: reader.readAt, simulated: provider.simulated, facts, drift, names }, asked, readRecent);
  }
}

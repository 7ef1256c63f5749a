import type { Clock } from '../clock.ts';
import { errorMessage, TraceUnavailableError } from '../errors.ts';
import type { NetInterfaces } from '../kernel/netif.ts';
import type { NodeInfo } from '../proxy/node-info.ts';
import type { ServicePort } from '../proxy/service-port.ts';
import { readRecentList } from '../trace/host.ts';
import { parseTraceQuery, type RawTraceQuery } from '../trace/packet.ts';
import { serviceNames } from '../trace/service-index.ts';
import { traceWithRecent } from '../trace/tracer.ts';
import type { KernelReader } from './kernel-reader.ts';
import type { KernelViewProvider } from './kernel-view.ts';
import type { TraceDrift, TraceResult } from './protocol.ts';

export interface DashboardTraceOptions {
  readonly reader: KernelReader;
  readonly provider: KernelViewProvider;
  /** states: each family's Services and Node (kproxy's model: names for IPVS objects, the simulated node's addresses). */
  readonly states: () => readonly { readonly services: ReadonlyMap<string, ServicePort>; readonly node: NodeInfo }[];
  readonly clock: Clock;
  readonly netInterfaces: NetInterfaces;
  /** touch: the dashboard is in use (keeps its parsed tables from the idle release). */
  readonly touch: () => void;
  /** readRecent: an xt_recent list (default /proc/net/xt_recent); none in a simulated kernel. */
  readonly readRecent?: (name: string) => Promise<ReadonlySet<string> | null>;
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
export class DashboardTrace {
  readonly #o: DashboardTraceOptions;
  #addresses: { at: number; set: ReadonlySet<string> } | null = null;

  constructor(opts: DashboardTraceOptions) {
    this.#o = opts;
  }

  async #local(): Promise<ReadonlySet<string>> {
    const now = this.#o.clock.monotonic();
    if (this.#addresses && now - this.#addresses.at < ADDRESSES_TTL_MS) return this.#addresses.set;
    let listed: string[];
    try {
      listed = (await this.#o.netInterfaces.addresses()).map((a) => a.address);
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

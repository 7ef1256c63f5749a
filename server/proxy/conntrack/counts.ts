import type { Clock } from '../../clock.ts';
import { ConntrackError, errorMessage, RateLimitedError } from '../../errors.ts';
import type { Conntrack, ConntrackProtocol } from '../../kernel/conntrack.ts';
import type { Sysctl } from '../../kernel/sysctl.ts';
import { canonicalIP, ipFamilyOf } from '../../net/ip.ts';

/** NodeConntrackCounts is the node's table fill: entries and limit (null when unreadable, e.g. no nf_conntrack). */
export interface NodeConntrackCounts {
  readonly entries: number | null;
  readonly max: number | null;
  /** at: epoch ms of the reading. */
  readonly at: number;
  /** error: why a count is null (the first file that could not be read). */
  readonly error?: string;
}

/** ServiceConntrackCount is the number of flows to one service frontend. */
export interface ServiceConntrackCount {
  readonly vip: string;
  readonly port: number;
  readonly protocol: 'TCP' | 'UDP' | 'SCTP';
  readonly count: number;
  /** at: epoch ms of the listing the count comes from. */
  readonly at: number;
  /** cached: answered from a listing less than minIntervalMs old. */
  readonly cached: boolean;
}

export interface ConntrackCountsOptions {
  conntrack: Conntrack;
  /** sysctl: /proc/sys of the node's network namespace (nf_conntrack_count and nf_conntrack_max). */
  sysctl: Sysctl;
  clock: Clock;
  /** serviceIntervalMs: a frontend is listed at most this often; callers in between get the cached count (default 5 s). */
  serviceIntervalMs?: number;
  /** nodeIntervalMs: the node counts are read at most this often (default 1 s). */
  nodeIntervalMs?: number;
  /** maxCached: frontends whose counts are kept (least recently listed go first; default 1024). */
  maxCached?: number;
  /** maxQueued: listings waiting for their turn before new ones are refused (default 8). */
  maxQueued?: number;
}

interface Cached {
  readonly count: number;
  readonly at: number;
  readonly atMono: number;
}

const PROTOCOLS: Record<string, ConntrackProtocol> = { TCP: 'tcp', UDP: 'udp', SCTP: 'sctp' };

/**
 * ConntrackCounts answers "how full is conntrack" cheaply. The node's total
 * and limit come from two /proc files (what `conntrack -C` reads), cached for
 * a second. Per frontend there is no cheap counter (`conntrack -C` takes no
 * filter in conntrack-tools 1.4.7), so a count is a streamed
 * `conntrack -L -p PROTO --orig-dst VIP --orig-port-dst PORT` whose lines are
 * counted and dropped: each frontend is listed at most once per interval,
 * listings run one at a time, and a burst beyond maxQueued is refused.
 */
export class ConntrackCounts {
  readonly #o: Required<ConntrackCountsOptions>;
  readonly #cache = new Map<string, Cached>();
  readonly #inflight = new Map<string, Promise<ServiceConntrackCount>>();
  #node: { value: NodeConntrackCounts; atMono: number } | null = null;
  #nodeInflight: Promise<NodeConntrackCounts> | null = null;
  /** #chain serialises listings: each walks the kernel table, so two at once only compete. */
  #chain: Promise<unknown> = Promise.resolve();
  #queued = 0;
  #listingErrors = 0;

  constructor(opts: ConntrackCountsOptions) {
    this.#o = { serviceIntervalMs: 5_000, nodeIntervalMs: 1_000, maxCached: 1024, maxQueued: 8, ...opts };
  }

  /** node reads nf_conntrack_count and nf_conntrack_max (cached for nodeIntervalMs); it never throws. */
  async node(): Promise<NodeConntrackCounts> {
    const { clock } = this.#o;
    if (this.#node && clock.monotonic() - this.#node.atMono < this.#o.nodeIntervalMs) return this.#node.value;
    this.#nodeInflight ??= (async () => {
      try {
        const [entries, max] = await Promise.all([this.#readInt('net/netfilter/nf_conntrack_count'), this.#readInt('net/netfilter/nf_conntrack_max')]);
        const error = entries.error ?? max.error;
        const value: NodeConntrackCounts = { entries: entries.value, max: max.value, at: clock.now(), ...(error ? { error } : {}) };
        this.#node = { value, atMono: clock.monotonic() };
        return value;
      } finally {
        this.#nodeInflight = null;
      }
    })();
    return this.#nodeInflight;
  }

  /** listingErrorsTotal: per-frontend listings that failed (kproxy_conntrack_count_errors_total). */
  get listingErrorsTotal(): number {
    return this.#listingErrors;
  }

  /**
   * countForService counts the flows to vip:port over protocol. It throws
   * ConntrackError for a bad frontend (not an IP address, port out
   * of range, unknown protocol), RateLimitedError when too many listings wait,
   * and the listing's error when conntrack fails.
   */
  async countForService(vip: string, port: number, protocol: string): Promise<ServiceConntrackCount> {
    // The flows of an IPv6 VIP are in conntrack's ipv6 table (conntrack -L -f ipv6).
    const ip = canonicalIP(vip);
    const family = ipFamilyOf(ip);
    if (!ip || !family) throw new ConntrackError(`conntrack count: ${JSON.stringify(vip)} is not an IP address`);
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new ConntrackError(`conntrack count: port ${JSON.stringify(port)} is out of range`);
    const proto = PROTOCOLS[String(protocol).toUpperCase()];
    if (!proto) throw new ConntrackError(`conntrack count: protocol ${JSON.stringify(protocol)} is not TCP, UDP or SCTP`);
    const p = String(protocol).toUpperCase() as ServiceConntrackCount['protocol'];
    const key = `${ip} ${port} ${p}`;
    const { clock } = this.#o;
    const hit = this.#cache.get(key);
    if (hit && clock.monotonic() - hit.atMono < this.#o.serviceIntervalMs) return { vip: ip, port, protocol: p, count: hit.count, at: hit.at, cached: true };
    const running = this.#inflight.get(key);
    if (running) return running;
    if (this.#queued >= this.#o.maxQueued) throw new RateLimitedError(`conntrack count for ${key}: ${this.#queued} listings are already waiting; try again shortly`);
    this.#queued++;
    const job = this.#chain.then(async (): Promise<ServiceConntrackCount> => {
      const count = await this.#o.conntrack.count({ family, protocol: proto, origDst: ip, origDstPort: port });
      const entry = { count, at: clock.now(), atMono: clock.monotonic() };
      this.#cache.delete(key);
      this.#cache.set(key, entry);
      while (this.#cache.size > this.#o.maxCached) this.#cache.delete(this.#cache.keys().next().value!);
      return { vip: ip, port, protocol: p, count, at: entry.at, cached: false };
    });
    // The chain must go on after a failed listing; the failure reaches the callers, and the metric counts it.
    this.#chain = job.catch(() => {
      this.#listingErrors++;
    });
    const tracked = job.finally(() => {
      this.#queued--;
      this.#inflight.delete(key);
    });
    this.#inflight.set(key, tracked);
    return tracked;
  }

  async #readInt(name: string): Promise<{ value: number | null; error?: string }> {
    let text: string;
    try {
      text = await this.#o.sysctl.read(name);
    } catch (err) {
      // No nf_conntrack module (or no /proc/sys): the counts are unknown, shown as such with the reason.
      return { value: null, error: errorMessage(err) };
    }
    const n = Number.parseInt(text, 10);
    return Number.isNaN(n) ? { value: null, error: `${name} holds ${JSON.stringify(text.trim().slice(0, 40))}, not a number` } : { value: n };
  }
}

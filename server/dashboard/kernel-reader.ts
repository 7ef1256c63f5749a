import type { Clock } from '../clock.ts';
import { errorMessage } from '../errors.ts';
import type { Logger } from '../log.ts';
import { DriftMemo, DriftTracker, findDrift } from './drift.ts';
import type { KernelTables, KernelViewProvider } from './kernel-view.ts';
import type { KernelStatus } from './protocol.ts';
import type { Yield } from './yield.ts';

export interface KernelReaderOptions {
  provider: KernelViewProvider;
  clock: Clock;
  logger: Logger;
  pause: Yield;
  /** minIntervalMs: at most one read this often (default 5 s). */
  minIntervalMs?: number;
  /** costFactor: and at most one read per costFactor × the last read's duration (default 10: ≤ 10 % of the time). */
  costFactor?: number;
}

/**
 * KernelReader keeps the dashboard's copy of the kernel. Reads are expensive
 * on a big node (iptables-save of 300,000 rules), so they happen only when a
 * dashboard asks, at most every minIntervalMs and never more than a tenth of
 * the time; concurrent askers share one read. A read never runs inside a sync
 * (it is not called from the sync path) and yields to the event loop while it
 * parses, so syncs run in between. After each read, drift is computed against
 * what kproxy wrote, unless kproxy wrote something during the read.
 */
export class KernelReader {
  readonly #o: Required<KernelReaderOptions>;
  readonly drift = new DriftTracker();
  /** #memo: chains that compared equal, so the next read compares only what changed. */
  readonly #memo = new DriftMemo();
  #tables: KernelTables | null = null;
  /** #counts: the last read's size, kept when its tables are released. */
  #counts = { rules: 0, chains: 0 };
  #readAt: number | null = null;
  #readMs: number | null = null;
  #nextAllowed = 0;
  #error: string | null = null;
  #reading: Promise<void> | null = null;
  readonly #listeners = new Set<() => void>();
  /** failures counts failed reads (shown with the last error). */
  failures = 0;

  constructor(opts: KernelReaderOptions) {
    this.#o = { ...opts, minIntervalMs: opts.minIntervalMs ?? 5000, costFactor: opts.costFactor ?? 10 };
  }

  get tables(): KernelTables | null {
    return this.#tables;
  }

  get readAt(): number | null {
    return this.#readAt;
  }

  /** onRead is told after every read (success or not); returns an unsubscribe function. */
  onRead(fn: () => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  /** due: a refresh now would read (the rate limit allows it). */
  get due(): boolean {
    return this.#o.clock.monotonic() >= this.#nextAllowed;
  }

  /** refresh reads the kernel unless the rate limit says the last read is recent enough. */
  refresh(): Promise<void> {
    if (this.#reading) return this.#reading;
    if (!this.due) return Promise.resolve();
    this.#reading = this.#read().finally(() => (this.#reading = null));
    return this.#reading;
  }

  async #read(): Promise<void> {
    const { provider, clock, logger, pause } = this.#o;
    const t0 = clock.monotonic();
    const version = provider.intendedVersion();
    try {
      const tables = await provider.read();
      this.#tables = tables;
      this.#counts = { rules: tables.ruleCount, chains: tables.chainCount };
      this.#readAt = clock.now();
      this.#error = null;
      const intended = await provider.intended();
      if (intended && provider.intendedVersion() === version) {
        this.drift.update(await findDrift(intended, tables, provider, pause, this.#memo), this.#readAt);
      }
    } catch (err) {
      // The dashboard keeps showing the previous read, marked with this error; syncs are not affected.
      this.failures++;
      this.#error = errorMessage(err);
      logger.warn('reading the kernel for the dashboard failed', { err: this.#error, failures: this.failures });
    } finally {
      this.#readMs = clock.monotonic() - t0;
      this.#nextAllowed = clock.monotonic() + Math.max(this.#o.minIntervalMs, this.#o.costFactor * this.#readMs);
    }
    for (const fn of this.#listeners) fn();
  }

  /**
   * release drops the last read's tables (its size, time and drift stay), so an
   * idle dashboard does not hold a copy of every rule; the next refresh reads again.
   * Not while a read is running: its result would come back right after.
   */
  /** holdsTables: a read of the kernel, or what kproxy wrote, is parsed in memory. */
  get holdsTables(): boolean {
    return this.#tables !== null || (this.#o.provider.holdsIntended ?? false);
  }

  release(): boolean {
    if (this.#reading) return false;
    this.#tables = null;
    this.#memo.clear();
    this.#o.provider.release();
    return true;
  }

  status(): KernelStatus {
    const p = this.#o.provider;
    return {
      kind: p.kind,
      simulated: p.simulated,
      readAt: this.#readAt,
      readMs: this.#readMs,
      rules: this.#counts.rules,
      chains: this.#counts.chains,
      driftCount: this.drift.count,
      ...(this.#error ? { error: this.#error } : {}),
    };
  }
}

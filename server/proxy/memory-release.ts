import type { Clock, TimerHandle } from '../clock.ts';
import type { Logger } from '../log.ts';
import type { BackendSyncResult } from './backend.ts';
import type { StateCheckout } from './proxy-state.ts';
import type { SyncObserver, SyncRecord } from './sync-loop.ts';

/** RELEASE_MIN_BYTES: full syncs that wrote less leave too little behind to be worth a collection. */
export const RELEASE_MIN_BYTES = 4 * 1024 * 1024;
/** RELEASE_DELAY_MS: the wait after the last big full sync (both families, a retry: one collection for the burst). */
export const RELEASE_DELAY_MS = 3000;

/** FIRST_SYNC_HEAP_BYTES: a live heap this big once the sources listed is worth a collection before the first build. */
export const FIRST_SYNC_HEAP_BYTES = 64 * 1024 * 1024;

const MiB = 1024 * 1024;

/** Collect runs a garbage collection that gives memory back to the system. */
export type Collect = () => void;

/**
 * v8Collect is one of V8's collections when the daemon runs with --expose-gc
 * as shipped; null otherwise (kproxy works the same without it, holding more
 * memory). 'last-resort' (the default) takes every collectable object,
 * compacts the heap and hands the free pages back; 'regular' frees the
 * garbage for reuse without compacting, in about half the pause.
 */
export function v8Collect(flavor: 'last-resort' | 'regular' = 'last-resort'): Collect | null {
  const gc = globalThis.gc;
  return typeof gc === 'function' ? () => gc({ type: 'major', execution: 'sync', flavor }) : null;
}

export interface MemoryReleaseOptions {
  clock: Clock;
  logger: Logger;
  /** collect: default v8Collect() (nothing when the runtime offers no collection). */
  collect?: Collect | null;
  /** rss: this process's resident memory, for the log line (default process.memoryUsage.rss). */
  rss?: () => number;
  minBytes?: number;
  delayMs?: number;
  /** collectBeforeFirstSync: default v8Collect('regular'). */
  collectBeforeFirstSync?: Collect | null;
  /** heapUsed: this process's live heap, for the decision before the first sync (default process.memoryUsage().heapUsed). */
  heapUsed?: () => number;
}

/**
 * MemoryRelease gives memory back after a big full sync. Building the rules
 * of 10,000 Services × 10 endpoints leaves about 150 MB of garbage and freed
 * pages in V8's heap, and V8's own memory reducer, which would collect them
 * once the daemon is idle, judges the allocation rate of the sync just done
 * too high and keeps waiting: the resident memory stayed 50 MiB above what
 * the daemon holds, for minutes (docs/performance.md). A few seconds after
 * such a sync, this observer asks V8 for one memory-reducing collection
 * (a few hundred ms of the event loop, once per full sync: hourly, or after a
 * restart or a failure).
 */
export class MemoryRelease implements SyncObserver {
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #collect: Collect | null;
  readonly #rss: () => number;
  readonly #minBytes: number;
  readonly #delayMs: number;
  readonly #collectFirst: Collect | null;
  readonly #heapUsed: () => number;
  #firstDone = false;
  #timer: TimerHandle | null = null;
  /** released counts the collections run. */
  released = 0;

  constructor(opts: MemoryReleaseOptions) {
    this.#clock = opts.clock;
    this.#log = opts.logger;
    this.#collect = opts.collect === undefined ? v8Collect() : opts.collect;
    this.#rss = opts.rss ?? (() => process.memoryUsage.rss());
    this.#minBytes = opts.minBytes ?? RELEASE_MIN_BYTES;
    this.#delayMs = opts.delayMs ?? RELEASE_DELAY_MS;
    this.#collectFirst = opts.collectBeforeFirstSync === undefined ? v8Collect('regular') : opts.collectBeforeFirstSync;
    this.#heapUsed = opts.heapUsed ?? (() => process.memoryUsage().heapUsed);
  }

  /**
   * onSourcesSynced: once per process, before the first build, when reading the
   * sources left a big heap, a regular major collection frees what the read
   * left behind (the documents, the lists' pages), so the first sync's build
   * reuses that space instead of growing the heap past it. At 10,000 × 2: peak
   * 213–217 MiB against 230–232 MiB, for a pause of 70–95 ms at start.
   */
  onSourcesSynced(): void {
    if (this.#firstDone || !this.#collectFirst) return;
    this.#firstDone = true;
    const heap = this.#heapUsed();
    if (heap < FIRST_SYNC_HEAP_BYTES) return;
    const t0 = this.#clock.monotonic();
    this.#collectFirst();
    this.#log.info("collected the sources' garbage before the first sync", {
      ms: Math.round(this.#clock.monotonic() - t0),
      heapMiB: Math.round(heap / MiB),
      afterMiB: Math.round(this.#heapUsed() / MiB),
    });
  }

  onSync(record: SyncRecord, _checkout: StateCheckout, result: BackendSyncResult): void {
    if (!this.#collect || !record.ok || !record.full || result.bytesWritten < this.#minBytes) return;
    if (this.#timer) this.#clock.clearTimeout(this.#timer);
    this.#timer = this.#clock.setTimeout(() => this.#release(), this.#delayMs);
  }

  stop(): void {
    if (this.#timer) this.#clock.clearTimeout(this.#timer);
    this.#timer = null;
  }

  #release(): void {
    this.#timer = null;
    const before = this.#rss();
    const t0 = this.#clock.monotonic();
    this.#collect!();
    this.released++;
    this.#log.info('gave memory back after a full sync', { ms: Math.round(this.#clock.monotonic() - t0), rssMiB: Math.round(this.#rss() / MiB), beforeMiB: Math.round(before / MiB) });
  }
}

import type { Clock, TimerHandle } from '../clock.ts';

export interface SyncRunnerOptions {
  clock: Clock;
  /** minIntervalMs: least time from the end of one run to the start of the next (minSyncPeriod). */
  minIntervalMs: number;
  /** maxIntervalMs: a run happens at least this long after the previous one ended (syncPeriod). */
  maxIntervalMs: number;
  /** run does the work; a thrown error is passed to onError and does not stop the runner. */
  run: () => Promise<void>;
  onError?: (err: unknown) => void;
}

/**
 * SyncRunner is kube-proxy's bounded-frequency runner: requests coalesce, runs
 * never overlap, two runs are at least minInterval apart (end to start), and a
 * run happens at least every maxInterval even without requests. All timing
 * goes through the injected clock.
 */
export class SyncRunner {
  readonly #opts: SyncRunnerOptions;
  #timer: TimerHandle | null = null;
  #timerAt = Infinity;
  #running: Promise<void> | null = null;
  #requested = false;
  #retryAt = Infinity;
  #lastEnd = -Infinity;
  #started = false;
  #stopped = false;

  constructor(opts: SyncRunnerOptions) {
    if (opts.minIntervalMs < 0 || opts.maxIntervalMs <= 0) throw new RangeError('SyncRunner intervals must be positive');
    this.#opts = opts;
  }

  /** start enables runs; a request made before start() runs as soon as start() is called. */
  start(): void {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    this.#schedule();
  }

  /** request asks for a run as soon as minInterval allows; requests made meanwhile coalesce into one run. */
  request(): void {
    if (this.#stopped) return;
    this.#requested = true;
    this.#schedule();
  }

  /** retryAfter asks for a run after ms (after a failure), unless one is due earlier. */
  retryAfter(ms: number): void {
    if (this.#stopped) return;
    this.#retryAt = Math.min(this.#retryAt, this.#opts.clock.monotonic() + ms);
    this.#schedule();
  }

  /** stop cancels timers; a run in progress finishes. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#clearTimer();
    await this.#running;
  }

  /** idle resolves when no run is in progress (tests). */
  async idle(): Promise<void> {
    while (this.#running) await this.#running;
  }

  #nextDue(): number {
    const { minIntervalMs, maxIntervalMs } = this.#opts;
    let due = this.#lastEnd === -Infinity ? Infinity : this.#lastEnd + maxIntervalMs;
    if (this.#requested) due = Math.min(due, this.#lastEnd + minIntervalMs);
    if (this.#retryAt !== Infinity) due = Math.min(due, Math.max(this.#retryAt, this.#lastEnd + minIntervalMs));
    return due;
  }

  #schedule(): void {
    if (!this.#started || this.#stopped || this.#running) return;
    const due = this.#nextDue();
    if (due === Infinity) return;
    if (this.#timer && this.#timerAt <= due) return;
    this.#clearTimer();
    const clock = this.#opts.clock;
    this.#timerAt = due;
    this.#timer = clock.setTimeout(
      () => {
        this.#timer = null;
        this.#timerAt = Infinity;
        this.#fire();
      },
      Math.max(0, due - clock.monotonic()),
    );
  }

  #clearTimer(): void {
    if (this.#timer) this.#opts.clock.clearTimeout(this.#timer);
    this.#timer = null;
    this.#timerAt = Infinity;
  }

  #fire(): void {
    if (this.#stopped || this.#running) return;
    this.#requested = false;
    this.#retryAt = Infinity;
    const clock = this.#opts.clock;
    this.#running = (async () => {
      try {
        await this.#opts.run();
      } catch (err) {
        this.#opts.onError?.(err);
      } finally {
        this.#lastEnd = clock.monotonic();
        this.#running = null;
        this.#schedule();
      }
    })();
  }
}

import { RateLimitedError } from '../errors.ts';

export interface HeavyReadsOptions {
  /** maxRunning: heavy reads that run at once (default 2). */
  maxRunning?: number;
  /** maxQueued: heavy reads that wait for a slot; more are refused (default 8). */
  maxQueued?: number;
}

/**
 * HeavyReads bounds the dashboard's expensive reads (a Service page, the
 * Rules page's filtered views, drift, the restore input downloads): a few
 * run at once, a few more wait, the rest are refused with RateLimitedError
 * (429). Each is work on the daemon's one event loop, which also answers
 * /livez and runs the syncs: at 10,000 Services five parallel downloads of
 * the intended rules kept it busy for seconds.
 */
export class HeavyReads {
  readonly #max: number;
  readonly #maxQueued: number;
  #running = 0;
  readonly #queue: (() => void)[] = [];
  /** refused counts reads turned away because the queue was full. */
  refused = 0;

  constructor(opts: HeavyReadsOptions = {}) {
    this.#max = opts.maxRunning ?? 2;
    this.#maxQueued = opts.maxQueued ?? 8;
  }

  get running(): number {
    return this.#running;
  }

  get queued(): number {
    return this.#queue.length;
  }

  /** run runs fn when a slot is free; what names the read in the refusal. */
  async run<T>(what: string, fn: () => Promise<T>): Promise<T> {
    if (this.#running >= this.#max) {
      if (this.#queue.length >= this.#maxQueued) {
        this.refused++;
        throw new RateLimitedError(`the dashboard is busy with ${this.#running + this.#queue.length} other reads (${what}); try again in a second`);
      }
      // The slot is handed over by the read that finishes (#running stays counted).
      await new Promise<void>((resolve) => this.#queue.push(resolve));
    } else {
      this.#running++;
    }
    try {
      return await fn();
    } finally {
      const next = this.#queue.shift();
      if (next) next();
      else this.#running--;
    }
  }
}

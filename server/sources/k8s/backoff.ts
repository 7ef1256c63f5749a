/** BackoffOptions shapes a jittered exponential backoff. */
export interface BackoffOptions {
  /** initialMs: the first delay before jitter. */
  initialMs: number;
  /** maxMs: no delay is longer than this. */
  maxMs: number;
  factor: number;
  /** jitter: 0..1, the share of a delay that is randomised away (0.5: between half and all of it). */
  jitter: number;
}

/**
 * DEFAULT_BACKOFF follows client-go's reflector (800ms doubling to 30s, jittered)
 * closely enough: every kproxy on every node retries a restarted API server, so
 * the jitter spreads them out instead of having them reconnect in lockstep.
 */
export const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 800, maxMs: 30_000, factor: 2, jitter: 0.5 };

/** Backoff hands out growing, jittered delays until reset() (after a success). */
export class Backoff {
  readonly #o: BackoffOptions;
  readonly #random: () => number;
  #attempt = 0;

  constructor(opts: BackoffOptions = DEFAULT_BACKOFF, random: () => number = Math.random) {
    this.#o = opts;
    this.#random = random;
  }

  /** attempts: delays handed out since the last reset. */
  get attempts(): number {
    return this.#attempt;
  }

  /** next returns the delay before the next attempt and counts the attempt. */
  next(): number {
    const base = Math.min(this.#o.maxMs, this.#o.initialMs * this.#o.factor ** this.#attempt);
    this.#attempt++;
    return Math.round(base * (1 - this.#o.jitter * this.#random()));
  }

  reset(): void {
    this.#attempt = 0;
  }
}

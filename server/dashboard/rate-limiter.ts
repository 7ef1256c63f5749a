import type { Clock } from '../clock.ts';

/**
 * ActionRateLimiter lets one call per key through per interval (the
 * dashboard's actions: one resync, one cleanup… per 10 s, whoever asks), so a
 * script or a stuck button cannot keep a node rewriting its rules.
 */
export class ActionRateLimiter {
  readonly #clock: Clock;
  readonly #intervalMs: number;
  readonly #last = new Map<string, number>();

  constructor(clock: Clock, intervalMs = 10_000) {
    this.#clock = clock;
    this.#intervalMs = intervalMs;
  }

  get intervalMs(): number {
    return this.#intervalMs;
  }

  /** take consumes the key's slot, or says how long until it frees up. */
  take(key: string): { ok: true } | { ok: false; retryAfterMs: number } {
    const now = this.#clock.monotonic();
    const last = this.#last.get(key);
    if (last !== undefined && now - last < this.#intervalMs) return { ok: false, retryAfterMs: this.#intervalMs - (now - last) };
    this.#last.set(key, now);
    return { ok: true };
  }
}

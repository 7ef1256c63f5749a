/**
 * MessageBudget is a token bucket for what one dashboard client may ask over
 * its WebSocket. The web app sends a message when the operator opens a
 * Service page (watch) or when it saw a gap in seq (snapshot): a few per
 * minute. Each answer costs the daemon work on its one event loop (a snapshot
 * at 10,000 Services is ~2 MB of JSON), so a client that sends hundreds gets
 * the first `burst` answered and the rest dropped, and is disconnected when
 * it keeps going.
 */
export class MessageBudget {
  readonly #burst: number;
  readonly #refillMs: number;
  #tokens: number;
  #at: number;
  /** dropped: messages refused since the connection opened. */
  dropped = 0;

  /** burst: messages allowed at once; refillMs: one more allowed per this long. */
  constructor(now: number, burst = 20, refillMs = 500) {
    this.#burst = burst;
    this.#refillMs = refillMs;
    this.#tokens = burst;
    this.#at = now;
  }

  /** take spends one message at monotonic time `now`; false when the budget is spent. */
  take(now: number): boolean {
    const refill = Math.floor((now - this.#at) / this.#refillMs);
    if (refill > 0) {
      this.#tokens = Math.min(this.#burst, this.#tokens + refill);
      this.#at += refill * this.#refillMs;
    }
    if (this.#tokens <= 0) {
      this.dropped++;
      return false;
    }
    this.#tokens--;
    return true;
  }
}

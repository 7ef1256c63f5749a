/**
 * Clock is the time source every timing decision in kproxy goes through (sync
 * runner, health checks, rate limits, graceful termination), so tests drive time
 * with FakeClock instead of sleeping.
 */
export interface Clock {
  /** now returns milliseconds since the Unix epoch. */
  now(): number;
  /** monotonic returns milliseconds from an arbitrary origin that never goes backwards. */
  monotonic(): number;
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

/** TimerHandle is an opaque timer reference returned by Clock.setTimeout. */
export interface TimerHandle {
  readonly __timer: true;
}

/** realClock is the wall clock of the process. Its timers do not keep the process alive. */
export const realClock: Clock = {
  now: () => Date.now(),
  monotonic: () => performance.now(),
  setTimeout(fn, ms) {
    const t = globalThis.setTimeout(fn, Math.max(0, ms));
    t.unref();
    return t as unknown as TimerHandle;
  },
  clearTimeout(handle) {
    globalThis.clearTimeout(handle as unknown as NodeJS.Timeout);
  },
};

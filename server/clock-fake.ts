import type { Clock, TimerHandle } from './clock.ts';

interface FakeTimer {
  id: number;
  at: number;
  fn: () => void;
}

/**
 * FakeClock is a Clock whose time only moves when a test calls advance(). Timers
 * fire in time order; a timer scheduled by a firing timer fires in the same
 * advance() if it falls inside the window.
 */
export class FakeClock implements Clock {
  #now: number;
  #origin: number;
  #nextId = 1;
  #timers: FakeTimer[] = [];

  constructor(start = Date.UTC(2026, 0, 1)) {
    this.#now = start;
    this.#origin = start;
  }

  now(): number {
    return this.#now;
  }

  monotonic(): number {
    return this.#now - this.#origin;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const timer = { id: this.#nextId++, at: this.#now + Math.max(0, ms), fn };
    this.#timers.push(timer);
    return timer.id as unknown as TimerHandle;
  }

  clearTimeout(handle: TimerHandle): void {
    const id = handle as unknown as number;
    this.#timers = this.#timers.filter((t) => t.id !== id);
  }

  /** pending returns how many timers are scheduled. */
  get pending(): number {
    return this.#timers.length;
  }

  /** nextTimerIn returns ms until the next timer fires, or null when none is scheduled. */
  nextTimerIn(): number | null {
    if (this.#timers.length === 0) return null;
    return Math.min(...this.#timers.map((t) => t.at)) - this.#now;
  }

  /** advance moves time forward by ms, firing due timers in order (synchronously). */
  advance(ms: number): void {
    const end = this.#now + ms;
    for (;;) {
      const due = this.#timers.filter((t) => t.at <= end).sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (!due) break;
      this.#timers = this.#timers.filter((t) => t !== due);
      this.#now = Math.max(this.#now, due.at);
      due.fn();
    }
    this.#now = end;
  }

  /**
   * advanceAsync is advance() that lets promise callbacks run between timers, for
   * code under test whose timers start async work.
   */
  async advanceAsync(ms: number): Promise<void> {
    const end = this.#now + ms;
    for (;;) {
      await flushMicrotasks();
      const due = this.#timers.filter((t) => t.at <= end).sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (!due) break;
      this.#timers = this.#timers.filter((t) => t !== due);
      this.#now = Math.max(this.#now, due.at);
      due.fn();
    }
    this.#now = end;
    await flushMicrotasks();
  }
}

/** flushMicrotasks lets every queued promise callback (and the ones they queue) run. */
export async function flushMicrotasks(rounds = 20): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

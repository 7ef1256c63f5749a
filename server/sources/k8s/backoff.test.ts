import { describe, expect, it } from 'vitest';
import { Backoff } from './backoff.ts';

describe('Backoff', () => {
  it('doubles from the initial delay up to the cap', () => {
    const b = new Backoff({ initialMs: 100, maxMs: 1000, factor: 2, jitter: 0 });
    expect(Array.from({ length: 6 }, () => b.next())).toEqual([100, 200, 400, 800, 1000, 1000]);
    expect(b.attempts).toBe(6);
  });

  it('takes up to the jitter share off each delay, never adding to it', () => {
    const lo = new Backoff({ initialMs: 1000, maxMs: 30_000, factor: 2, jitter: 0.5 }, () => 0.9);
    const hi = new Backoff({ initialMs: 1000, maxMs: 30_000, factor: 2, jitter: 0.5 }, () => 0);
    expect([lo.next(), lo.next()]).toEqual([550, 1100]);
    expect([hi.next(), hi.next()]).toEqual([1000, 2000]);
  });

  it('starts over after reset', () => {
    const b = new Backoff({ initialMs: 100, maxMs: 1000, factor: 2, jitter: 0 });
    b.next();
    b.next();
    b.reset();
    expect(b.next()).toBe(100);
  });
});

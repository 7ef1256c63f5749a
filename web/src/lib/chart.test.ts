import { describe, expect, it } from 'vitest';
import { sync } from '../testing/fixtures.ts';
import { latencyChart, niceCeil } from './chart.ts';

describe('latencyChart', () => {
  it('stacks kproxy build time on top of the kernel apply time, scaled to a round maximum', () => {
    const c = latencyChart([sync(1, { durationMs: 40, applyMs: 30 }), sync(2, { durationMs: 70, applyMs: 20, ok: false })], 200, 100, (ms) => `${ms}ms`);
    expect(c.maxMs).toBe(100);
    const [a, b] = c.bars;
    expect(a.applyH).toBeCloseTo(30);
    expect(a.buildH).toBeCloseTo(10);
    expect(a.buildY + a.buildH).toBeCloseTo(a.applyY);
    expect(a.applyY + a.applyH).toBeCloseTo(100);
    expect(b.ok).toBe(false);
    expect(b.title).toMatch(/FAILED/);
    expect(b.x).toBeGreaterThan(a.x);
  });

  it('rounds the scale to 1, 2 or 5 times a power of ten', () => {
    expect([0.3, 7, 12, 45, 180, 999].map(niceCeil)).toEqual([0.5, 10, 20, 50, 200, 1000]);
  });
});

import { describe, expect, it } from 'vitest';
import { scrollTopFor, visibleRange } from './virtual.ts';

describe('visibleRange', () => {
  it('renders the rows in view plus overscan, and pads the rest', () => {
    expect(visibleRange(300_000, 26, 0, 520, 10)).toEqual({ start: 0, end: 31, padTop: 0, padBottom: (300_000 - 31) * 26 });
    const r = visibleRange(300_000, 26, 26 * 150_000, 520, 10);
    expect(r.start).toBe(149_990);
    expect(r.end).toBe(150_031);
    expect(r.padTop + (r.end - r.start) * 26 + r.padBottom).toBe(300_000 * 26);
  });

  it('stays inside the list at its ends and when it is empty', () => {
    expect(visibleRange(5, 26, 0, 520)).toEqual({ start: 0, end: 5, padTop: 0, padBottom: 0 });
    expect(visibleRange(100, 26, 26 * 1000, 520).end).toBe(100);
    expect(visibleRange(0, 26, 0, 520)).toEqual({ start: 0, end: 0, padTop: 0, padBottom: 0 });
  });

  it('scrolls a row into view with a little context above', () => {
    expect(scrollTopFor(100, 26)).toBe(98 * 26);
    expect(scrollTopFor(1, 26)).toBe(0);
  });
});

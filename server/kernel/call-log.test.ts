import { describe, expect, it } from 'vitest';
import { recordCall, UNBOUNDED } from './call-log.ts';

describe('recordCall', () => {
  it('keeps everything when unbounded', () => {
    const log: { op: string; input?: string }[] = [];
    for (let i = 0; i < 50; i++) recordCall(log, { op: 'restore', input: `batch ${i}` }, UNBOUNDED);
    expect(log).toHaveLength(50);
    expect(log.every((c, i) => c.input === `batch ${i}`)).toBe(true);
  });

  it('forgets old calls and keeps only the newest inputs', () => {
    const log: { op: string; input?: string }[] = [];
    const limits = { maxCalls: 5, keepInputs: 2 };
    // Calls 0..11; every third one is a save without input.
    for (let i = 0; i < 12; i++) recordCall(log, i % 3 === 0 ? { op: 'save' } : { op: 'restore', input: `batch ${i}` }, limits);
    expect(log.map((c) => c.op)).toEqual(['restore', 'restore', 'save', 'restore', 'restore']); // calls 7..11
    expect(log.map((c) => c.input)).toEqual([undefined, undefined, undefined, 'batch 10', 'batch 11']);
  });
});

import { describe, expect, it } from 'vitest';
import { driveChurn, type ChurnTimer } from '../../bench/churn.ts';
import { evaluateTargets } from '../../bench/report.ts';
import type { ChurnEntry, Results } from '../../bench/results.ts';

/** The churn schedule both sources share, and which source the latency target is judged on. */
describe('churn schedule', () => {
  /** fakeTimer: sleep moves time forward by what it was asked. */
  function fakeTimer(start: number): ChurnTimer & { t: number } {
    const timer = { t: start, now: () => timer.t, sleep: async (ms: number) => void (timer.t += ms) };
    return timer;
  }

  it('makes rate × seconds changes, change i due at start + i/rate s, in order', async () => {
    const timer = fakeTimer(1_000_000);
    const made: [number, number][] = [];
    const written = await driveChurn(50, 2, (i, at) => made.push([i, at]), timer);
    expect(written).toHaveLength(100);
    expect(made.map(([i]) => i)).toEqual(Array.from({ length: 100 }, (_, i) => i));
    expect(written.slice(0, 4)).toEqual([1_000_000, 1_000_020, 1_000_040, 1_000_060]);
    expect(written.at(-1)).toBe(1_000_000 + 99 * 20);
    expect(made.map(([, at]) => at)).toEqual(written);
  });

  it('makes late changes at once and skips none', async () => {
    const timer = fakeTimer(0);
    // Every write takes 30 ms, longer than the 20 ms between changes: the schedule falls behind.
    const written = await driveChurn(50, 1, () => void (timer.t += 30), timer);
    expect(written).toHaveLength(50);
    expect(written.slice(0, 3)).toEqual([0, 30, 60]);
    expect(written.every((t, i) => i === 0 || t - written[i - 1] === 30)).toBe(true);
  });
});

describe('network programming latency target', () => {
  const entry = (source: ChurnEntry['source'], p99: number) =>
    ({
      size: { services: 10_000, endpoints: 10 },
      flavor: 'nft',
      rate: 50,
      minSyncPeriodMs: 1000,
      attributed: 3000,
      changes: 3000,
      ...(source ? { source } : {}),
      latencyMs: { n: 3000, p50: 900, p90: 1500, p99, max: p99 + 100 },
    }) as unknown as ChurnEntry;
  const results = (churn: ChurnEntry[]) => ({ machine: { autoFlavor: { flavor: 'nft', why: '' } }, fullSync: [], partial: [], churn, leak: null }) as unknown as Results;
  const target = (r: Results) => evaluateTargets(r).find((t) => t.name.startsWith('Network programming latency'))!;

  it('is judged through the Kubernetes API when measured, the file source shown beside it', () => {
    const t = target(results([entry('file', 2263), entry('api', 1700)]));
    expect(t.met).toBe(true);
    expect(t.measured).toContain('through the Kubernetes API');
    expect(t.measured).toContain('p99 1,700');
    expect(t.note).toContain('file source');
    expect(t.note).toContain('p99 2,263');
  });

  it('fails on the API number even when the file source met it', () => {
    expect(target(results([entry('file', 1500), entry('api', 2500)])).met).toBe(false);
  });

  it('falls back to the file source, and reads results without a source as file', () => {
    const t = target(results([entry(undefined, 2263)]));
    expect(t.met).toBe(false);
    expect(t.measured).not.toContain('Kubernetes API');
    expect(t.note).toBeUndefined();
  });
});

import { describe, expect, it } from 'vitest';
import { userspaceTargets } from '../../bench/report.ts';
import type { UserspaceRun } from '../../bench/userspace.ts';

const p = (v: number) => ({ n: 100, p50: v, p90: v, p99: v, max: v });
const run = (idle: UserspaceRun['idle']): UserspaceRun => ({
  bulkBytes: 1 << 30,
  throughput: { iptables: [600], userspace: [300] },
  throughputRatio: 0.5,
  latency: { rate: 1000, seconds: 10, iptables: p(1), userspace: p(1.5), skipped: { iptables: 0, userspace: 0 } },
  addedP99Ms: 0.5,
  idle,
});
const idleTarget = (u: UserspaceRun) => userspaceTargets(u).find((t) => t.name.includes('idle connections'))!;

describe("the userspace bench's idle-connection target", () => {
  it('is judged on the count asked for when the daemon could hold them all', () => {
    const t = idleTarget(run({ count: 10_000, open: 10_000, failed: 0, rssBeforeMiB: 100, rssAfterMiB: 140, costMiB: 40 }));
    expect(t.met).toBe(true);
    expect(t.measured).toBe('40 MiB (100 → 140 MiB; 10,000 held, 0 failed)');
  });

  it("scales the cost to the count asked for when the daemon's descriptor limit held fewer, and says so", () => {
    const t = idleTarget(run({ count: 10_000, open: 9_500, failed: 0, rssBeforeMiB: 227, rssAfterMiB: 257, costMiB: 31.6, measuredCostMiB: 30 }));
    expect(t.met).toBe(true);
    expect(t.measured).toMatch(/^32 MiB scaled from 30 MiB for the 9,500 the daemon's descriptor limit could hold/);
  });

  it('is not met when connections failed, or fewer were held without a scaled figure', () => {
    expect(idleTarget(run({ count: 10_000, open: 9_000, failed: 1_000, rssBeforeMiB: 1, rssAfterMiB: 2, costMiB: 1, measuredCostMiB: 1 })).met).toBe(false);
    expect(idleTarget(run({ count: 10_000, open: 9_000, failed: 0, rssBeforeMiB: 1, rssAfterMiB: 2, costMiB: 1 })).met).toBe(false);
    expect(idleTarget(run({ count: 10_000, open: 10_000, failed: 0, rssBeforeMiB: 1, rssAfterMiB: 200, costMiB: 199 })).met).toBe(false);
  });
});

import { describe, expect, it } from 'vitest';
import { traceBench, traceTarget, type TraceBench } from '../../bench/trace.ts';

/** The packet tracer's bench part: it traces every mode's read of a (small) cluster and judges the target on CPU time. */
describe('packet tracer bench', () => {
  it('traces each mode of a synthetic cluster and gets a verdict for every packet', async () => {
    const b = await traceBench({ services: 40, endpoints: 3, runs: 2 });
    expect(b.modes.map((m) => m.mode)).toEqual(['iptables', 'nftables', 'ipvs']);
    for (const m of b.modes) {
      expect(m.ms).toHaveLength(12);
      expect(Object.keys(m.verdicts)).toHaveLength(6);
      // The cluster IPs of TCP Services DNAT in every mode.
      expect(m.verdicts['middle service: dnat']).toBe(1);
    }
  }, 60_000);

  it('judges the slowest trace on CPU time, the first of a read included', () => {
    const mode = (firstCpuMs: number, cpuMs: number[]) => ({
      mode: 'iptables' as const,
      rules: 1,
      readMs: 1,
      firstMs: 900,
      firstCpuMs,
      ms: cpuMs.map((x) => x * 10),
      cpuMs,
      byPacket: {},
      verdicts: {},
    });
    const bench = (m: ReturnType<typeof mode>): TraceBench => ({ services: 10_000, endpoints: 10, packets: ['a'], modes: [m] });
    expect(traceTarget(bench(mode(30, [1, 2]))).met).toBe(true);
    expect(traceTarget(bench(mode(51, [1, 2]))).met).toBe(false);
    expect(traceTarget(bench(mode(3, [1, 60]))).measured).toBe('60.0 ms CPU, the slowest trace of any mode');
  });
});

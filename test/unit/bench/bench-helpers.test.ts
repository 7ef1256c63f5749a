import { describe, expect, it } from 'vitest';
import { attributeLatencies } from '../../bench/churn.ts';
import { generateCluster, mixOf } from '../../bench/cluster.ts';
import { churnTargets } from '../../bench/manifests.ts';
import { evaluateTargets } from '../../bench/report.ts';
import type { Results } from '../../bench/results.ts';
import { percentiles, quantile, summarize } from '../../bench/stats.ts';
import { servicePortsFromService } from '../../../server/proxy/service-port.ts';
import { sliceInfoFromEndpointSlice } from '../../../server/proxy/endpoint-slice-cache.ts';

/** The pure parts of npm run bench: the synthetic clusters, the statistics, the latency attribution, the verdicts. */
describe('synthetic clusters', () => {
  it('are the same for the same seed and hold the asked mix', () => {
    const a = generateCluster({ services: 10_000, endpointsPerService: 2, nodeName: 'n', nodeIP: '10.250.0.2' });
    const b = generateCluster({ services: 10_000, endpointsPerService: 2, nodeName: 'n', nodeIP: '10.250.0.2' });
    expect(JSON.stringify(a.services.slice(0, 50))).toBe(JSON.stringify(b.services.slice(0, 50)));
    const mix = mixOf(a);
    expect(mix.services).toBe(10_000);
    expect(mix.endpoints).toBe(20_000);
    const share = (n: number) => n / mix.services;
    expect(share(mix.nodePort)).toBeCloseTo(0.1, 1);
    expect(share(mix.loadBalancer)).toBeCloseTo(0.02, 2);
    expect(share(mix.externalTrafficPolicyLocal)).toBeCloseTo(0.05, 2);
    expect(share(mix.sessionAffinity)).toBeCloseTo(0.05, 2);
    expect(share(mix.udp)).toBeCloseTo(0.1, 1);
  });

  it('are valid: kproxy accepts every generated Service and EndpointSlice', () => {
    const c = generateCluster({ services: 2000, endpointsPerService: 3, nodeName: 'n', nodeIP: '10.250.0.2' });
    for (const s of c.services) expect(servicePortsFromService(s, 'IPv4').kind, s.metadata!.name).toBe('ports');
    for (const s of c.slices) expect(sliceInfoFromEndpointSlice(s, 'IPv4').kind, s.metadata!.name).toBe('slice');
    const lbs = c.services.filter((s) => s.spec!.type === 'LoadBalancer');
    expect(lbs.every((s) => s.spec!.loadBalancerSourceRanges!.length > 0 && s.status!.loadBalancer!.ingress!.length === 1)).toBe(true);
  });

  it('spreads churn targets over the whole cluster', () => {
    expect(churnTargets(1000, 4)).toEqual([0, 250, 500, 750]);
    expect(churnTargets(3, 10)).toEqual([0, 1, 2]);
  });
});

describe('statistics', () => {
  it('interpolates quantiles and summarises runs', () => {
    expect(quantile([1, 2, 3, 4], 0.5)).toBe(2.5);
    expect(quantile([5], 0.99)).toBe(5);
    expect(summarize([3, 1, 2, NaN])).toEqual({ n: 3, min: 1, median: 2, max: 3 });
    expect(percentiles(Array.from({ length: 101 }, (_, i) => i)).p99).toBe(99);
  });
});

describe('network programming latency attribution', () => {
  it('gives every change the finish time of the sync whose oldest change starts its range', () => {
    const written = [1000, 1020, 1040, 1060, 1080];
    // Sync 7 programmed 1000..1040 (oldest 1000, finished 2000); sync 8 the rest (oldest 1060, finished 2500).
    const rows = [
      { seq: 6, finishedAt: 900, programmingMs: null, ok: true },
      { seq: 7, finishedAt: 2000, programmingMs: 1000, ok: true },
      { seq: 8, finishedAt: 2500, programmingMs: 1440, ok: true },
    ];
    expect(attributeLatencies(written, rows)).toEqual([1000, 980, 960, 1440, 1420]);
  });

  it('leaves out what no sync claims and ignores failed syncs', () => {
    const rows = [
      { seq: 1, finishedAt: 3000, programmingMs: 2000, ok: false },
      { seq: 2, finishedAt: 3100, programmingMs: 2080, ok: true },
    ];
    expect(attributeLatencies([1000, 1020], rows)).toEqual([2080]);
  });
});

describe('target verdicts', () => {
  const run = (totalMs: number, buildMs: number, bare: number, steadyRssMiB = 280, peakRssMiB = 420) => ({
    totalMs,
    buildMs,
    applyMs: totalMs - buildMs,
    ownShare: buildMs / totalMs,
    bareRestoreMs: bare,
    ratio: totalMs / bare,
    steadyRssMiB,
    peakRssMiB,
    steadyPeakRssMiB: peakRssMiB,
  });
  const results = {
    machine: { autoFlavor: { flavor: 'nft', why: '' } },
    fullSync: [
      { size: { services: 10_000, endpoints: 2 }, flavor: 'nft', runs: [run(4000, 300, 3800, 190, 210), run(5200, 400, 4000, 195, 230), run(4500, 1100, 3900, 200, 215)] },
      { size: { services: 10_000, endpoints: 10 }, flavor: 'nft', runs: [run(14_000, 500, 10_000)] },
      { size: { services: 10_000, endpoints: 2 }, flavor: 'legacy', runs: [run(99_000, 1, 1)] },
    ],
    partial: [
      {
        size: { services: 10_000, endpoints: 2 },
        flavor: 'nft',
        samples: [
          { kind: 'endpoint', ms: 90, endToEndMs: 400 },
          { kind: 'add', ms: 500, endToEndMs: 800 },
        ],
      },
    ],
    churn: [
      { size: { services: 10_000, endpoints: 10 }, flavor: 'nft', rate: 50, minSyncPeriodMs: 1000, attributed: 10, changes: 10, latencyMs: { n: 10, p50: 900, p90: 1500, p99: 2100, max: 2200 } },
    ],
    leak: null,
  } as unknown as Results;

  it('judges the node default flavour by the median of its runs', () => {
    const t = Object.fromEntries(evaluateTargets(results).map((x) => [x.name.split(':')[0] + (x.name.includes('share') ? ' share' : ''), x.met]));
    expect(t['Full sync 10,000 × 2 (nft)']).toBe(true); // median 4500 ms
    expect(t['Full sync 10,000 × 2 (nft) share']).toBe(true); // median 300/4000=7.5%
    expect(t['Full sync 10,000 × 10 (nft)']).toBe(false); // 1.4
    expect(t['RSS at 10,000 × 10 (nft), steady']).toBe(true); // 280 ≤ 300 MiB
    expect(t['RSS at 10,000 × 10 (nft), peak (start-up and full sync)']).toBe(false); // 420 > 400 MiB
    expect(t['RSS at 10,000 × 2 (nft), steady']).toBe(true); // median 195 ≤ 200 MiB
    expect(t['RSS at 10,000 × 2 (nft), peak (start-up and full sync)']).toBe(true); // median 215 ≤ 220 MiB
    expect(t['Steady RSS from 10,000 × 2 to 10,000 × 10 (nft, four times the endpoints)']).toBe(true); // 280 / 195 = 1.44
    expect(t['Network programming latency at 10,000 × 10 (nft), 50 updates/s']).toBe(false);
    expect(t["Partial sync at 10,000 × 2 (nft), one service's endpoint changed"]).toBe(true);
  });

  it('judges memory at rest, with a client, and cold start against issue 18', () => {
    const more = {
      ...results,
      exampleIdle: [
        { mode: 'iptables', rssMiB: 95, peakRssMiB: 96, afterGcRssMiB: 94, heapMiB: 20 },
        { mode: 'ipvs', rssMiB: 101, peakRssMiB: 102, afterGcRssMiB: 100, heapMiB: 21 },
      ],
      clientConnected: [{ size: { services: 10_000, endpoints: 10 }, flavor: 'nft', snapshotMs: 90, rssMiB: 340, peakRssMiB: 390, afterGcRssMiB: 330, heapMiB: 150 }],
      coldStart: [
        {
          source: 'file',
          size: { services: 10_000, endpoints: 2 },
          flavor: 'nft',
          totalMs: 4800,
          startMs: 300,
          readMs: 900,
          waitMs: 0,
          buildMs: 300,
          kernelMs: 3200,
          otherMs: 100,
          manifestBytes: 1,
          peakRssMiB: 200,
        },
        {
          source: 'api',
          size: { services: 10_000, endpoints: 2 },
          flavor: 'nft',
          totalMs: 5200,
          startMs: 300,
          readMs: 1300,
          waitMs: 0,
          buildMs: 300,
          kernelMs: 3200,
          otherMs: 100,
          manifestBytes: 0,
          peakRssMiB: 200,
        },
      ],
      listDecode: { objects: 20_000, bytes: 10 * 1024 * 1024, plainMs: 450, modelsMs: 2000 },
    } as unknown as Results;
    const t = evaluateTargets(more);
    const met = (prefix: string) => t.filter((x) => x.name.startsWith(prefix)).map((x) => x.met);
    expect(met('The example cluster')).toEqual([false]); // ipvs 101 > 100 MiB: every mode must fit
    expect(met('RSS at 10,000 × 10 (nft) with a dashboard client connected')).toEqual([true]);
    expect(met('Cold start')).toEqual([true, false]);
    expect(met('Decoding 20,000 listed objects')).toEqual([true]);
  });
});

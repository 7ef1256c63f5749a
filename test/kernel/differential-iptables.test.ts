import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { formatIptablesSave } from '../../server/kernel/iptables-save-parser.ts';
import { silentLogger } from '../../server/log.ts';
import { harness, testConfig } from '../../server/proxy/iptables/testing.ts';
import type { IPFamily } from '../../server/net/ip.ts';
import { tiers } from '../tiers.ts';
import { clusterCIDRs, expectations, fixedEdgeCases, type EdgeCase } from './harness/edge-cluster.ts';
import {
  checkTraces,
  edgeCaseById,
  edgeCaseIds,
  EdgeTimings,
  firstDifference,
  inTurnOrTogether,
  iptablesRead,
  iptablesShape,
  replayHint,
  runChildInNamespace,
  type FamilyRun,
} from './harness/edge-run.ts';
import { stateFromObjects } from '../../server/proxy/testing.ts';

/**
 * iptables mode at the edges (harness/edge-cluster.ts): each fixed edge case
 * and each random cluster of edgeSeeds() is programmed through every writer
 * of the mode, each into a fresh network namespace, and what the kernel then
 * holds is compared, as the kernel's own `iptables-save` lists it (reduced to
 * what the kernel keeps: iptablesShape):
 *   - iptables-nft-restore and iptables-legacy-restore (ip6tables for IPv6),
 *   - the simulated kernel (server/kernel/iptables-simulated.ts, --dry-run's),
 * must hold the same rules, with no sync error, no service port skipped and
 * no object refused. Then the packet tracer walks the nft flavour's listing
 * for every address of every service port and says it reaches exactly the
 * endpoints kube-proxy would, each with its even share, and that every
 * sampled source inside loadBalancerSourceRanges gets through and every one
 * just outside is dropped.
 *
 * Cost: endpoints-10000 is left to endpoints-10000-dual (its IPv4 half is the
 * same table), and the single-family source-ranges cases to their dual-stack
 * one (the same two tables), unless KPROXY_EDGE_FULL=1; everything else runs, the two
 * flavours' namespaces side by side (one at a time with KPROXY_EDGE_FULL=1,
 * whose times are the limits table's). Sizes and times go to
 * test-results/edge-iptables.json. More random clusters:
 * KPROXY_EDGE_SEEDS=100-199 npx vitest run --project kernel test/kernel/differential-iptables.test.ts
 */
const CHILD = join(import.meta.dirname, 'differential-iptables.child.ts');
const FILE = 'test/kernel/differential-iptables.test.ts';
const CI_SKIP = ['endpoints-10000', 'source-ranges-4096-v4', 'source-ranges-4096-v6'];
const FLAVORS = ['nft', 'legacy'] as const;
const timings = new EdgeTimings('iptables');
afterAll(() => timings.write());

/** simulated programs a case into the simulated kernel, one per family, and returns each family's listing. */
async function simulated(c: EdgeCase): Promise<Map<IPFamily, { save: string; ms: number; error: string | null; skipped: number }>> {
  const out = new Map<IPFamily, { save: string; ms: number; error: string | null; skipped: number }>();
  for (const family of c.families) {
    const h = harness({ config: testConfig({ clusterCIDRs: clusterCIDRs(c) }), nodeName: c.node, family, logger: silentLogger });
    await h.backend.init?.();
    const state = stateFromObjects(c.node, c.objects, undefined, family);
    const t0 = performance.now();
    const r = await h.backend.sync({ state: state.checkout(), forceFull: true });
    out.set(family, { save: formatIptablesSave(h.kernel.dump()), ms: performance.now() - t0, error: r.error?.message ?? null, skipped: r.skippedServicePorts?.size ?? 0 });
  }
  return out;
}

describe.skipIf(!tiers().kernel.ok)('iptables mode programs the edge cases exactly, the same through every writer', () => {
  const ids = edgeCaseIds(
    fixedEdgeCases().map((c) => c.name),
    CI_SKIP,
  );
  for (const id of ids) {
    it(`${id}: iptables-nft-restore, iptables-legacy-restore and the simulated kernel hold the same rules, and every address reaches exactly its endpoints`, async () => {
      const c = edgeCaseById(id);
      const hint = replayHint(id, FILE);
      const sim = await simulated(c);
      const runs = await inTurnOrTogether(FLAVORS.map((flavor) => () => runChildInNamespace<{ runs: FamilyRun[] }>(CHILD, [id, flavor])));
      const real = new Map<string, FamilyRun[]>(FLAVORS.map((flavor, i) => [flavor, runs[i].runs]));
      for (const family of c.families) {
        const s = sim.get(family)!;
        expect(s.error, `${hint}: the simulated kernel refused the ${family} sync`).toBeNull();
        const want = iptablesShape(s.save);
        for (const flavor of FLAVORS) {
          const run = real.get(flavor)!.find((x) => x.family === family)!;
          expect(run.error, `${hint}: iptables-${flavor}-restore refused the ${family} sync`).toBeNull();
          expect(run.skipped, `${hint}: service ports skipped`).toEqual({});
          expect(run.invalid, `${hint}: objects refused`).toEqual({});
          expect(firstDifference(iptablesShape(run.save), want), `${hint}: ${flavor} ${family} against the simulated kernel`).toBeNull();
          timings.add({ case: c.name, family, writer: `iptables-${flavor}-restore`, lines: run.lines, bytes: run.bytes, syncMs: Math.round(run.ms), restoreMs: Math.round(run.applyMs) });
        }
        timings.add({ case: c.name, family, writer: 'simulated', syncMs: Math.round(s.ms) });
      }
      const nft = new Map(real.get('nft')!.map((r) => [r.family, r.save]));
      const check = checkTraces(c, await iptablesRead(nft), expectations(c), { mode: 'iptables', uniform: true });
      timings.add({ case: c.name, writer: 'trace (nft listing)', traces: check.traces, ms: Math.round(check.ms) });
      expect(check.failures, `${hint}: ${check.failureCount} of ${check.traces} traces went wrong`).toEqual([]);
      expect(check.traces).toBeGreaterThan(0);
    }, 300_000);
  }
});

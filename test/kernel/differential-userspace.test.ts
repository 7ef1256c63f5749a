import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../server/clock-fake.ts';
import { formatIptablesSave } from '../../server/kernel/iptables-save-parser.ts';
import { SimulatedIptables } from '../../server/kernel/iptables-simulated.ts';
import { FakeNetInterfaces } from '../../server/kernel/netif-fake.ts';
import { SimulatedSockets } from '../../server/kernel/sockets-simulated.ts';
import { silentLogger } from '../../server/log.ts';
import type { IPFamily } from '../../server/net/ip.ts';
import { createUserspaceBackend } from '../../server/proxy/userspace/proxier.ts';
import { tiers } from '../tiers.ts';
import { expectations, fixedEdgeCases, NODE_IPS, type EdgeCase, type EdgeDestination, type EdgeExpectation } from './harness/edge-cluster.ts';
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
  userspaceEdgeConfig,
  type UserspaceRun,
} from './harness/edge-run.ts';
import { stateFromObjects } from '../../server/proxy/testing.ts';

/**
 * The userspace mode at the edges (harness/edge-cluster.ts): each fixed edge
 * case and each random cluster of edgeSeeds() is programmed, for its primary
 * IP family (the mode's only one), through the mode's writers, each into a
 * fresh network namespace: its portals through iptables-nft-restore and
 * iptables-legacy-restore, with its proxy sockets and node port claims bound
 * for real there (differential-userspace.child.ts), and beside it into the
 * simulated kernel and network (--dry-run's). The portals the kernel then
 * holds (`iptables-save`) must be the simulated ones, and the proxy sockets
 * the same ports with the same rotations, with no sync error, no bind
 * failure, no service port skipped (but SCTP, which the mode does not relay).
 * Then the packet tracer walks the nft flavour's portals for every address of
 * every service port: it must reach the proxy socket of that port's traffic
 * policy, whose rotation must be exactly the endpoints kube-proxy would use.
 *
 * The mode writes no firewall for loadBalancerSourceRanges (its portals take
 * every source; server/proxy/userspace/README.md): sources are not checked here.
 *
 * Cost: the portals are a few rules per service port whatever the endpoints,
 * so the endpoint counts above 1,000 (one socket and its rotation) are left to
 * KPROXY_EDGE_FULL=1, as are the single-family source-range cases (their
 * dual-stack case runs the primary family). Sizes and times go to
 * test-results/edge-userspace.json. More random clusters:
 * KPROXY_EDGE_SEEDS=100-199 npx vitest run --project kernel test/kernel/differential-userspace.test.ts
 */
const CHILD = join(import.meta.dirname, 'differential-userspace.child.ts');
const FILE = 'test/kernel/differential-userspace.test.ts';
const CI_SKIP = ['endpoints-5000', 'endpoints-10000', 'endpoints-10000-dual', 'source-ranges-4096-v4', 'source-ranges-4096-v6'];
const FLAVORS = ['nft', 'legacy'] as const;
const timings = new EdgeTimings('userspace');
afterAll(() => timings.write());

/** simulated programs a case into the simulated iptables and in-memory network, as --dry-run does. */
async function simulated(c: EdgeCase, family: IPFamily) {
  const iptables = new SimulatedIptables({ family });
  const backend = createUserspaceBackend({
    config: userspaceEdgeConfig(c),
    nodeName: c.node,
    family,
    iptables,
    sockets: new SimulatedSockets({ nodeAddress: NODE_IPS[family] }),
    netif: new FakeNetInterfaces([
      { ifname: 'lo', family: 'IPv4', address: '127.0.0.1', prefixLength: 8 },
      { ifname: 'lo', family: 'IPv6', address: '::1', prefixLength: 128 },
      { ifname: 'lo', family, address: NODE_IPS[family], prefixLength: family === 'IPv6' ? 128 : 32 },
    ]),
    clock: new FakeClock(),
    logger: silentLogger,
    random: () => 0,
    cleanup: async () => ({ removed: {}, errors: [] }),
  });
  const t0 = performance.now();
  const r = await backend.sync({ state: stateFromObjects(c.node, c.objects, undefined, family).checkout(), forceFull: true });
  const ms = performance.now() - t0;
  const planned = backend.intended();
  const sockets = (planned?.ids() ?? []).flatMap((id) => planned!.port(id)!.sockets.map((s) => ({ id, pool: s.pool, port: s.port, endpoints: [...s.endpoints] })));
  await backend.stop?.();
  return { save: formatIptablesSave(iptables.dump()), sockets, error: r.error?.message ?? null, ms };
}

describe.skipIf(!tiers().kernel.ok)('the userspace mode programs the edge cases exactly, the same through every writer', () => {
  const ids = edgeCaseIds(
    fixedEdgeCases().map((c) => c.name),
    CI_SKIP,
  );
  for (const id of ids) {
    it(`${id}: iptables-nft-restore, iptables-legacy-restore and the simulated kernel hold the same portals, and every address reaches the proxy socket whose rotation is exactly its endpoints`, async () => {
      const c = edgeCaseById(id);
      const family = c.families[0];
      const hint = replayHint(id, FILE);
      const sim = await simulated(c, family);
      expect(sim.error, `${hint}: the simulated kernel refused the sync`).toBeNull();
      const runs = await inTurnOrTogether(FLAVORS.map((flavor) => () => runChildInNamespace<{ run: UserspaceRun }>(CHILD, [id, flavor])));
      const want = iptablesShape(sim.save);
      for (const [i, flavor] of FLAVORS.entries()) {
        const run = runs[i].run;
        expect(run.error, `${hint}: iptables-${flavor}-restore refused the sync`).toBeNull();
        expect(run.bindFailures, `${hint}: sockets that could not be bound`).toEqual({ proxy_port: 0, node_port: 0, external_ip: 0 });
        for (const [port, why] of Object.entries(run.skipped)) expect(why, `${hint}: ${port} skipped`).toMatch(/^SCTP is not relayed/);
        expect(run.invalid, `${hint}: objects refused`).toEqual({});
        expect(firstDifference(iptablesShape(run.save), want), `${hint}: ${flavor} against the simulated kernel`).toBeNull();
        expect(run.sockets, `${hint}: proxy sockets against the simulated network`).toEqual(sim.sockets);
        timings.add({ case: c.name, family, writer: `iptables-${flavor}-restore + sockets`, lines: run.lines, bytes: run.bytes, syncMs: Math.round(run.ms), proxySockets: run.sockets.length });
      }
      timings.add({ case: c.name, family, writer: 'simulated', syncMs: Math.round(sim.ms) });

      // Every destination reaches its pool's proxy socket; that socket's rotation is the endpoints.
      const sockets = runs[0].run.sockets;
      const socketOf = (d: EdgeDestination, e: EdgeExpectation) => sockets.find((s) => s.id === `${e.servicePort}/${e.protocol}` && s.pool === (d.policy === 'Local' ? 'local' : 'cluster'));
      const at = (port: number) => (family === 'IPv6' ? `[${NODE_IPS[family]}]:${port}` : `${NODE_IPS[family]}:${port}`);
      const check = checkTraces(
        c,
        await iptablesRead(new Map([[family, runs[0].run.save]])),
        expectations(c).filter((e) => e.family === family),
        {
          mode: 'userspace',
          sources: false,
          expected: (d, e) => {
            const s = socketOf(d, e);
            return s ? [at(s.port)] : [];
          },
          check: (_r, d, e) => {
            const s = socketOf(d, e);
            if (!s) return e.protocol === 'SCTP' ? null : `no proxy socket for its ${d.policy} policy`;
            const rotation = [...s.endpoints].sort().join(' ');
            return rotation === d.endpoints.join(' ') ? null : `the proxy socket's rotation is ${rotation || '(none)'}, must be ${d.endpoints.join(' ') || '(none)'}`;
          },
        },
      );
      timings.add({ case: c.name, writer: 'trace (nft listing)', traces: check.traces, ms: Math.round(check.ms) });
      expect(check.failures, `${hint}: ${check.failureCount} of ${check.traces} traces went wrong`).toEqual([]);
      expect(check.traces).toBeGreaterThan(0);
    }, 300_000);
  }
});

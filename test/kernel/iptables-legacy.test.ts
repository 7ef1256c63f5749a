import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { waitFor } from '../wait.ts';
import { diagnosed } from './harness/diagnostics.ts';
import { ready, tcpPort, type ServiceSpec } from './harness/manifests.ts';
import { CLIENT_IP, NODE_A, NODE_A_TO_B, PODS } from './harness/plan.ts';
import { TestCluster } from './harness/topology.ts';

/**
 * The core of iptables mode again with `--iptables-flavor legacy` (nodes whose
 * kubelet still uses the legacy x_tables): the same traffic must flow, and
 * every rule must live in the legacy tables, none in nf_tables.
 */
const { a0, a1, a2, b0 } = PODS;
const spread: ServiceSpec = { name: 'spread', clusterIP: '10.96.0.10', ports: tcpPort(80) };
const empty: ServiceSpec = { name: 'empty', clusterIP: '10.96.0.11', ports: tcpPort(80) };
const nodePort: ServiceSpec = { name: 'nodeport', type: 'NodePort', clusterIP: '10.96.0.12', ports: tcpPort(80, 30080) };
const etpLocal: ServiceSpec = { name: 'etp-local', type: 'NodePort', externalTrafficPolicy: 'Local', clusterIP: '10.96.0.15', ports: tcpPort(80, 30082) };
const shrink: ServiceSpec = { name: 'shrink', clusterIP: '10.96.0.21', ports: tcpPort(80) };

describe.skipIf(!tiers().kernel.ok)('iptables mode (legacy) with real packets', () => {
  let cluster: TestCluster | undefined;
  const spec = (body: (c: TestCluster) => Promise<void>) => () => diagnosed(cluster, () => body(cluster!));

  beforeAll(async () => {
    cluster = await TestCluster.create();
    const m = cluster.manifests;
    m.writeService(spread, ready(a0, a1, a2, b0));
    m.writeService(empty, null);
    m.writeService(nodePort, ready(a0, b0));
    m.writeService(etpLocal, ready(a0, b0));
    m.writeService(shrink, ready(a0, a1));
    await cluster.startKproxy('legacy');
  });

  afterAll(async () => {
    await cluster?.destroy();
  });

  it(
    'programs the legacy tables and leaves nf_tables without KUBE- chains',
    spec(async (c) => {
      expect(await c.iptablesSave('legacy')).toMatch(/^-A KUBE-SERVICES .* -j KUBE-SVC-/m);
      expect(await c.iptablesSave('nft')).not.toContain('KUBE-');
    }),
  );

  it(
    'a cluster IP spreads connections across every endpoint',
    spec(async (c) => {
      const t = await c.client().tcp({ host: spread.clusterIP, port: 80 }, 60);
      expect(t.outcomes).toEqual({ ok: 60 });
      expect(t.backends).toEqual(['a0', 'a1', 'a2', 'b0']);
    }),
  );

  it(
    'a cluster IP without endpoints is refused at once',
    spec(async (c) => {
      const t = await c.client().tcp({ host: empty.clusterIP, port: 80, timeoutMs: 3000 });
      expect(t.outcomes).toEqual({ refused: 1 });
      expect(t.attempts[0].ms).toBeLessThan(250);
    }),
  );

  it(
    'a node port answers on the node IP, masquerading the client',
    spec(async (c) => {
      const t = await c.client().tcp({ host: NODE_A.ip, port: 30080 }, 30);
      expect(t.outcomes).toEqual({ ok: 30 });
      expect(t.backends).toEqual(['a0', 'b0']);
      for (const a of t.attempts) expect(a.peer).toBe(a.name === 'a0' ? NODE_A.podGateway : NODE_A_TO_B);
    }),
  );

  it(
    "externalTrafficPolicy Local keeps the client's source IP",
    spec(async (c) => {
      const t = await c.client().tcp({ host: NODE_A.ip, port: 30082 }, 10);
      expect(t.outcomes).toEqual({ ok: 10 });
      expect(t.backends).toEqual(['a0']);
      expect(t.peers).toEqual([CLIENT_IP]);
    }),
  );

  it(
    'removing an endpoint from the watched manifests stops traffic to it within 2 s',
    spec(async (c) => {
      expect((await c.client().tcp({ host: shrink.clusterIP, port: 80 }, 30)).backends).toEqual(['a0', 'a1']);
      const removedAt = performance.now();
      c.manifests.writeService(shrink, ready(a0));
      const elapsed = await waitFor(async () => ((await c.client().tcp({ host: shrink.clusterIP, port: 80 }, 20)).backends.includes('a1') ? null : performance.now() - removedAt), {
        timeoutMs: 5000,
        intervalMs: 0,
        what: 'a1 to stop answering for shrink',
      });
      console.info(`[measured] legacy: endpoint removed from the manifest -> no more traffic to it after ${Math.round(elapsed)} ms`);
      expect(elapsed).toBeLessThan(2000);
      expect((await c.client().tcp({ host: shrink.clusterIP, port: 80 }, 40)).backends).toEqual(['a0']);
    }),
  );

  it(
    'after kproxy stops, --cleanup leaves no KUBE- chain in the legacy tables',
    spec(async (c) => {
      expect(await c.kproxy.stop()).toBe(0);
      expect((await c.kproxy.command(['--cleanup'])).code).toBe(0);
      expect(await c.iptablesSave('legacy')).not.toContain('KUBE-');
    }),
  );
});

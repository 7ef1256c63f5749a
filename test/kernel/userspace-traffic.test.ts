import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { waitFor } from '../wait.ts';
import { diagnosed } from './harness/diagnostics.ts';
import { nodeObject, ready, tcpPort, type ServiceSpec } from './harness/manifests.ts';
import { bulkDigest } from './harness/bulk-data.ts';
import { CLIENT_IP, NODE_A, NODE_B, PODS, POD_BULK_PORT, POD_UDP_PORT, type Pod } from './harness/plan.ts';
import { METRICS_ADDRESS } from './harness/kproxy.ts';
import { TestCluster } from './harness/topology.ts';

/**
 * kproxy's userspace mode with real packets: the daemon on node-a opens a proxy
 * socket per service port and installs kube-proxy's portal chains that send
 * service traffic to it; the relay connects to an endpoint on node-a or node-b
 * and carries the bytes. Each backend answers with its name and the address it
 * saw (the relay's: the proxy makes its own connection to the endpoint).
 */
const { a0, a1, a2, b0 } = PODS;

const spread: ServiceSpec = { name: 'spread', clusterIP: '10.96.0.10', ports: tcpPort(80) };
const empty: ServiceSpec = { name: 'empty', clusterIP: '10.96.0.11', ports: tcpPort(80) };
const nodePort: ServiceSpec = { name: 'nodeport', type: 'NodePort', clusterIP: '10.96.0.12', ports: tcpPort(80, 30080) };
const sticky: ServiceSpec = { name: 'sticky', sessionAffinity: 'ClientIP', clusterIP: '10.96.0.18', ports: tcpPort(80) };
const dns: ServiceSpec = { name: 'dns', clusterIP: '10.96.0.20', ports: [{ name: 'dns', protocol: 'UDP', port: 53, targetPort: POD_UDP_PORT }] };
const shrink: ServiceSpec = { name: 'shrink', clusterIP: '10.96.0.21', ports: tcpPort(80) };
const flaky: ServiceSpec = { name: 'flaky', clusterIP: '10.96.0.22', ports: tcpPort(80) };
const bulk: ServiceSpec = { name: 'bulk', clusterIP: '10.96.0.23', ports: [{ name: 'bulk', port: 9000, targetPort: POD_BULK_PORT }] };
const crowd: ServiceSpec = { name: 'crowd', clusterIP: '10.96.0.24', ports: tcpPort(80) };
/** down: an endpoint whose server is not running (the client namespace's address: nothing listens on the pods' port there). */
const down: Pod = { name: 'down', ip: CLIENT_IP, ip6: 'fd00::2', node: NODE_A.name };

describe.skipIf(!tiers().kernel.ok)('userspace mode with real packets', () => {
  let cluster: TestCluster | undefined;
  const spec = (body: (c: TestCluster) => Promise<void>) => () => diagnosed(cluster, () => body(cluster!));

  beforeAll(async () => {
    cluster = await TestCluster.create();
    const m = cluster.manifests;
    m.write('nodes', [nodeObject(NODE_A.name, NODE_A.ip, NODE_A.podCIDR, { zone: 'zone-a' }), nodeObject(NODE_B.name, NODE_B.ip, NODE_B.podCIDR, { zone: 'zone-b' })]);
    m.writeService(spread, ready(a0, a1, b0));
    m.writeService(empty, null);
    m.writeService(nodePort, ready(a0, b0));
    m.writeService(sticky, ready(a0, a1, a2));
    m.writeService(dns, ready(a1, a2));
    m.writeService(shrink, ready(a0, a1));
    m.writeService(flaky, ready(down, a0));
    m.writeService(bulk, ready(b0));
    m.writeService(crowd, ready(a0, a1, b0));
    await cluster.startKproxy('nft', ['--proxy-mode', 'userspace']);
  });

  afterAll(async () => {
    await cluster?.destroy();
  });

  it(
    "programs kube-proxy's portal chains",
    spec(async (c) => {
      const nat = await c.iptablesSave('nft');
      expect(nat).toContain(':KUBE-PORTALS-CONTAINER');
      expect(nat).toContain(':KUBE-PORTALS-HOST');
      expect(nat).not.toMatch(/KUBE-SVC-/);
    }),
  );

  it(
    'a cluster IP round-robins connections from one client exactly evenly over its endpoints',
    spec(async (c) => {
      const t = await c.client().tcp({ host: spread.clusterIP, port: 80 }, 30);
      expect(t.outcomes).toEqual({ ok: 30 });
      const per: Record<string, number> = {};
      for (const a of t.attempts) per[a.name!] = (per[a.name!] ?? 0) + 1;
      expect(per).toEqual({ a0: 10, a1: 10, b0: 10 });
    }),
  );

  it(
    'from the node itself and from a pod too',
    spec(async (c) => {
      for (const where of ['node-a', 'a2'] as const) {
        const t = await c.client(where).tcp({ host: spread.clusterIP, port: 80 }, 6);
        expect(t.outcomes, where).toEqual({ ok: 6 });
        expect(t.backends, where).toEqual(['a0', 'a1', 'b0']);
      }
    }),
  );

  it(
    "a node port answers on the node's IP",
    spec(async (c) => {
      const t = await c.client().tcp({ host: NODE_A.ip, port: 30080 }, 10);
      expect(t.outcomes).toEqual({ ok: 10 });
      expect(t.backends).toEqual(['a0', 'b0']);
    }),
  );

  it(
    'ClientIP affinity pins a client to one endpoint',
    spec(async (c) => {
      const t = await c.client().tcp({ host: sticky.clusterIP, port: 80 }, 12);
      expect(t.outcomes).toEqual({ ok: 12 });
      expect(t.backends).toHaveLength(1);
    }),
  );

  it(
    'UDP datagrams are relayed to the endpoints and the replies come back',
    spec(async (c) => {
      const t = await c.client().udp({ host: dns.clusterIP, port: 53 }, 10);
      expect(t.outcomes).toEqual({ ok: 10 });
      expect(t.backends.length).toBeGreaterThanOrEqual(1);
    }),
  );

  it(
    'a service without endpoints resets the connection at once',
    spec(async (c) => {
      // The portal accepts the connection; the relay has nowhere to send it and resets it.
      const t = await c.client().tcp({ host: empty.clusterIP, port: 80, timeoutMs: 2000 }, 2);
      expect(t.outcomes).toEqual({ reset: 2 });
    }),
  );

  it(
    'removing an endpoint keeps an open connection to it and sends new connections elsewhere',
    spec(async (c) => {
      const client = c.client();
      // Round robin: open until a connection reaches a0.
      let open: { conn: number; hello: { name?: string } } | undefined;
      for (let i = 0; i < 4 && open?.hello.name !== 'a0'; i++) {
        if (open) await client.close(open.conn);
        open = await client.open({ host: shrink.clusterIP, port: 80 });
      }
      expect(open!.hello.name).toBe('a0');
      c.manifests.writeService(shrink, ready(a1));
      await waitFor(async () => (await client.tcp({ host: shrink.clusterIP, port: 80 }, 4)).backends.join() === 'a1', { what: 'new connections to go to a1 only', timeoutMs: 10_000 });
      expect(await client.send(open!.conn, 'still there')).toMatchObject({ outcome: 'ok', name: 'a0', echo: 'still there' });
      await client.close(open!.conn);
    }),
  );

  it(
    'an endpoint whose server is down is skipped: every connection still reaches a running one',
    spec(async (c) => {
      const t = await c.client().tcp({ host: flaky.clusterIP, port: 80, timeoutMs: 5000 }, 10);
      expect(t.outcomes).toEqual({ ok: 10 });
      expect(t.backends).toEqual(['a0']);
    }),
  );

  it(
    '200 MB arrive byte-identical through a slow reader, and a reader that stops holds the endpoint back (nothing piles up in the relay)',
    spec(async (c) => {
      const bytes = 200 * 1024 * 1024;
      const holdAt = 100 * 1024 * 1024;
      const client = c.client();
      // The reader stops for 20 ms after every 4 MiB, and stops altogether at 100 MiB until told to go on.
      const transfer = client.bulk({ host: bulk.clusterIP, port: 9000, bytes, pauseEveryBytes: 4 * 1024 * 1024, pauseMs: 20, holdAt, timeoutMs: 240_000 });
      await waitFor(async () => (await client.bulkStatus()).holding, { what: 'the reader to hold at 100 MiB', timeoutMs: 120_000 });
      const relayed = async () => {
        const page = JSON.parse((await c.kproxy.curl(`http://${METRICS_ADDRESS}/api/v1/connections?q=bulk`)).body) as { rows: { bytesToClient: number }[] };
        expect(page.rows).toHaveLength(1);
        return page.rows[0].bytesToClient;
      };
      // While the reader holds, what the relay sent it stops growing: the socket buffers fill, the relay stops
      // reading the endpoint (back-pressure), so no more than those buffers' worth is ever ahead of the reader.
      await new Promise((r) => setTimeout(r, 1500));
      const first = await relayed();
      await new Promise((r) => setTimeout(r, 1500));
      const second = await relayed();
      const { got } = await client.bulkStatus();
      expect(second).toBe(first);
      expect(second - got).toBeLessThan(32 * 1024 * 1024);
      await client.bulkResume();
      const done = await transfer;
      expect({ outcome: done.outcome, bytes: done.bytes }).toEqual({ outcome: 'ok', bytes });
      expect(done.sha256).toBe(bulkDigest(bytes));
    }),
    300_000,
  );

  it(
    '2,000 concurrent connections all complete',
    spec(async (c) => {
      const t = await c.client().many({ host: crowd.clusterIP, port: 80, timeoutMs: 60_000 }, 2000);
      expect(t.outcomes).toEqual({ ok: 2000 });
      expect(t.backends).toEqual(['a0', 'a1', 'b0']);
    }),
    120_000,
  );

  it(
    '--cleanup removes the portal chains and their jumps',
    spec(async (c) => {
      expect(await c.kproxy.stop()).toBe(0);
      const r = await c.kproxy.command(['--cleanup']);
      expect(r.code, r.stderr).toBe(0);
      expect(await c.iptablesSave('nft')).not.toMatch(/KUBE-/);
    }),
  );
});

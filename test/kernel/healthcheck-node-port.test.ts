import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { waitFor } from '../wait.ts';
import { diagnosed } from './harness/diagnostics.ts';
import { curlIn, HEALTHZ_PORT, METRICS_ADDRESS, type HttpAnswer } from './harness/kproxy.ts';
import { ready, tcpPort, type ServiceSpec } from './harness/manifests.ts';
import { LB_IP, NODE_A, PODS } from './harness/plan.ts';
import { TestCluster } from './harness/topology.ts';

/**
 * The node-facing HTTP of a live kproxy, asked the way a cloud load balancer,
 * kubelet and Prometheus ask kube-proxy: the health check node port of an
 * externalTrafficPolicy Local service follows its local endpoints (200 while
 * the node has one, 503 when it has none), /healthz and /livez answer on
 * :10256, and /metrics answers on the metrics address inside the node.
 */
const { a0, a1, b0 } = PODS;
const HEALTH_CHECK_PORT = 32100;
const hc: ServiceSpec = {
  name: 'hc',
  type: 'LoadBalancer',
  clusterIP: '10.96.0.30',
  loadBalancerIP: LB_IP,
  externalTrafficPolicy: 'Local',
  healthCheckNodePort: HEALTH_CHECK_PORT,
  ports: tcpPort(80, 30085),
};
const healthCheckURL = `http://${NODE_A.ip}:${HEALTH_CHECK_PORT}/`;

/** metric reads one sample of a Prometheus text exposition: the first line of `name` whose labels include all of `labels`. */
function metric(body: string, name: string, labels: Record<string, string> = {}): number | null {
  for (const line of body.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    if (Object.entries(labels).every(([k, v]) => (m[2] ?? '').includes(`${k}="${v}"`))) return Number(m[3]);
  }
  return null;
}

describe.skipIf(!tiers().kernel.ok)('node-facing HTTP of a live kproxy', () => {
  let cluster: TestCluster | undefined;
  const spec = (body: (c: TestCluster) => Promise<void>) => () => diagnosed(cluster, () => body(cluster!));
  /** probe asks the health check node port from the client namespace, as a load balancer would. */
  const probe = (c: TestCluster): Promise<HttpAnswer> => curlIn(c.ns.client, healthCheckURL);
  const metrics = async (c: TestCluster): Promise<string> => {
    const r = await c.kproxy.curl(`http://${METRICS_ADDRESS}/metrics`);
    expect(r.status).toBe(200);
    return r.body;
  };

  beforeAll(async () => {
    cluster = await TestCluster.create();
    cluster.manifests.writeService(hc, ready(a0, b0));
    await cluster.startKproxy('nft');
  });

  afterAll(async () => {
    await cluster?.destroy();
  });

  it(
    'the health check node port answers 200 with the local endpoint count while this node has one',
    spec(async (c) => {
      // The listener opens after the first sync; a load balancer keeps probing until it answers.
      const r = await waitFor(
        async () => {
          const a = await probe(c);
          return a.status === 200 ? a : null;
        },
        { timeoutMs: 5000, what: 'the health check port to answer 200' },
      );
      expect(JSON.parse(r.body)).toEqual({ service: { namespace: 'kpt', name: 'hc' }, localEndpoints: 1, serviceProxyHealthy: true });
      expect(r.headers['x-load-balancing-endpoint-weight']).toBe('1');
      expect(r.headers['content-type']).toMatch(/^application\/json/);
      // Traffic for the service goes to the local endpoint only, as the load balancer is told.
      expect((await c.client().tcp({ host: LB_IP, port: 80 }, 10)).backends).toEqual(['a0']);
    }),
  );

  it(
    'the health check node port answers 503 once the manifests drop the local endpoint, and 200 again when local endpoints return',
    spec(async (c) => {
      c.manifests.writeService(hc, ready(b0));
      const down = await waitFor(
        async () => {
          const r = await probe(c);
          return r.status === 503 ? r : null;
        },
        { timeoutMs: 5000, what: 'the health check port to answer 503' },
      );
      expect(JSON.parse(down.body)).toEqual({ service: { namespace: 'kpt', name: 'hc' }, localEndpoints: 0, serviceProxyHealthy: true });
      expect(down.headers['x-load-balancing-endpoint-weight']).toBe('0');
      expect(metric(await metrics(c), 'kubeproxy_sync_proxy_rules_no_local_endpoints_total', { ip_family: 'IPv4', traffic_policy: 'external' })).toBe(1);

      c.manifests.writeService(hc, ready(a0, a1, b0));
      const up = await waitFor(
        async () => {
          const r = await probe(c);
          return r.status === 200 ? r : null;
        },
        { timeoutMs: 5000, what: 'the health check port to answer 200 again' },
      );
      expect(JSON.parse(up.body)).toMatchObject({ localEndpoints: 2, serviceProxyHealthy: true });
      expect(up.headers['x-load-balancing-endpoint-weight']).toBe('2');
      expect(metric(await metrics(c), 'kubeproxy_sync_proxy_rules_no_local_endpoints_total', { ip_family: 'IPv4', traffic_policy: 'external' })).toBe(0);
    }),
  );

  it(
    '/healthz and /livez answer on :10256, inside the node and on the node IP',
    spec(async (c) => {
      for (const host of ['127.0.0.1', NODE_A.ip]) {
        const healthz = await c.kproxy.curl(`http://${host}:${HEALTHZ_PORT}/healthz`);
        expect(healthz.status).toBe(200);
        const body = JSON.parse(healthz.body) as Record<string, unknown>;
        expect(body).toMatchObject({ nodeEligible: true });
        expect(Date.parse(String(body.lastUpdated))).not.toBeNaN();
        expect(Date.parse(String(body.currentTime))).not.toBeNaN();
      }
      const fromClient = await curlIn(c.ns.client, `http://${NODE_A.ip}:${HEALTHZ_PORT}/healthz`);
      expect(fromClient.status).toBe(200);
      const livez = await c.kproxy.curl(`http://127.0.0.1:${HEALTHZ_PORT}/livez`);
      expect(livez.status).toBe(200);
      expect(JSON.parse(livez.body)).not.toHaveProperty('nodeEligible');
    }),
  );

  it(
    "/metrics answers kube-proxy's metrics on the metrics address inside the node, and is not reachable from outside",
    spec(async (c) => {
      const body = await metrics(c);
      expect(metric(body, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds')).toBeGreaterThan(0);
      expect(metric(body, 'kubeproxy_sync_proxy_rules_duration_seconds_count')).toBeGreaterThan(0);
      expect(metric(body, 'kubeproxy_sync_proxy_rules_iptables_total', { table: 'nat' })).toBeGreaterThan(0);
      expect(metric(body, 'kubeproxy_proxy_healthz_total', { code: '200' })).toBeGreaterThan(0);
      expect((await c.kproxy.curl(`http://${METRICS_ADDRESS}/proxyMode`)).body.trim()).toBe('iptables');
      // Bound to loopback (the default): nothing answers on the node IP.
      const outside = await curlIn(c.ns.client, `http://${NODE_A.ip}:${METRICS_ADDRESS.split(':')[1]}/metrics`, 1);
      expect(outside.status).toBe(0);
    }),
  );
});

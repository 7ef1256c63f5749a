import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Server } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import type { ProxyConfig } from '../config/types.ts';
import { ListenFailedError, RestoreFailedError } from '../errors.ts';
import { FakeNetInterfaces } from '../kernel/netif-fake.ts';
import { MemoryLog } from '../log.ts';
import type { Backend, BackendSyncInput, BackendSyncResult } from '../proxy/backend.ts';
import type { PortError } from '../proxy/healthcheck/service-health-server.ts';
import type { Node, Service } from '../proxy/kube-objects.ts';
import type { ChangeHandlers } from '../proxy/proxy-state.ts';
import { MetaProxier } from '../proxy/meta-proxier.ts';
import { createSyncObservers } from '../proxy/sync-observers.ts';
import { ep, makeService, makeSlice } from '../proxy/testing.ts';
import type { Source, SourceStatus } from '../proxy/source.ts';
import { LISTEN_BACKLOG } from '../net/listen.ts';
import { startNodeServers, type DashboardListener, type NodeServers } from './node-servers.ts';
import { testProxyConfig } from './testing.ts';

const NODE = 'node-a';
const SYNC_PERIOD = 30_000;

class ToggleBackend implements Backend {
  readonly mode = 'iptables' as const;
  readonly family = 'IPv4' as const;
  failing = false;
  /** fullRequired: requireFullSync was called since the last successful sync (a backend then syncs fully). */
  fullRequired = false;
  requireFullSync(): void {
    this.fullRequired = true;
  }
  async sync(input: BackendSyncInput): Promise<BackendSyncResult> {
    const full = input.forceFull || this.fullRequired;
    if (!this.failing) this.fullRequired = false;
    return {
      full,
      buildMs: 1,
      applyMs: 1,
      linesWritten: 12,
      bytesWritten: 300,
      servicesWritten: input.state.changedServices.size,
      rulesByTable: { filter: 3, nat: 9 },
      ...(this.failing ? { error: new RestoreFailedError('iptables-restore: line 4 failed') } : {}),
    };
  }
  async cleanup() {
    return { removed: {}, errors: [] };
  }
}

/** MemorySource hands objects to the state directly, like a source that has listed. */
class MemorySource implements Source {
  handlers: ChangeHandlers | null = null;
  async start(h: ChangeHandlers): Promise<void> {
    this.handlers = h;
  }
  async stop(): Promise<void> {}
  status(): SourceStatus {
    return {
      kind: 'kubernetes',
      description: 'memory',
      synced: true,
      objects: 0,
      counters: { relists: 2, connects: 3, 'Service.relists': 1, 'EndpointSlice.relists': 1, 'Service.connects': 2, 'EndpointSlice.connects': 1 },
    };
  }
}

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

function lb(hcPort: number): Service {
  return makeService('shop', 'web', {
    type: 'LoadBalancer',
    clusterIP: '10.96.0.10',
    externalTrafficPolicy: 'Local',
    healthCheckNodePort: hcPort,
    ports: [{ name: 'http', port: 80, protocol: 'TCP', nodePort: 30080 }],
  });
}

function node(extra: Partial<Node> = {}): Node {
  return { apiVersion: 'v1', kind: 'Node', metadata: { name: NODE }, status: { addresses: [{ type: 'InternalIP', address: '127.0.0.1' }] }, ...extra };
}

describe('startNodeServers', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function setup(over: Partial<ProxyConfig> = {}, opts: { retryMs?: number; dashboard?: DashboardListener } = {}) {
    const clock = new FakeClock(Date.UTC(2026, 0, 1));
    const log = new MemoryLog();
    const backend = new ToggleBackend();
    const source = new MemorySource();
    const proxy = new MetaProxier({ backends: [{ family: 'IPv4', backend }], nodeName: NODE, clock, logger: log.logger, minSyncPeriodMs: 1_000, syncPeriodMs: SYNC_PERIOD });
    const state = proxy.primary.state;
    const loop = proxy;
    const config = testProxyConfig({ healthzBindAddress: '127.0.0.1:0', metricsBindAddress: '127.0.0.1:0', nodePortAddresses: ['127.0.0.0/8'], ...over });
    const portErrors: PortError[] = [];
    const observers = createSyncObservers({
      daemon: { config, nodeName: NODE, logger: log.logger, clock, proxy, source },
      onPortError: (e) => portErrors.push(e),
      netInterfaces: new FakeNetInterfaces([
        { ifname: 'lo', family: 'IPv4', address: '127.0.0.1', prefixLength: 8 },
        { ifname: 'eth0', family: 'IPv4', address: '192.0.2.1', prefixLength: 24 },
      ]),
      processMetrics: false,
    });
    for (const o of Object.values(observers.observers)) loop.addObserver(o);
    const servers = await startNodeServers({ config, logger: log.logger, clock, observers, retryMs: opts.retryMs, dashboard: opts.dashboard });
    cleanups.push(async () => {
      await loop.stop();
      await servers.close();
      await observers.close();
    });
    loop.start();
    await source.start(proxy);
    const settle = async (ms: number) => {
      await clock.advanceAsync(ms);
      await loop.idle();
      await observers.serviceHealth.settled();
    };
    return { clock, log, backend, source, state, loop, servers, portErrors, settle, h: () => source.handlers! };
  }

  const url = (s: NodeServers, which: 'healthz' | 'metrics', path: string) => {
    const a = which === 'healthz' ? s.healthzAddress() : s.metricsAddress();
    return `http://127.0.0.1:${a!.port}${path}`;
  };

  it('listens with a queue of LISTEN_BACKLOG connections (capped by somaxconn), not the 511 of Node.js', async () => {
    const { servers } = await setup();
    const somaxconn = Number(readFileSync('/proc/sys/net/core/somaxconn', 'utf8'));
    for (const a of [servers.healthzAddress()!, servers.metricsAddress()!]) {
      // For a listening socket, ss shows the queue's limit as Send-Q.
      const line = execFileSync('ss', ['-Hltn', `sport = :${a.port}`], { encoding: 'utf8' }).trim();
      expect(line.split(/\s+/)[2], line).toBe(String(Math.min(LISTEN_BACKLOG, somaxconn)));
    }
    expect(Math.min(LISTEN_BACKLOG, somaxconn)).toBeGreaterThan(511);
  });

  it('serves healthz, service health checks and metrics that follow the syncs', async () => {
    const hcPort = await freePort();
    const { servers, settle, h, backend } = await setup();
    h().onNode(null, node());
    h().onService(null, lb(hcPort));
    h().onEndpointSlice(null, makeSlice('shop', 'web', 'web-1', [ep('10.1.0.1', { nodeName: NODE })], [{ name: 'http', port: 8080, protocol: 'TCP' }]));
    h().onSynced('Service');
    h().onSynced('EndpointSlice');
    await settle(10);

    const healthz = await fetch(url(servers, 'healthz', '/healthz'));
    expect(healthz.status).toBe(200);
    expect(await healthz.json()).toMatchObject({ nodeEligible: true, healthy: true, status: { IPv4: { healthy: true } } });
    const hc = await fetch(`http://127.0.0.1:${hcPort}/`);
    expect(hc.status).toBe(200);
    expect(hc.headers.get('x-load-balancing-endpoint-weight')).toBe('1');

    const metrics = await (await fetch(url(servers, 'metrics', '/metrics'))).text();
    expect(metrics).toContain('kubeproxy_proxy_healthz_total{code="200"} 1\n');
    expect(metrics).toContain('kubeproxy_sync_proxy_rules_iptables_total{ip_family="IPv4",table="nat"} 9\n');
    expect(metrics).toContain('kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1\n');
    expect(metrics).toMatch(/kubeproxy_sync_proxy_rules_last_timestamp_seconds\{ip_family="IPv4"\} \d/);
    expect(metrics).toContain('kproxy_service_healthchecks 1\n');
    expect(metrics).toContain('kproxy_source_events_total{event="connects",resource="Service",source="kubernetes"} 2\n');
    expect(metrics).not.toContain('kproxy_source_events_total{event="connects",resource=""');
    expect(await (await fetch(url(servers, 'metrics', '/proxyMode'))).text()).toBe('iptables');

    // The backend breaks and a change waits: after 2 x syncPeriod everything reports unhealthy.
    backend.failing = true;
    h().onEndpointSlice(null, makeSlice('shop', 'web', 'web-1', [ep('10.1.0.1', { nodeName: NODE }), ep('10.1.0.2', { nodeName: NODE })], [{ name: 'http', port: 8080, protocol: 'TCP' }]));
    await settle(2 * SYNC_PERIOD - 1_000);
    expect((await fetch(url(servers, 'healthz', '/livez'))).status).toBe(200);
    await settle(1_000);
    expect((await fetch(url(servers, 'healthz', '/livez'))).status).toBe(503);
    expect((await fetch(url(servers, 'healthz', '/healthz'))).status).toBe(503);
    const sick = await fetch(`http://127.0.0.1:${hcPort}/`);
    expect(sick.status).toBe(503);
    expect(await sick.json()).toMatchObject({ localEndpoints: 1, serviceProxyHealthy: false });
    const failing = await (await fetch(url(servers, 'metrics', '/metrics'))).text();
    expect(failing).toMatch(/kubeproxy_sync_proxy_rules_iptables_restore_failures_total\{ip_family="IPv4"\} [1-9]/);
    expect(failing).toContain('kubeproxy_proxy_livez_total{code="503"} 1\n');

    // It recovers with the next sync, which also programs the second endpoint.
    backend.failing = false;
    await settle(SYNC_PERIOD);
    expect((await fetch(url(servers, 'healthz', '/healthz'))).status).toBe(200);
    const well = await fetch(`http://127.0.0.1:${hcPort}/`);
    expect([well.status, well.headers.get('x-load-balancing-endpoint-weight')]).toEqual([200, '2']);
  });

  it('does not count a slow initial listing against health, like kube-proxy before its informers sync', async () => {
    const { servers, settle, h } = await setup();
    h().onService(null, lb(await freePort()));
    await settle(5 * SYNC_PERIOD);
    expect((await fetch(url(servers, 'healthz', '/healthz'))).status).toBe(200);
    h().onSynced('Service');
    h().onSynced('EndpointSlice');
    await settle(10);
    const metrics = await (await fetch(url(servers, 'metrics', '/metrics'))).text();
    // Stamped at start-up (the sync loop's start), not by the pre-listing change.
    expect(metrics).toContain(`kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"} ${Date.UTC(2026, 0, 1) / 1000}\n`);
  });

  it('reports /healthz 503 once the Node is tainted for deletion by the cluster autoscaler', async () => {
    const { servers, settle, h } = await setup();
    h().onNode(null, node());
    h().onSynced('Service');
    h().onSynced('EndpointSlice');
    await settle(10);
    expect((await fetch(url(servers, 'healthz', '/healthz'))).status).toBe(200);
    h().onNode(node(), node({ spec: { taints: [{ key: 'ToBeDeletedByClusterAutoscaler', value: '1700000000', effect: 'NoSchedule' }] } }));
    const res = await fetch(url(servers, 'healthz', '/healthz'));
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ nodeEligible: false, healthy: true });
    expect((await fetch(url(servers, 'healthz', '/livez'))).status).toBe(200);
  });

  it('reports a health check port it cannot bind, and keeps serving everything else', async () => {
    const hcPort = await freePort();
    const blocker: Server = createServer();
    await new Promise<void>((r) => blocker.listen(hcPort, '127.0.0.1', r));
    cleanups.push(() => new Promise<void>((r) => blocker.close(() => r())));
    const { servers, settle, h, portErrors, log } = await setup();
    h().onService(null, lb(hcPort));
    h().onSynced('Service');
    h().onSynced('EndpointSlice');
    await settle(10);
    expect(portErrors.map((e) => [e.namespace, e.name, e.port, e.error.code])).toEqual([['shop', 'web', hcPort, 'KPROXY_ERR_HEALTHCHECK_PORT']]);
    expect(log.lines('error').some((l) => l.includes('service=shop/web'))).toBe(true);
    expect((await fetch(url(servers, 'healthz', '/healthz'))).status).toBe(200);
    expect(await (await fetch(url(servers, 'metrics', '/metrics'))).text()).toContain('kproxy_healthcheck_port_errors_total 1\n');
  });

  it('fails to start on a taken port with bindAddressHardFail, and retries without it', async () => {
    const port = await freePort();
    const blocker: Server = createServer();
    await new Promise<void>((r) => blocker.listen(port, '127.0.0.1', r));
    let blocked = true;
    cleanups.push(async () => {
      if (blocked) await new Promise<void>((r) => blocker.close(() => r()));
    });

    await expect(setup({ metricsBindAddress: `127.0.0.1:${port}`, bindAddressHardFail: true })).rejects.toBeInstanceOf(ListenFailedError);

    const { servers, clock, log } = await setup({ metricsBindAddress: `127.0.0.1:${port}` }, { retryMs: 5_000 });
    expect(servers.metricsAddress()).toBeNull();
    expect(servers.healthzAddress()).not.toBeNull();
    expect(log.lines('error').join('\n')).toMatch(/starting the metrics server on 127\.0\.0\.1:\d+ failed.*retrying/);
    await new Promise<void>((r) => blocker.close(() => r()));
    blocked = false;
    await clock.advanceAsync(5_000);
    for (let i = 0; i < 50 && !servers.metricsAddress(); i++) await new Promise((r) => setTimeout(r, 10));
    expect(servers.metricsAddress()?.port).toBe(port);
    expect((await fetch(`http://127.0.0.1:${port}/proxyMode`)).status).toBe(200);
  });

  /** dashboardOn serves GET /x on the dashboard's own listener, judged by checkBound. */
  const dashboardOn = (ownAddress: string, checkBound: (bound: readonly AddressInfo[]) => void): DashboardListener => ({
    ownAddress,
    tls: null,
    checkBound,
    plugins: [{ plugin: async (app: FastifyInstance) => void app.get('/x', async () => 'served') }],
  });

  it('judges the dashboard listener by the addresses it was bound to, so a host name counts for what it resolved to', async () => {
    const seen: AddressInfo[][] = [];
    const { servers } = await setup({}, { dashboard: dashboardOn('localhost:0', (bound) => void seen.push([...bound])) });
    const a = servers.dashboardAddress()!;
    // "localhost" is judged by the socket's address, never by its spelling.
    expect(seen).toEqual([[expect.objectContaining({ address: a.address, port: a.port })]]);
    expect(['127.0.0.1', '::1']).toContain(a.address);
    expect(await (await fetch(`http://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}/x`)).text()).toBe('served');
  });

  it('refuses to serve the dashboard where its check refuses the bound address: the start fails (hard fail or not) and nothing listens', async () => {
    const port = await freePort();
    const refusal = new Error('bound to a non-loopback address without auth');
    let bound: readonly AddressInfo[] = [];
    const judge = (b: readonly AddressInfo[]) => {
      bound = b;
      throw refusal;
    };
    await expect(setup({ bindAddressHardFail: false }, { dashboard: dashboardOn(`127.0.0.1:${port}`, judge) })).rejects.toBe(refusal);
    expect(bound).toEqual([expect.objectContaining({ address: '127.0.0.1', port })]);
    // Closed before it served: the port is free again.
    const probe: Server = createServer();
    await new Promise<void>((resolve, reject) => probe.once('error', reject).listen(port, '127.0.0.1', resolve));
    await new Promise<void>((r) => probe.close(() => r()));
  });

  it('turns a listener off with an empty bind address', async () => {
    const { servers } = await setup({ healthzBindAddress: '', metricsBindAddress: '' });
    expect(servers.healthzAddress()).toBeNull();
    expect(servers.metricsAddress()).toBeNull();
  });
});

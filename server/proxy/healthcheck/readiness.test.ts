import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../clock-fake.ts';
import { FakeNetInterfaces } from '../../kernel/netif-fake.ts';
import { MemoryLog } from '../../log.ts';
import { harness, testConfig } from '../iptables/testing.ts';
import { MetaProxier } from '../meta-proxier.ts';
import { createSyncObservers } from '../sync-observers.ts';
import { ep, makeService, makeSlice } from '../testing.ts';
import type { IPFamily } from '../../net/ip.ts';
import type { SourceStatus } from '../source.ts';
import { unknownNode, type NodeInfo } from '../node-info.ts';
import type { SyncRecord } from '../sync-loop.ts';
import { buildProxyHealthApp, type HealthProbe } from './proxy-health-server.ts';
import { ProxyHealth } from './proxy-health.ts';
import { PROBE_REASONS, ProxyReadiness } from './readiness.ts';

const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);
const known = (extra: Partial<NodeInfo> = {}): NodeInfo => ({ ...unknownNode('node-a'), known: true, ...extra });

function setup(kind: SourceStatus['kind'] = 'file', families: IPFamily[] = ['IPv4']) {
  const clock = new FakeClock(T0);
  let node = known();
  let source: SourceStatus = {
    kind,
    description: kind === 'file' ? 'file:/etc/kproxy/manifests' : 'https://10.0.0.1:6443',
    synced: false,
    waitingFor: '/etc/kproxy/manifests/a.yaml:3:7: invalid YAML: Flow map must end with a }',
    objects: 0,
    counters: {},
  };
  const health = new ProxyHealth({ clock, healthTimeoutMs: 60_000, node: () => node });
  const readiness = new ProxyReadiness({ health, families, source: () => source, node: () => node });
  const served: [HealthProbe, number][] = [];
  const app = buildProxyHealthApp({ health, readiness, onServed: (p, c) => served.push([p, c]) });
  const get = async (url: string) => {
    const res = await app.inject({ method: 'GET', url });
    return { code: res.statusCode, json: res.json() as Record<string, unknown> };
  };
  let seq = 0;
  const sync = (ok: boolean, family: IPFamily = 'IPv4') => {
    const rec = { seq: ++seq, family, ok, finishedAt: clock.now(), ...(ok ? {} : { error: { code: 'KPROXY_ERR_RESTORE_FAILED', message: 'iptables-restore failed: line 7' } }) } as SyncRecord;
    readiness.observe(rec);
    if (ok) health.updated(family);
  };
  return {
    clock,
    health,
    readiness,
    served,
    get,
    sync,
    setSource: (s: Partial<SourceStatus>) => (source = { ...source, ...s }),
    setNode: (n: NodeInfo) => (node = n),
  };
}

describe('/readyz: ready means "has synced"', () => {
  it('answers 503 with a fixed reason while the source has not synced (the file, line and error are for the log and the dashboard), while /healthz and /livez answer 200', async () => {
    const t = setup();
    const r = await t.get('/readyz');
    expect(r.code).toBe(503);
    expect(r.json).toMatchObject({ ready: false, healthy: true, nodeEligible: true, reason: 'nothing synced yet: the source has not listed everything (see the log)' });
    expect(JSON.stringify(r.json)).not.toMatch(/manifests|a\.yaml|YAML/);
    expect(t.readiness.readiness().reason).toBe('nothing synced yet, waiting for file:/etc/kproxy/manifests to sync: /etc/kproxy/manifests/a.yaml:3:7: invalid YAML: Flow map must end with a }');
    expect(r.json.firstSync).toBeUndefined();
    expect((await t.get('/healthz')).code).toBe(200);
    expect((await t.get('/livez')).code).toBe(200);
    expect(t.served).toEqual([
      ['readyz', 503],
      ['healthz', 200],
      ['livez', 200],
    ]);
  });

  it('stays 503 once the source synced until a sync succeeds, saying why', async () => {
    const t = setup();
    t.setSource({ synced: true, waitingFor: undefined });
    expect(t.readiness.readiness()).toEqual({ ready: false, reason: 'the first sync is running', probeReason: 'the first sync is running', firstSyncAt: null });
    t.sync(false);
    expect(t.readiness.readiness()).toMatchObject({
      reason: 'the first sync failed and is retried: iptables-restore failed: line 7 [KPROXY_ERR_RESTORE_FAILED]',
      probeReason: 'the first sync failed and is retried (see the log)',
    });
    expect(await t.get('/readyz')).toMatchObject({ code: 503, json: { reason: 'the first sync failed and is retried (see the log)' } });
    t.clock.advance(1500);
    t.sync(true);
    const r = await t.get('/readyz');
    expect(r.code).toBe(200);
    expect(r.json).toMatchObject({ ready: true, firstSync: '2026-01-01T12:00:01.5Z' });
    expect(r.json.reason).toBeUndefined();
  });

  it('then follows /healthz: 503 while a change waits too long or the Node is being deleted, 200 again after', async () => {
    const t = setup();
    t.setSource({ synced: true, waitingFor: undefined });
    t.sync(true);
    t.health.queuedUpdate('IPv4');
    t.clock.advance(60_000);
    expect(await t.get('/readyz')).toMatchObject({ code: 503, json: { reason: 'not healthy: a change has waited too long without a successful sync (see the log)' } });
    expect(t.readiness.readiness().reason).toBe('not healthy: a change has waited more than 60 s without a successful sync');
    expect((await t.get('/healthz')).code).toBe(503);
    t.sync(true);
    expect((await t.get('/readyz')).code).toBe(200);
    t.setNode(known({ deleting: true }));
    expect(await t.get('/readyz')).toMatchObject({ code: 503, json: { reason: 'the Node is being deleted or is tainted ToBeDeletedByClusterAutoscaler' } });
    expect(t.readiness.readiness().reason).toBe('Node node-a is being deleted or is tainted ToBeDeletedByClusterAutoscaler');
  });

  it("with the Kubernetes source, is 503 while this node's Node is not found (a node name that matches no Node)", async () => {
    const t = setup('kubernetes');
    t.setNode(unknownNode('node-a'));
    t.setSource({ synced: false, waitingFor: 'the first list of Node' });
    t.sync(true); // Services and EndpointSlices listed: kproxy syncs without waiting for its Node
    expect(t.readiness.readiness().reason).toBe('waiting for https://10.0.0.1:6443 to sync: the first list of Node');
    t.setSource({ synced: true, waitingFor: undefined });
    expect(t.readiness.readiness().reason).toBe("Node node-a not found in the cluster (check --hostname-override): which endpoints are local, and the node's addresses, are unknown");
    expect((await t.get('/readyz')).json.reason).toBe("this node's Node was not found in the cluster (check --hostname-override; see the log)");
    t.setNode(known());
    expect(t.readiness.readiness().ready).toBe(true);
  });

  it('with a manifest source, a missing Node is no reason (manifests may hold no Node at all)', () => {
    const t = setup('file');
    t.setNode(unknownNode('node-a'));
    t.setSource({ synced: true, waitingFor: undefined });
    t.sync(true);
    expect(t.readiness.readiness()).toMatchObject({ ready: true, reason: null });
  });

  it('on a dual-stack node, is 503 until both families have synced, naming the one still pending', async () => {
    const t = setup('file', ['IPv4', 'IPv6']);
    t.setSource({ synced: true, waitingFor: undefined });
    t.sync(true, 'IPv6');
    expect(t.readiness.readiness()).toEqual({ ready: false, reason: 'the first sync (IPv4) is running', probeReason: 'the first sync (IPv4) is running', firstSyncAt: null });
    t.sync(false, 'IPv4');
    expect(t.readiness.readiness().reason).toBe('the first sync (IPv4) failed and is retried: iptables-restore failed: line 7 [KPROXY_ERR_RESTORE_FAILED]');
    expect(await t.get('/readyz')).toMatchObject({ code: 503, json: { reason: 'the first sync (IPv4) failed and is retried (see the log)' } });
    t.clock.advance(2000);
    t.sync(true, 'IPv4');
    expect(await t.get('/readyz')).toMatchObject({ code: 200, json: { ready: true, firstSync: '2026-01-01T12:00:02Z' } });
  });
});

describe('/readyz after a failed first sync: what the unauthenticated health port gives away', () => {
  /** failedFirstSync runs the iptables proxier over a simulated kernel that refuses every restore, quoting the whole input back (as a refusal names rules). */
  async function failedFirstSync(services: number) {
    const log = new MemoryLog();
    const h = harness({ logger: log.logger });
    h.kernel.restoreHook = (input) => `line 7 failed: ${input}`;
    const proxy = new MetaProxier({ backends: [{ family: 'IPv4', backend: h.backend }], nodeName: 'node-a', clock: h.clock, logger: log.logger, minSyncPeriodMs: 1_000, syncPeriodMs: 30_000 });
    const source = {
      start: async () => {},
      stop: async () => {},
      status: (): SourceStatus => ({ kind: 'file', description: 'file:/etc/kproxy/manifests', synced: true, objects: 2 * services, counters: {} }),
    };
    const observers = createSyncObservers({
      daemon: { config: testConfig(), nodeName: 'node-a', logger: log.logger, clock: h.clock, proxy, source },
      netInterfaces: new FakeNetInterfaces(),
      processMetrics: false,
      collect: null,
    });
    for (const o of Object.values(observers.observers)) proxy.addObserver(o);
    proxy.start();
    for (let i = 0; i < services; i++) {
      proxy.onService(null, makeService('shop', `web-${i}`, { clusterIP: `10.96.${i >> 8}.${i & 255}`, ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }));
      proxy.onEndpointSlice(null, makeSlice('shop', `web-${i}`, `web-${i}-abc`, [ep(`10.244.${i >> 8}.${i & 255}`)], [{ name: 'http', port: 8080, protocol: 'TCP' }]));
    }
    proxy.onSynced('Service');
    proxy.onSynced('EndpointSlice');
    proxy.onSynced('Node');
    await h.clock.advanceAsync(10);
    await proxy.idle();
    const app = observers.healthzApp();
    const readyz = await app.inject({ method: 'GET', url: '/readyz' });
    await proxy.stop();
    await observers.close();
    return { readyz, log, readiness: observers.readiness };
  }

  it('says "the first sync failed" in fixed words: no Service name, no address, no rule text, the same short body at any size; the log and the readiness detail (the dashboard\'s) keep it all', async () => {
    const big = await failedFirstSync(200);
    expect(big.readyz.statusCode).toBe(503);
    expect(big.readyz.json()).toMatchObject({ ready: false, reason: PROBE_REASONS.firstSyncFailed });
    expect(big.readyz.body).not.toMatch(/shop|web-|10\.96\.|10\.244\.|KUBE-|DNAT|--comment|\*nat|line 7|KPROXY_ERR/);
    expect(big.readyz.body.length).toBeLessThan(400);
    const small = await failedFirstSync(1);
    // Whatever the refusal quoted, the body is the same but for its timestamps.
    const timeless = (body: string) => body.replace(/"\d{4}-[^"]*"/g, '"T"');
    expect(timeless(big.readyz.body)).toBe(timeless(small.readyz.body));

    // The detail is where an operator with access looks: the readiness reason the dashboard shows, and the log.
    const detail = big.readiness.readiness().reason!;
    expect(detail).toMatch(/^the first sync failed and is retried: restoring the filter and nat tables: iptables-restore failed: line 7 failed: \*filter/);
    expect(detail).toContain('shop/web-199:http');
    expect(detail.length).toBeGreaterThan(50_000);
    expect(big.log.lines('error').join('\n')).toMatch(/sync failed, the kernel keeps its previous rules.*shop\/web-0:http/s);
  });

  it("answers what fastify would answer with an error's text in fixed words: a path it cannot decode, a failing route", async () => {
    const clock = new FakeClock(T0);
    const failing = new ProxyHealth({ clock, healthTimeoutMs: 60_000, node: () => known() });
    failing.health = () => {
      throw new Error('reading 10.96.0.10 for shop/web failed');
    };
    const errors: unknown[] = [];
    const app = buildProxyHealthApp({ health: failing, onError: (err) => errors.push(err) });
    const bad = await app.inject({ method: 'GET', url: '/healthz%zz<script>' });
    expect([bad.statusCode, bad.body]).toEqual([400, '400 Bad Request\n']);
    const broken = await app.inject({ method: 'GET', url: '/healthz' });
    expect([broken.statusCode, broken.body]).toEqual([500, '500 Internal Server Error\n']);
    expect(errors.map((e) => (e as Error).message)).toEqual(['reading 10.96.0.10 for shop/web failed']);
  });
});

import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../clock-fake.ts';
import type { IPFamily } from '../../net/ip.ts';
import type { SourceStatus } from '../../sources/source.ts';
import { unknownNode, type NodeInfo } from '../node-info.ts';
import type { SyncRecord } from '../sync-loop.ts';
import { buildProxyHealthApp, type HealthProbe } from './proxy-health-server.ts';
import { ProxyHealth } from './proxy-health.ts';
import { ProxyReadiness } from './readiness.ts';

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
  it('answers 503 naming the file, line and error while the source has not synced, while /healthz and /livez answer 200', async () => {
    const t = setup();
    const r = await t.get('/readyz');
    expect(r.code).toBe(503);
    expect(r.json).toMatchObject({
      ready: false,
      healthy: true,
      nodeEligible: true,
      reason: 'nothing synced yet, waiting for file:/etc/kproxy/manifests to sync: /etc/kproxy/manifests/a.yaml:3:7: invalid YAML: Flow map must end with a }',
    });
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
    expect(t.readiness.readiness()).toEqual({ ready: false, reason: 'the first sync is running', firstSyncAt: null });
    t.sync(false);
    expect(t.readiness.readiness().reason).toBe('the first sync failed and is retried: iptables-restore failed: line 7 [KPROXY_ERR_RESTORE_FAILED]');
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
    expect(await t.get('/readyz')).toMatchObject({ code: 503, json: { reason: 'not healthy: a change has waited more than 60 s without a successful sync' } });
    expect((await t.get('/healthz')).code).toBe(503);
    t.sync(true);
    expect((await t.get('/readyz')).code).toBe(200);
    t.setNode(known({ deleting: true }));
    expect(await t.get('/readyz')).toMatchObject({ code: 503, json: { reason: 'Node node-a is being deleted or is tainted ToBeDeletedByClusterAutoscaler' } });
  });

  it("with the Kubernetes source, is 503 while this node's Node is not found (a node name that matches no Node)", async () => {
    const t = setup('kubernetes');
    t.setNode(unknownNode('node-a'));
    t.setSource({ synced: false, waitingFor: 'the first list of Node' });
    t.sync(true); // Services and EndpointSlices listed: kproxy syncs without waiting for its Node
    expect(t.readiness.readiness().reason).toBe('waiting for https://10.0.0.1:6443 to sync: the first list of Node');
    t.setSource({ synced: true, waitingFor: undefined });
    expect(t.readiness.readiness().reason).toBe("Node node-a not found in the cluster (check --hostname-override): which endpoints are local, and the node's addresses, are unknown");
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
    expect(t.readiness.readiness()).toEqual({ ready: false, reason: 'the first sync (IPv4) is running', firstSyncAt: null });
    t.sync(false, 'IPv4');
    expect(t.readiness.readiness().reason).toBe('the first sync (IPv4) failed and is retried: iptables-restore failed: line 7 [KPROXY_ERR_RESTORE_FAILED]');
    expect((await t.get('/readyz')).code).toBe(503);
    t.clock.advance(2000);
    t.sync(true, 'IPv4');
    expect(await t.get('/readyz')).toMatchObject({ code: 200, json: { ready: true, firstSync: '2026-01-01T12:00:02Z' } });
  });
});

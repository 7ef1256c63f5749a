import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../../clock-fake.ts';
import { unknownNode, type NodeInfo } from '../node-info.ts';
import { buildProxyHealthApp, type HealthProbe } from './proxy-health-server.ts';
import { goTimeJSON, ProxyHealth } from './proxy-health.ts';

const SYNC_PERIOD = 30_000;
const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);

function knownNode(extra: Partial<NodeInfo> = {}): NodeInfo {
  return { ...unknownNode('node-a'), known: true, ...extra };
}

function setup(node: NodeInfo = knownNode()) {
  const clock = new FakeClock(T0);
  let current = node;
  const health = new ProxyHealth({ clock, healthTimeoutMs: 2 * SYNC_PERIOD, node: () => current });
  const served: [HealthProbe, number][] = [];
  const app = buildProxyHealthApp({ health, onServed: (p, c) => served.push([p, c]) });
  const get = async (url: string) => {
    const res = await app.inject({ method: 'GET', url });
    return { code: res.statusCode, headers: res.headers, body: res.body, json: res.json() as Record<string, unknown> };
  };
  return { clock, health, app, served, get, setNode: (n: NodeInfo) => (current = n) };
}

describe('goTimeJSON', () => {
  it('renders times like Go encoding/json, trimming trailing fraction zeros', () => {
    expect(goTimeJSON(Date.UTC(2026, 0, 1, 12, 0, 0))).toBe('2026-01-01T12:00:00Z');
    expect(goTimeJSON(Date.UTC(2026, 0, 1, 12, 0, 0, 120))).toBe('2026-01-01T12:00:00.12Z');
    expect(goTimeJSON(Date.UTC(2026, 0, 1, 12, 0, 0, 7))).toBe('2026-01-01T12:00:00.007Z');
    expect(goTimeJSON(null)).toBe('0001-01-01T00:00:00Z');
  });
});

describe('ProxyHealth state machine', () => {
  it('is healthy while starting up, before the sync loop has reported anything', async () => {
    const { get } = setup();
    const res = await get('/healthz');
    expect(res.code).toBe(200);
    // Go omits an empty status map; lastUpdated is "now" while healthy.
    expect(res.body).toBe('{"lastUpdated":"2026-01-01T12:00:00Z","currentTime":"2026-01-01T12:00:00Z","nodeEligible":true,"healthy":true}');
  });

  it('is healthy after the sync loop started and nothing is queued, however long it stays idle', async () => {
    const { clock, health, get } = setup();
    health.updated('IPv4');
    clock.advance(10 * SYNC_PERIOD);
    const res = await get('/healthz');
    expect(res.code).toBe(200);
    expect(res.json).toEqual({
      lastUpdated: '2026-01-01T12:05:00Z',
      currentTime: '2026-01-01T12:05:00Z',
      nodeEligible: true,
      healthy: true,
      status: { IPv4: { lastUpdated: '2026-01-01T12:00:00Z', healthy: true } },
    });
  });

  it('turns 503 once a queued update has waited 2 x syncPeriod without a successful sync', async () => {
    const { clock, health, get } = setup();
    health.updated('IPv4');
    clock.advance(1_000);
    health.queuedUpdate('IPv4');
    clock.advance(2 * SYNC_PERIOD - 1);
    expect((await get('/healthz')).code).toBe(200);
    expect((await get('/livez')).code).toBe(200);
    clock.advance(1);
    const healthz = await get('/healthz');
    expect(healthz.code).toBe(503);
    // While unhealthy, lastUpdated is the last successful sync, not now.
    expect(healthz.body).toBe(
      '{"lastUpdated":"2026-01-01T12:00:00Z","currentTime":"2026-01-01T12:01:01Z","nodeEligible":true,"healthy":false,' + '"status":{"IPv4":{"lastUpdated":"2026-01-01T12:00:00Z","healthy":false}}}',
    );
    const livez = await get('/livez');
    expect(livez.code).toBe(503);
    expect(livez.json).not.toHaveProperty('nodeEligible');
  });

  it('measures from the oldest pending update: later queued updates do not restart the clock', async () => {
    const { clock, health, get } = setup();
    health.updated('IPv4');
    health.queuedUpdate('IPv4');
    clock.advance(SYNC_PERIOD);
    health.queuedUpdate('IPv4');
    clock.advance(SYNC_PERIOD);
    expect((await get('/livez')).code).toBe(503);
  });

  it('recovers with the next successful sync', async () => {
    const { clock, health, get } = setup();
    health.updated('IPv4');
    health.queuedUpdate('IPv4');
    clock.advance(3 * SYNC_PERIOD);
    expect((await get('/healthz')).code).toBe(503);
    health.updated('IPv4');
    const res = await get('/healthz');
    expect(res.code).toBe(200);
    expect(res.json.status).toEqual({ IPv4: { lastUpdated: '2026-01-01T12:01:30Z', healthy: true } });
  });

  it('reports /healthz 503 but /livez 200 while the Node is being deleted', async () => {
    const { health, get } = setup(knownNode({ deleting: true }));
    health.updated('IPv4');
    const healthz = await get('/healthz');
    expect(healthz.code).toBe(503);
    expect(healthz.json).toMatchObject({ nodeEligible: false, healthy: true });
    // Not healthy overall, so lastUpdated is the last sync rather than now (equal here).
    expect(healthz.json.lastUpdated).toBe('2026-01-01T12:00:00Z');
    expect((await get('/livez')).code).toBe(200);
  });

  it('reports /healthz 503 while the Node carries ToBeDeletedByClusterAutoscaler, and 200 once the taint is gone', async () => {
    const { health, get, setNode } = setup(knownNode({ toBeDeleted: true }));
    health.updated('IPv4');
    expect((await get('/healthz')).code).toBe(503);
    expect((await get('/livez')).code).toBe(200);
    setNode(knownNode());
    expect((await get('/healthz')).code).toBe(200);
  });

  it('treats a Node that was seen and then vanished as deleted, but a never-seen Node as eligible', async () => {
    const { health, get, setNode } = setup(unknownNode('node-a'));
    health.updated('IPv4');
    expect((await get('/healthz')).json.nodeEligible).toBe(true);
    setNode(knownNode());
    expect((await get('/healthz')).code).toBe(200);
    setNode(unknownNode('node-a'));
    expect((await get('/healthz')).code).toBe(503);
  });

  it('sends kube-proxy headers and counts every answer by probe and code', async () => {
    const { clock, health, get, served } = setup();
    health.updated('IPv4');
    const ok = await get('/healthz');
    expect(ok.headers['content-type']).toBe('application/json');
    expect(ok.headers['x-content-type-options']).toBe('nosniff');
    await get('/livez');
    health.queuedUpdate('IPv4');
    clock.advance(2 * SYNC_PERIOD);
    await get('/healthz');
    expect(served).toEqual([
      ['healthz', 200],
      ['livez', 200],
      ['healthz', 503],
    ]);
  });

  it('answers other paths with Go ServeMux 404 text', async () => {
    const { app } = setup();
    const res = await app.inject({ method: 'GET', url: '/metrics' });
    expect(res.statusCode).toBe(404);
    expect(res.body).toBe('404 page not found\n');
  });
});

describe('proxy health listener over real HTTP', () => {
  let close: (() => Promise<void>) | null = null;
  afterEach(async () => {
    await close?.();
    close = null;
  });

  it('answers curl-style GET and HEAD on an ephemeral 127.0.0.1 port', async () => {
    const { app, health, clock } = setup();
    health.updated('IPv4');
    await app.listen({ host: '127.0.0.1', port: 0 });
    close = () => app.close();
    const { port } = app.server.address() as AddressInfo;
    const res = await fetch(`http://127.0.0.1:${port}/healthz`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(await res.json()).toMatchObject({ healthy: true, nodeEligible: true });
    health.queuedUpdate('IPv4');
    clock.advance(2 * SYNC_PERIOD);
    const head = await fetch(`http://127.0.0.1:${port}/livez`, { method: 'HEAD' });
    expect(head.status).toBe(503);
  });
});

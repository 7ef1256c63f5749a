import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { waitFor } from '../../../test/wait.ts';
import { ep, makeService, makeSlice } from '../../proxy/testing.ts';
import { WS_SUBPROTOCOL, WS_TOKEN_PREFIX, type ServerMessage } from '../protocol.ts';
import { MAX_DROPPED_MESSAGES, SNAPSHOT_INTERVAL_MS } from '../live-stream.ts';
import { FakeAccessReviewer } from '../auth/access-review-fake.ts';
import { CLOSE_POLICY, CLOSE_SLOW_CLIENT, CLOSE_UNAUTHORIZED } from '../stream-hub.ts';
import { exampleObjects, testDashboard, type TestDashboard } from '../testing.ts';

const HOST = { host: 'localhost:10249' };

interface Client {
  ws: WebSocket;
  messages: ServerMessage[];
  next(type: ServerMessage['type'], after?: number): Promise<ServerMessage>;
}

async function connect(t: TestDashboard, headers: Record<string, string> = HOST): Promise<Client> {
  const messages: ServerMessage[] = [];
  const ws = await t.app.injectWS('/ws', { headers }, { onInit: (w: WebSocket) => w.on('message', (d) => messages.push(JSON.parse(d.toString()))) });
  return {
    ws,
    messages,
    next: (type, after = 0) => waitFor(() => messages.find((m) => m.type === type && m.seq > after), { what: `a ${type} message after seq ${after}` }),
  };
}

function tokenProtocols(token: string): string {
  return `${WS_SUBPROTOCOL}, ${WS_TOKEN_PREFIX}${Buffer.from(token).toString('base64url')}`;
}

/** frontendWithOneMoreEndpoint changes one endpoint of shop/frontend (a one-endpoint change). */
function frontendWithOneMoreEndpoint() {
  return makeSlice('shop', 'frontend', 'frontend-abc12', [ep('10.244.0.11', { nodeName: 'node-a' }), ep('10.244.1.99', { nodeName: 'node-b' })], [{ name: 'http', port: 8080, protocol: 'TCP' }]);
}

describe('dashboard live stream (/ws)', () => {
  let t: TestDashboard;
  afterEach(async () => t?.close());

  it('sends a full snapshot on connect, then per sync a delta with only the services that changed', async () => {
    t = await testDashboard();
    const c = await connect(t);
    const snap = await c.next('snapshot');
    expect(snap.seq).toBe(1);
    if (snap.type !== 'snapshot') throw new Error('unreachable');
    expect(snap.overview.node).toBe('node-a');
    expect(snap.services.map((s) => s.key)).toContain('shop/frontend');
    expect(snap.services).toHaveLength(10);
    expect(snap.syncs.at(-1)).toMatchObject({ seq: 1, trigger: 'startup', full: true, ok: true });

    t.source.handlers!.onEndpointSlice(null, frontendWithOneMoreEndpoint());
    await t.settle(1000);
    const delta = await c.next('sync');
    if (delta.type !== 'sync') throw new Error('unreachable');
    const seqs = c.messages.map((m) => m.seq);
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
    expect(delta.sync).toMatchObject({ seq: 2, trigger: 'change', full: false, servicesChanged: 1 });
    expect(delta.services.map((s) => s.key)).toEqual(['shop/frontend']);
    expect(delta.services[0].endpoints.total).toBe(2);
    expect(delta.removed).toEqual([]);
  });

  it('sends a one-endpoint delta of the same size whether the cluster has 10 or 500 services', async () => {
    const sizes: number[] = [];
    for (const extra of [0, 490]) {
      const objects = [...exampleObjects()];
      for (let i = 0; i < extra; i++) {
        objects.push(makeService('bulk', `svc-${i}`, { clusterIP: `10.97.${i >> 8}.${i & 255}`, ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }));
        objects.push(makeSlice('bulk', `svc-${i}`, `svc-${i}-1`, [ep(`10.245.${i >> 8}.${i & 255}`, { nodeName: 'node-b' })], [{ name: 'http', port: 8080, protocol: 'TCP' }]));
      }
      t = await testDashboard({ objects });
      const c = await connect(t);
      const snap = await c.next('snapshot');
      if (snap.type !== 'snapshot') throw new Error('unreachable');
      expect(snap.services).toHaveLength(10 + extra);
      t.source.handlers!.onEndpointSlice(null, frontendWithOneMoreEndpoint());
      await t.settle(1000);
      const delta = await c.next('sync');
      if (delta.type !== 'sync') throw new Error('unreachable');
      expect(delta.services.map((s) => s.key)).toEqual(['shop/frontend']);
      sizes.push(JSON.stringify(delta).length);
      await t.close();
    }
    // Only counters in the overview grow (a digit or two), never a per-service list.
    expect(Math.abs(sizes[1] - sizes[0])).toBeLessThan(40);
  });

  it('answers a snapshot request (what a client sends when it sees a gap in seq) with the next seq', async () => {
    t = await testDashboard();
    const c = await connect(t);
    await c.next('snapshot');
    await t.settle(SNAPSHOT_INTERVAL_MS);
    c.ws.send(JSON.stringify({ type: 'snapshot' }));
    const again = await c.next('snapshot', 1);
    expect(again.seq).toBe(c.messages.length);
    const seqs = c.messages.map((m) => m.seq);
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
  });

  it('keeps one snapshot in flight per client: requests within the interval become one, sent when it is due', async () => {
    t = await testDashboard();
    const c = await connect(t);
    await c.next('snapshot');
    for (let i = 0; i < 10; i++) c.ws.send(JSON.stringify({ type: 'snapshot' }));
    // Let the ten requests arrive: none is answered yet (the connect's snapshot was just sent).
    await new Promise((r) => setTimeout(r, 100));
    expect(c.messages.filter((m) => m.type === 'snapshot')).toHaveLength(1);
    await t.settle(SNAPSHOT_INTERVAL_MS);
    await c.next('snapshot', 1);
    await t.settle(5 * SNAPSHOT_INTERVAL_MS);
    await new Promise((r) => setTimeout(r, 100));
    expect(c.messages.filter((m) => m.type === 'snapshot')).toHaveLength(2);
  });

  it("drops messages past a client's budget, and disconnects a client that keeps sending them", async () => {
    t = await testDashboard();
    const c = await connect(t);
    await c.next('snapshot');
    const closed = new Promise<number>((resolve) => c.ws.on('close', (code) => resolve(code)));
    for (let i = 0; i < 20 + MAX_DROPPED_MESSAGES; i++) c.ws.send(JSON.stringify({ type: 'watch', service: null }));
    expect(await closed).toBe(CLOSE_POLICY);
    expect(t.dashboard.stream.hub.size).toBe(0);
    expect(t.log.lines('warn').join('\n')).toMatch(/dashboard client sends messages faster than its budget; dropping them client=/);
  });

  it('once it disconnected a client for its messages, ignores what that client had still sent (one warning, not one per message)', async () => {
    t = await testDashboard();
    const c = await connect(t);
    await c.next('snapshot');
    const closed = new Promise<number>((resolve) => c.ws.on('close', (code) => resolve(code)));
    // 300 messages past the point of disconnection arrive before the close handshake ends.
    for (let i = 0; i < 20 + MAX_DROPPED_MESSAGES + 300; i++) c.ws.send(JSON.stringify({ type: 'snapshot' }));
    expect(await closed).toBe(CLOSE_POLICY);
    await new Promise((r) => setTimeout(r, 50));
    expect(t.log.lines('warn').filter((l) => l.includes('dashboard client disconnected: too many messages'))).toHaveLength(1);
    expect(t.dashboard.stream.messagesDropped).toBe(MAX_DROPPED_MESSAGES);
  });

  it('removes a deleted service in the delta', async () => {
    t = await testDashboard();
    const c = await connect(t);
    await c.next('snapshot');
    const h = t.source.handlers!;
    const svc = t.daemon.state.services.get('shop/cache:memcache/TCP');
    expect(svc).toBeDefined();
    h.onService({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'cache', namespace: 'shop' } }, null);
    await t.settle(1000);
    const delta = await c.next('sync');
    if (delta.type !== 'sync') throw new Error('unreachable');
    expect(delta.removed).toEqual(['shop/cache']);
    expect(delta.services).toEqual([]);
  });

  it('sends a watched service its page, and live counters after kernel reads', async () => {
    t = await testDashboard();
    const c = await connect(t);
    await c.next('snapshot');
    c.ws.send(JSON.stringify({ type: 'watch', service: 'shop/frontend' }));
    const page = await c.next('service');
    if (page.type !== 'service' || !page.detail) throw new Error('no detail');
    const svc = page.detail.ports[0].chains.find((ch) => ch.role === 'service')!;
    expect(svc.name).toMatch(/^KUBE-SVC-/);
    t.kernel.addCounters('nat', svc.name, 0, 7, 420);
    await t.settle(5000);
    await t.settle(0);
    const counters = await waitFor(() => c.messages.find((m) => m.type === 'counters' && m.watched?.chains.some((x) => x.name === svc.name && x.rules[0][0] === 7)));
    expect(counters.type).toBe('counters');
  });

  it('disconnects a client that stops reading once its backlog passes the hard limit', async () => {
    t = await testDashboard({ hub: { softLimitBytes: 1024, hardLimitBytes: 48 * 1024 } });
    const c = await connect(t);
    await c.next('snapshot');
    const closed = new Promise<number>((resolve) => c.ws.on('close', (code) => resolve(code)));
    (c.ws as unknown as { _socket: { pause(): void; resume(): void } })._socket.pause();
    // Essential messages (an action's result goes to everyone) queue past the soft limit, until the hard one.
    const message = 'x'.repeat(8 * 1024);
    for (let i = 0; i < 2000 && t.dashboard.stream.hub.size > 0; i++) {
      t.dashboard.noteAction({ action: 'resync', ok: true, at: 0, user: 'token', message, paused: false });
      await new Promise((r) => setImmediate(r));
    }
    expect(t.dashboard.stream.hub.size).toBe(0);
    expect(t.dashboard.stream.hub.slowDropped).toBe(1);
    expect(t.log.lines('warn').join('\n')).toMatch(/KPROXY_ERR_SLOW_CLIENT/);
    (c.ws as unknown as { _socket: { resume(): void } })._socket.resume();
    expect(await closed).toBe(CLOSE_SLOW_CLIENT);
  });
});

describe('dashboard live stream auth and origin', () => {
  let t: TestDashboard;
  afterEach(async () => t?.close());

  it('refuses an upgrade without the token and accepts the token as a WebSocket subprotocol', async () => {
    t = await testDashboard({ token: 's3cret-token' });
    await expect(t.app.injectWS('/ws', { headers: HOST })).rejects.toThrow(/401/);
    await expect(t.app.injectWS('/ws', { headers: { ...HOST, 'sec-websocket-protocol': tokenProtocols('wrong') } })).rejects.toThrow(/401/);
    const c = await connect(t, { ...HOST, 'sec-websocket-protocol': tokenProtocols('s3cret-token') });
    const snap = await c.next('snapshot');
    if (snap.type !== 'snapshot') throw new Error('unreachable');
    expect(snap.viewer).toEqual({ authMode: 'token', user: 'token', canAct: true });
  });

  it('over a real socket, selects the dashboard subprotocol and never echoes the token-carrying one', async () => {
    t = await testDashboard({ token: 's3cret-token' });
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    const { port } = t.app.server.address() as { port: number };
    const ws = new WebSocket(`ws://127.0.0.1:${port}/ws`, [WS_SUBPROTOCOL, `${WS_TOKEN_PREFIX}${Buffer.from('s3cret-token').toString('base64url')}`]);
    const first = await new Promise<ServerMessage>((resolve, reject) => {
      ws.once('message', (d) => resolve(JSON.parse(d.toString())));
      ws.once('error', reject);
    });
    expect(ws.protocol).toBe(WS_SUBPROTOCOL);
    expect(first).toMatchObject({ type: 'snapshot', seq: 1 });
    ws.close();
  });

  it('accepts a bearer Authorization header on the upgrade (non-browser clients)', async () => {
    t = await testDashboard({ token: 's3cret-token' });
    const c = await connect(t, { ...HOST, authorization: 'Bearer s3cret-token' });
    expect((await c.next('snapshot')).seq).toBe(1);
  });

  it('refuses an upgrade from another origin, and accepts the same origin', async () => {
    t = await testDashboard({ token: 's3cret-token' });
    const auth = { authorization: 'Bearer s3cret-token' };
    await expect(t.app.injectWS('/ws', { headers: { ...HOST, ...auth, origin: 'http://evil.example' } })).rejects.toThrow(/403/);
    await expect(t.app.injectWS('/ws', { headers: { ...HOST, ...auth, origin: 'http://localhost:10249.evil.example' } })).rejects.toThrow(/403/);
    const c = await connect(t, { ...HOST, ...auth, origin: 'http://localhost:10249' });
    expect((await c.next('snapshot')).type).toBe('snapshot');
  });

  it('caps the connections of one user, so one viewer cannot take them all', async () => {
    const reviewer = new FakeAccessReviewer();
    reviewer.users.set('alice-token', { username: 'alice', groups: [] });
    reviewer.users.set('bob-token', { username: 'bob', groups: [] });
    reviewer.allow('alice', 'get').allow('bob', 'get');
    t = await testDashboard({ reviewer, hub: { maxClients: 16, maxPerUser: 2 } });
    const as = (token: string) => ({ ...HOST, authorization: `Bearer ${token}` });
    await (await connect(t, as('alice-token'))).next('snapshot');
    await (await connect(t, as('alice-token'))).next('snapshot');
    await expect(t.app.injectWS('/ws', { headers: as('alice-token') })).rejects.toThrow(/503/);
    await (await connect(t, as('bob-token'))).next('snapshot');
    expect(t.dashboard.stream.hub.size).toBe(3);
  });

  it('closes a stream whose credential no longer grants viewing once the review answer it was opened with expires', async () => {
    const reviewer = new FakeAccessReviewer();
    reviewer.users.set('alice-token', { username: 'alice', groups: [] });
    reviewer.allow('alice', 'get');
    // Keep-alive pings are another test's subject: far apart here, so the fake clock's big steps cannot outrun their pongs.
    t = await testDashboard({ reviewer, pingIntervalMs: 3_600_000 });
    const c = await connect(t, { ...HOST, authorization: 'Bearer alice-token' });
    await c.next('snapshot');
    const closed = new Promise<number>((resolve) => c.ws.on('close', (code) => resolve(code)));
    // Still allowed at the first re-check: the stream stays.
    await t.settle(t.auth.cacheTtlMs);
    expect(t.dashboard.stream.hub.size).toBe(1);
    // The RoleBinding goes: the next re-check closes the stream.
    reviewer.allowed.delete('alice get');
    await t.settle(t.auth.cacheTtlMs);
    expect(await closed).toBe(CLOSE_UNAUTHORIZED);
    expect(t.dashboard.stream.hub.size).toBe(0);
    expect(t.log.lines('info').join('\n')).toMatch(/closing a dashboard stream: its credential no longer grants viewing user=alice .*code=KPROXY_ERR_FORBIDDEN/);
  });

  it('with auth off, refuses Host names that are not loopback (DNS rebinding)', async () => {
    t = await testDashboard();
    await expect(t.app.injectWS('/ws', { headers: { host: 'rebind.example:10249', origin: 'http://rebind.example:10249' } })).rejects.toThrow(/403/);
    const c = await connect(t, { host: '127.0.0.1:10249', origin: 'http://127.0.0.1:10249' });
    const snap = await c.next('snapshot');
    if (snap.type !== 'snapshot') throw new Error('unreachable');
    expect(snap.viewer).toEqual({ authMode: 'off', user: 'anonymous', canAct: true });
  });
});

import { connect, type Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import { ProxyHealth } from '../proxy/healthcheck/proxy-health.ts';
import { unknownNode } from '../proxy/node-info.ts';
import { buildProxyHealthApp } from '../proxy/healthcheck/proxy-health-server.ts';
import { buildMetricsApp } from './app.ts';
import type { ServerResponse } from 'node:http';
import fastifyWebsocket from '@fastify/websocket';
import Fastify from 'fastify';
import { WebSocket } from 'ws';
import { createLimitedServer, HEALTH_LIMITS, limitedServerFactory, METRICS_LIMITS, type LimitedServer, type ListenerLimits } from './limits.ts';
import { testProxyConfig } from './testing.ts';

/**
 * Behaviour of the listeners under hostile clients, over real sockets on
 * loopback: what a client may cost them is bounded by ListenerLimits.
 * Limits are shrunk so a test takes a second, never asserted as durations.
 */

const SMALL: ListenerLimits = {
  ...HEALTH_LIMITS,
  headersTimeoutMs: 300,
  requestTimeoutMs: 600,
  checkIntervalMs: 50,
  maxConnections: 6,
  maxConnectionsPerClient: 4,
};

interface Conn {
  socket: Socket;
  /** data: everything the server sent so far. */
  data(): string;
  /** closed resolves when the server (or the network) ended the connection. */
  closed: Promise<void>;
}

function open(port: number, localAddress = '127.0.0.1'): Promise<Conn> {
  return new Promise((resolve, reject) => {
    let text = '';
    const socket = connect({ host: '127.0.0.1', port, localAddress }, () => resolve({ socket, data: () => text, closed }));
    const closed = new Promise<void>((r) => socket.once('close', () => r()));
    socket.on('data', (d) => (text += d.toString('latin1')));
    socket.on('error', (err) => {
      // A connection the server refused after accepting it ends in a reset: that is a close too.
      if (!socket.connecting) return;
      reject(err);
    });
  });
}

/** stillOpen: the connection survives a few event loop turns of server work (a refused one closes at once). */
async function stillOpen(c: Conn): Promise<boolean> {
  const state = await Promise.race([c.closed.then(() => 'closed'), new Promise((r) => setTimeout(() => r('open'), 200))]);
  return state === 'open';
}

async function get(port: number, path: string, localAddress?: string): Promise<string> {
  const c = await open(port, localAddress);
  c.socket.end(`GET ${path} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n`);
  await c.closed;
  return c.data();
}

describe('the :10256 health listener under hostile clients', () => {
  let app: FastifyInstance;
  const conns: Conn[] = [];
  afterEach(async () => {
    for (const c of conns.splice(0)) c.socket.destroy();
    await app?.close();
  });

  async function start(limits: ListenerLimits = SMALL): Promise<number> {
    const clock = new FakeClock();
    const health = new ProxyHealth({ clock, healthTimeoutMs: 60_000, node: () => unknownNode('node-a') });
    health.updated('IPv4');
    app = buildProxyHealthApp({ health, limits });
    await app.listen({ host: '127.0.0.1', port: 0 });
    return (app.server.address() as { port: number }).port;
  }

  it('answers GET and HEAD', async () => {
    const port = await start();
    expect(await get(port, '/livez')).toMatch(/^HTTP\/1\.1 200 OK\r\n[\s\S]*\r\n\r\n\{"lastUpdated"/);
    const c = await open(port);
    c.socket.end('HEAD /healthz HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n');
    await c.closed;
    expect(c.data()).toMatch(/^HTTP\/1\.1 200 OK\r\n[\s\S]*\r\n\r\n$/);
  });

  it('refuses a POST with a body before reading it (405), and closes the connection while the client is still sending', async () => {
    const port = await start(HEALTH_LIMITS);
    const c = await open(port);
    conns.push(c);
    // A 1 MiB body is announced; only the first 64 KiB are ever sent.
    c.socket.write('POST /livez HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n');
    c.socket.write('{"a":"' + 'x'.repeat(64 * 1024));
    await c.closed;
    expect(c.data()).toMatch(/^HTTP\/1\.1 405 Method Not Allowed\r\n/);
    expect(c.data()).toMatch(/\r\nallow: GET, HEAD\r\n/i);
    expect(c.data()).toMatch(/\r\nconnection: close\r\n/i);
  });

  it('refuses a GET that carries a body (413) and every other method on every path (405)', async () => {
    const port = await start();
    const c = await open(port);
    c.socket.end('GET /healthz HTTP/1.1\r\nHost: node\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello');
    await c.closed;
    expect(c.data()).toMatch(/^HTTP\/1\.1 413 /);
    for (const method of ['PUT', 'DELETE', 'PATCH', 'OPTIONS']) {
      const m = await open(port);
      m.socket.end(`${method} /nope HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n`);
      await m.closed;
      expect(m.data(), method).toMatch(/^HTTP\/1\.1 405 /);
    }
  });

  it('closes a request whose headers trickle in slower than the headers timeout', async () => {
    const port = await start();
    const c = await open(port);
    conns.push(c);
    c.socket.write('GET /livez HTTP/1.1\r\nHost: node\r\n');
    // One header byte every 50 ms, for up to 30 s: the server must give up long before.
    let sent = 0;
    const timer = setInterval(() => {
      if (!c.socket.destroyed && sent++ < 600) c.socket.write('X');
    }, 50);
    try {
      await c.closed;
    } finally {
      clearInterval(timer);
    }
    expect(sent).toBeLessThan(600);
    expect(c.data()).not.toMatch(/200 OK/);
  });

  it("answers a probe while other clients hold every connection the caps allow: the busiest address's oldest idle connection makes room", async () => {
    // The caps of SMALL, with the default timeouts: these idle connections must outlive the test's checks.
    const port = await start({ ...HEALTH_LIMITS, maxConnections: SMALL.maxConnections, maxConnectionsPerClient: SMALL.maxConnectionsPerClient });
    // Two clients fill the listener with idle connections: four from 127.0.0.1 (its cap), two from 127.0.0.2.
    const one: Conn[] = [];
    for (let i = 0; i < 4; i++) one.push(await open(port, '127.0.0.1'));
    const two = [await open(port, '127.0.0.2'), await open(port, '127.0.0.2')];
    conns.push(...one, ...two);
    for (const c of conns) expect(await stillOpen(c)).toBe(true);
    // The kubelet's probe from a third address is answered...
    expect(await get(port, '/livez', '127.0.0.3')).toMatch(/^HTTP\/1\.1 200 /);
    // ...in the room 127.0.0.1's oldest idle connection left; nobody else's was closed.
    expect(await stillOpen(one[0])).toBe(false);
    for (const c of [...one.slice(1), ...two]) expect(await stillOpen(c)).toBe(true);
  });

  it("keeps an address within its own cap by closing that address's oldest idle connection, never another's", async () => {
    const port = await start({ ...HEALTH_LIMITS, maxConnections: SMALL.maxConnections, maxConnectionsPerClient: SMALL.maxConnectionsPerClient });
    const other = await open(port, '127.0.0.2');
    const one: Conn[] = [];
    for (let i = 0; i < 4; i++) one.push(await open(port, '127.0.0.1'));
    conns.push(other, ...one);
    const fifth = await open(port, '127.0.0.1');
    conns.push(fifth);
    expect(await stillOpen(fifth)).toBe(true);
    expect(await stillOpen(one[0])).toBe(false);
    for (const c of [other, ...one.slice(1)]) expect(await stillOpen(c)).toBe(true);
    fifth.socket.write('GET /livez HTTP/1.1\r\nHost: node\r\n\r\n');
    await waitUntil(() => fifth.data().includes('200 OK'));
  });
});

/** waitUntil polls a condition every 10 ms for up to 5 s (a real socket's answer, not a duration under test). */
async function waitUntil(ok: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !ok(); i++) await new Promise((r) => setTimeout(r, 10));
  expect(ok()).toBe(true);
}

describe('a listener whose every connection is busy', () => {
  const servers: LimitedServer[] = [];
  const conns: Conn[] = [];
  afterEach(async () => {
    for (const c of conns.splice(0)) c.socket.destroy();
    for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
  });

  it('never cuts a request being answered: the newcomer is refused until one is answered', async () => {
    const held: ServerResponse[] = [];
    const server = createLimitedServer({ ...HEALTH_LIMITS, maxConnections: 3, maxConnectionsPerClient: 3 }, (_req, res) => void held.push(res));
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    const busy: Conn[] = [];
    for (const from of ['127.0.0.1', '127.0.0.2', '127.0.0.3']) {
      const c = await open(port, from);
      c.socket.write('GET /slow HTTP/1.1\r\nHost: node\r\n\r\n');
      busy.push(c);
    }
    conns.push(...busy);
    await waitUntil(() => held.length === 3);
    const refused = await open(port, '127.0.0.4');
    expect(await stillOpen(refused)).toBe(false);
    for (const c of busy) expect(await stillOpen(c)).toBe(true);
    // One answer later its connection is idle (kept alive): the next newcomer closes it instead.
    held[0].end('done');
    await waitUntil(() => busy[0].data().includes('done'));
    const next = await open(port, '127.0.0.4');
    conns.push(next);
    expect(await stillOpen(next)).toBe(true);
    expect(await stillOpen(busy[0])).toBe(false);
    for (const c of busy.slice(1)) expect(await stillOpen(c)).toBe(true);
  });

  it("never closes an open WebSocket to make room (the dashboard's stream)", async () => {
    const app = Fastify({ serverFactory: limitedServerFactory({ ...METRICS_LIMITS, maxConnections: 2, maxConnectionsPerClient: 2 }) });
    await app.register(fastifyWebsocket);
    app.get('/ws', { websocket: true }, () => {});
    app.get('/plain', async () => 'plain');
    await app.listen({ host: '127.0.0.1', port: 0 });
    servers.push(app.server as LimitedServer);
    const port = (app.server.address() as { port: number }).port;
    const sockets = [new WebSocket(`ws://127.0.0.1:${port}/ws`), new WebSocket(`ws://127.0.0.1:${port}/ws`)];
    try {
      await Promise.all(sockets.map((ws) => new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject))));
      const refused = await open(port, '127.0.0.2');
      expect(await stillOpen(refused)).toBe(false);
      for (const ws of sockets) expect(ws.readyState).toBe(WebSocket.OPEN);
      // Plain requests still come in once a stream ends.
      sockets[0].close();
      await waitUntil(() => sockets[0].readyState === WebSocket.CLOSED);
      await new Promise((r) => setTimeout(r, 50));
      expect(await get(port, '/plain', '127.0.0.2')).toMatch(/^HTTP\/1\.1 200 /);
    } finally {
      for (const ws of sockets) ws.terminate();
      await app.close();
      servers.pop();
    }
  });
});

describe('the metrics listener refuses writes too', () => {
  let app: FastifyInstance | null = null;
  afterEach(async () => {
    await app?.close();
    app = null;
  });

  it("answers kube-proxy's metrics routes for GET and HEAD only", async () => {
    app = buildMetricsApp({ metrics: { contentType: 'text/plain', render: async () => 'x 1\n' }, config: testProxyConfig(), limits: SMALL });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const port = (app.server.address() as { port: number }).port;
    expect(await get(port, '/metrics')).toMatch(/^HTTP\/1\.1 200 /);
    for (const path of ['/metrics', '/healthz', '/proxyMode', '/configz']) {
      const c = await open(port);
      c.socket.write(`POST ${path} HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{`);
      await c.closed;
      expect(c.data(), path).toMatch(/^HTTP\/1\.1 405 /);
    }
  });
});

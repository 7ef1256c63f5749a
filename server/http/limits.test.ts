import { connect, type Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import { ProxyHealth } from '../proxy/healthcheck/proxy-health.ts';
import { unknownNode } from '../proxy/node-info.ts';
import { buildProxyHealthApp } from '../proxy/healthcheck/proxy-health-server.ts';
import { buildMetricsApp } from './app.ts';
import { HEALTH_LIMITS, type ListenerLimits } from './limits.ts';
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

  it('caps connections per client address and in total, and answers again once they close', async () => {
    // The caps of SMALL, with the default timeouts: these idle connections must outlive the test's checks.
    const port = await start({ ...HEALTH_LIMITS, maxConnections: SMALL.maxConnections, maxConnectionsPerClient: SMALL.maxConnectionsPerClient });
    // Four idle connections from 127.0.0.1 take that address's share...
    for (let i = 0; i < 4; i++) conns.push(await open(port, '127.0.0.1'));
    const fifth = await open(port, '127.0.0.1');
    expect(await stillOpen(fifth)).toBe(false);
    // ...another address still gets in, up to the total of six...
    conns.push(await open(port, '127.0.0.2'), await open(port, '127.0.0.2'));
    for (const c of conns) expect(await stillOpen(c)).toBe(true);
    const seventh = await open(port, '127.0.0.3');
    expect(await stillOpen(seventh)).toBe(false);
    // ...and once the idle ones go, a probe is answered.
    for (const c of conns.splice(0)) c.socket.destroy();
    await new Promise((r) => setTimeout(r, 50));
    expect(await get(port, '/livez', '127.0.0.3')).toMatch(/^HTTP\/1\.1 200 /);
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

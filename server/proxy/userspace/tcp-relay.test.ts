import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { hostSockets, type TcpStream } from '../../kernel/sockets.ts';
import { relayTcp } from './tcp-relay.ts';

/**
 * The relay over real loopback sockets (no root needed): what a slow reader,
 * a half-close and a reset do to it is the kernel's and Node's behaviour, so
 * it is tested on them, not on in-memory streams.
 */

const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanup.splice(0)) c();
});

interface Proxy {
  port: number;
  /** relays: the proxy's two sockets per connection, and whether done() ran. */
  relays: { client: TcpStream; endpoint: TcpStream; done: boolean; toEndpoint: number; toClient: number; halfClosed: boolean }[];
}

/** proxyTo listens on 127.0.0.1 and relays each connection to the endpoint port. */
async function proxyTo(endpointPort: number): Promise<Proxy> {
  const sockets = hostSockets();
  const p: Proxy = { port: 0, relays: [] };
  const l = await sockets.listenTcp(
    '127.0.0.1',
    0,
    (client) => {
      void sockets.connectTcp('127.0.0.1', endpointPort).connected.then((endpoint) => {
        const r = { client, endpoint, done: false, toEndpoint: 0, toClient: 0, halfClosed: false };
        p.relays.push(r);
        relayTcp(client, endpoint, { toEndpoint: (n) => (r.toEndpoint += n), toClient: (n) => (r.toClient += n), halfClosed: () => (r.halfClosed = true) }, () => (r.done = true));
      });
    },
    () => {},
  );
  cleanup.push(() => l.close());
  p.port = l.address.port;
  return p;
}

async function server(onConnection: (s: net.Socket) => void): Promise<number> {
  const srv = net.createServer({ allowHalfOpen: true }, onConnection);
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  cleanup.push(() => srv.close());
  return (srv.address() as net.AddressInfo).port;
}

function connect(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const c = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () => resolve(c));
    c.on('error', reject);
    cleanup.push(() => c.destroy());
  });
}

const until = async (cond: () => boolean, what: string, ms = 5000) => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
};

describe('relayTcp', () => {
  it('delivers 16 MiB byte-identical to a slow reader, holding at most a few chunks itself (back-pressure)', async () => {
    const payload = randomBytes(16 * 1024 * 1024);
    const port = await server((s) => s.end(payload));
    const proxy = await proxyTo(port);
    const c = await connect(proxy.port);
    c.pause();
    await until(() => proxy.relays.length === 1, 'the relay');
    const r = proxy.relays[0]!;
    // The reader reads nothing for a while: the kernel buffers fill, then the relay stops reading the endpoint.
    let maxHeld = 0;
    for (let i = 0; i < 40; i++) {
      await new Promise((res) => setTimeout(res, 10));
      maxHeld = Math.max(maxHeld, r.client.writableLength + r.endpoint.readableLength);
    }
    expect(r.endpoint.isPaused()).toBe(true);
    expect(r.toClient).toBeLessThan(payload.length);
    // One read chunk plus the write buffer's high-water mark, not the 16 MiB the endpoint offers.
    expect(maxHeld).toBeLessThan(512 * 1024);
    // Now read it slowly, a chunk at a time.
    const hash = createHash('sha256');
    let got = 0;
    c.on('data', (d: Buffer) => {
      hash.update(d);
      got += d.length;
      c.pause();
      setImmediate(() => c.resume());
    });
    c.resume();
    await new Promise<void>((res) => c.on('end', () => res()));
    expect(got).toBe(payload.length);
    expect(hash.digest('hex')).toBe(createHash('sha256').update(payload).digest('hex'));
    expect(r.toClient).toBe(payload.length);
    c.end();
    await until(() => r.done, 'both sides closed');
  });

  it('delivers four concurrent 8 MiB downloads byte-identical to readers of different speeds (lent read buffers are not reused while a write holds them)', async () => {
    const payloads = Array.from({ length: 4 }, () => randomBytes(8 * 1024 * 1024));
    let next = 0;
    const port = await server((s) => s.end(payloads[next++]!));
    const proxy = await proxyTo(port);
    const downloads = payloads.map(async (payload, i) => {
      const c = await connect(proxy.port);
      const hash = createHash('sha256');
      let got = 0;
      c.on('data', (d: Buffer) => {
        hash.update(d);
        got += d.length;
        // Readers 1-3 stall now and then, so the relay's writes to them go pending while others read.
        if (i > 0 && got % (i * 3) === 0) {
          c.pause();
          setTimeout(() => c.resume(), i);
        }
      });
      await new Promise<void>((res) => c.on('end', () => res()));
      return { got, hash: hash.digest('hex'), want: createHash('sha256').update(payload).digest('hex') };
    });
    const results = await Promise.all(downloads);
    // Connections were accepted in order; the server answered each with the next payload.
    for (const r of results) expect(r.got).toBe(8 * 1024 * 1024);
    expect(results.map((r) => r.hash).sort()).toEqual(results.map((r) => r.want).sort());
  });

  it('passes a half-close on: the client ends its request and still gets the whole answer', async () => {
    const port = await server((s) => {
      const got: Buffer[] = [];
      s.on('data', (d: Buffer) => got.push(d));
      // The endpoint answers only after the client's FIN, as an HTTP/1.0 server or `nc -N` would.
      s.on('end', () => s.end(`echo:${Buffer.concat(got).toString()}`));
    });
    const proxy = await proxyTo(port);
    const c = await connect(proxy.port);
    const chunks: Buffer[] = [];
    c.on('data', (d: Buffer) => chunks.push(d));
    c.end('request body');
    await new Promise<void>((res) => c.on('end', () => res()));
    expect(Buffer.concat(chunks).toString()).toBe('echo:request body');
    await until(() => proxy.relays[0]!.done, 'both sides closed');
    expect(proxy.relays[0]!.halfClosed).toBe(true);
    expect(proxy.relays[0]!.toEndpoint).toBe('request body'.length);
  });

  it('closes the client when the endpoint resets', async () => {
    const port = await server((s) => s.once('data', () => s.resetAndDestroy()));
    const proxy = await proxyTo(port);
    const c = await connect(proxy.port);
    const closed = new Promise<boolean>((res) => c.on('close', (hadError) => res(hadError)));
    c.on('error', () => {});
    c.write('x');
    await closed;
    await until(() => proxy.relays[0]!.done, 'the relay to end');
    expect(proxy.relays[0]!.client.destroyed && proxy.relays[0]!.endpoint.destroyed).toBe(true);
  });

  it('closes the endpoint connection when the client resets', async () => {
    let endpointClosed = false;
    const port = await server((s) => {
      s.on('error', () => {});
      s.on('close', () => (endpointClosed = true));
    });
    const proxy = await proxyTo(port);
    const c = await connect(proxy.port);
    await until(() => proxy.relays.length === 1, 'the relay');
    c.resetAndDestroy();
    await until(() => endpointClosed && proxy.relays[0]!.done, 'the endpoint side to close');
  });
});

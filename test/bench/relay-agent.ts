/**
 * relay-agent runs inside a userspace-bench namespace (userspace.ts): as the
 * backend it serves an echo port and a bulk port; as the client it measures a
 * bulk transfer, request/response round trips at a fixed rate, and holds idle
 * connections open. One JSON command per stdin line, one JSON answer per line
 * (same id). Run: ip netns exec NS node test/bench/relay-agent.ts
 */
import { connect, createServer, type Socket } from 'node:net';
import { createInterface } from 'node:readline';

type Command =
  | { id: number; op: 'serve'; echoPort: number; bulkPort: number }
  | { id: number; op: 'bulk'; host: string; port: number; bytes: number }
  | { id: number; op: 'rr'; host: string; port: number; connections: number; rate: number; seconds: number }
  | { id: number; op: 'hold'; host: string; port: number; count: number }
  | { id: number; op: 'release' };

const out = (o: object) => process.stdout.write(JSON.stringify(o) + '\n');
const BLOCK = Buffer.alloc(256 * 1024, 0x5a);
const held: Socket[] = [];

function serve(echoPort: number, bulkPort: number): Promise<void> {
  // Echo: every chunk straight back (the round-trip probe writes small requests).
  const echo = createServer((s) => {
    s.on('error', () => {});
    s.setNoDelay(true);
    s.on('data', (b) => s.write(b));
  });
  // Bulk: the client writes a byte count and a newline, then reads that many bytes.
  const bulk = createServer((s) => {
    s.on('error', () => {});
    let head = '';
    const onData = (b: Buffer) => {
      head += b.toString('latin1');
      const i = head.indexOf('\n');
      if (i < 0) return;
      s.off('data', onData);
      let left = Number(head.slice(0, i));
      const pump = () => {
        while (left > 0) {
          const c = left >= BLOCK.length ? BLOCK : BLOCK.subarray(0, left);
          left -= c.length;
          if (!s.write(c)) return void s.once('drain', pump);
        }
        s.end();
      };
      pump();
    };
    s.on('data', onData);
  });
  echo.maxConnections = 100_000;
  return new Promise((resolve) => echo.listen(echoPort, () => bulk.listen(bulkPort, () => resolve())));
}

/** bulk reads `bytes` from the bulk port and answers the time from connect to the last byte. */
function bulkOnce(host: string, port: number, bytes: number): Promise<object> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    let got = 0;
    const s = connect({ host, port }, () => s.write(`${bytes}\n`));
    s.on('data', (b) => (got += b.length));
    s.on('end', () => resolve({ bytes: got, ms: performance.now() - t0 }));
    s.on('error', (e) => resolve({ bytes: got, ms: performance.now() - t0, error: e.message }));
  });
}

/**
 * rr sends a 64-byte request every 1000/rate ms for `seconds`, round robin
 * over `connections` kept-open connections, each awaiting its echo before its
 * next request; it answers every round trip in ms (a request that finds its
 * connection still waiting is counted as skipped, not queued).
 */
async function rr(host: string, port: number, connections: number, rate: number, seconds: number): Promise<object> {
  const req = Buffer.alloc(64, 0x61);
  const conns = await Promise.all(
    Array.from(
      { length: connections },
      () =>
        new Promise<{ s: Socket; busy: boolean; sent: number; got: number }>((resolve, reject) => {
          const s = connect({ host, port }, () => resolve(c));
          s.setNoDelay(true);
          const c = { s, busy: false, sent: 0, got: 0 };
          s.on('error', reject);
        }),
    ),
  );
  const rtts: number[] = [];
  let skipped = 0;
  for (const c of conns) {
    c.s.on('data', (b) => {
      c.got += b.length;
      if (c.busy && c.got >= 64) {
        rtts.push(performance.now() - c.sent);
        c.got -= 64;
        c.busy = false;
      }
    });
  }
  const every = 1000 / rate;
  const t0 = performance.now();
  let n = 0;
  while (performance.now() - t0 < seconds * 1000) {
    const c = conns[n % conns.length];
    if (c.busy) skipped++;
    else {
      c.busy = true;
      c.sent = performance.now();
      c.s.write(req);
    }
    n++;
    const next = t0 + n * every;
    const wait = next - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }
  await new Promise((r) => setTimeout(r, 200));
  for (const c of conns) c.s.destroy();
  return { rtts, skipped, sent: n };
}

/** hold opens count connections, `parallel` at a time, and keeps them; answers how many are open. */
async function hold(host: string, port: number, count: number): Promise<object> {
  let failed = 0;
  const parallel = 200;
  for (let i = 0; i < count; i += parallel) {
    await Promise.all(
      Array.from(
        { length: Math.min(parallel, count - i) },
        () =>
          new Promise<void>((resolve) => {
            const s = connect({ host, port }, () => {
              held.push(s);
              resolve();
            });
            s.on('error', () => {
              if (!held.includes(s)) failed++;
              resolve();
            });
          }),
      ),
    );
  }
  // Give the relay a moment to refuse (reset) any it would not keep, then count what is still open.
  await new Promise((r) => setTimeout(r, 1000));
  const open = held.filter((s) => !s.destroyed).length;
  return { open, failed: failed + (held.length - open) };
}

async function handle(c: Command): Promise<object> {
  switch (c.op) {
    case 'serve':
      await serve(c.echoPort, c.bulkPort);
      return {};
    case 'bulk':
      return bulkOnce(c.host, c.port, c.bytes);
    case 'rr':
      return rr(c.host, c.port, c.connections, c.rate, c.seconds);
    case 'hold':
      return hold(c.host, c.port, c.count);
    case 'release':
      for (const s of held.splice(0)) s.destroy();
      return {};
  }
}

createInterface({ input: process.stdin }).on('line', (line) => {
  const c = JSON.parse(line) as Command;
  handle(c).then(
    (r) => out({ id: c.id, ok: true, ...r }),
    (e: Error) => out({ id: c.id, ok: false, error: e.message }),
  );
});
process.stdin.on('end', () => process.exit(0));

/**
 * client-agent is the curl of the kernel tier: it runs inside a client (or pod)
 * namespace, reads one JSON request per line on stdin and answers one JSON line
 * on stdout with the same `id`. Keeping one agent per namespace makes a batch
 * of 60 connections cost milliseconds instead of 60 process starts, and lets a
 * TCP connection stay open while the test restarts kproxy.
 *
 * Requests (see client.ts for the types):
 *   {op:"tcp", host, port, from?, timeoutMs, count}  connect, read the hello line, close; count times
 *   {op:"udp", host, port, from?, timeoutMs, count}  one datagram from a new socket, await the reply; count times
 *     (a batch stops at its first timeout; with forMs it stops after that long, with gapMs it pauses between attempts)
 *   {op:"open", host, port, from?, timeoutMs}        connect and keep the connection (answer: conn id + hello)
 *   {op:"send", conn, text, timeoutMs}               one line over a kept connection, await the echo
 *   {op:"close", conn}
 *   {op:"bulk", host, port, bytes, pauseEveryBytes?, pauseMs?, timeoutMs}  ask a bulk port for `bytes`, read them
 *     (a slow reader when it pauses pauseMs after every pauseEveryBytes), answer the count and sha256
 *   {op:"many", host, port, count, timeoutMs}         open count connections at once, await every hello, close them all
 *     bulk's holdAt: stop reading once that many bytes arrived, until {op:"bulk-resume"}; {op:"bulk-status"} says
 *     how many bytes arrived and whether the reader is holding
 * It exits when stdin closes.
 */
import { createHash } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { connect, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';

type Outcome = 'ok' | 'refused' | 'timeout' | 'reset' | 'unreachable' | 'closed' | 'error';
interface Attempt {
  outcome: Outcome;
  ms: number;
  reply?: Record<string, unknown>;
  error?: string;
}

function outcomeOf(err: NodeJS.ErrnoException): Outcome {
  switch (err.code) {
    case 'ECONNREFUSED':
      return 'refused';
    case 'ECONNRESET':
    case 'EPIPE':
      return 'reset';
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return 'unreachable';
    default:
      return 'error';
  }
}

/** LineReader hands out the lines a socket receives, one per read(). */
class LineReader {
  #buf = '';
  #lines: string[] = [];
  #waiter: ((r: { line?: string; err?: NodeJS.ErrnoException; closed?: boolean }) => void) | null = null;
  #end: { err?: NodeJS.ErrnoException; closed?: boolean } | null = null;

  constructor(socket: Socket) {
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      this.#buf += chunk;
      for (let i = this.#buf.indexOf('\n'); i >= 0; i = this.#buf.indexOf('\n')) {
        this.#lines.push(this.#buf.slice(0, i));
        this.#buf = this.#buf.slice(i + 1);
      }
      this.#wake();
    });
    socket.on('error', (err: NodeJS.ErrnoException) => {
      this.#end ??= { err };
      this.#wake();
    });
    socket.on('close', () => {
      this.#end ??= { closed: true };
      this.#wake();
    });
  }

  #wake(): void {
    const w = this.#waiter;
    if (!w) return;
    const line = this.#lines.shift();
    if (line !== undefined) {
      this.#waiter = null;
      w({ line });
    } else if (this.#end) {
      this.#waiter = null;
      w(this.#end);
    }
  }

  read(): Promise<{ line?: string; err?: NodeJS.ErrnoException; closed?: boolean }> {
    return new Promise((resolve) => {
      this.#waiter = resolve;
      this.#wake();
    });
  }
}

/** readLine waits for one line, an error or the timeout, and says how long it took. */
async function readLine(reader: LineReader, started: number, timeoutMs: number): Promise<Attempt> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<Attempt>((resolve) => {
    timer = setTimeout(() => resolve({ outcome: 'timeout', ms: performance.now() - started }), timeoutMs);
  });
  const got = reader.read().then((r): Attempt => {
    const ms = performance.now() - started;
    if (r.line !== undefined) return { outcome: 'ok', ms, reply: JSON.parse(r.line) as Record<string, unknown> };
    if (r.err) return { outcome: outcomeOf(r.err), ms, error: r.err.message };
    return { outcome: 'closed', ms };
  });
  try {
    return await Promise.race([got, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

interface Target {
  host: string;
  port: number;
  from?: string;
  timeoutMs: number;
}

const kept = new Map<number, { socket: Socket; reader: LineReader }>();
let nextConn = 1;

async function tcpOnce(t: Target, keep: boolean): Promise<Attempt & { conn?: number }> {
  const started = performance.now();
  const socket = connect({ host: t.host, port: t.port, ...(t.from ? { localAddress: t.from } : {}) });
  const reader = new LineReader(socket);
  const a = await readLine(reader, started, t.timeoutMs);
  if (a.outcome === 'ok' && keep) {
    const conn = nextConn++;
    kept.set(conn, { socket, reader });
    return { ...a, conn };
  }
  socket.destroy();
  return a;
}

function udpOnce(t: Target): Promise<Attempt> {
  const started = performance.now();
  const sock = createSocket(t.host.includes(':') ? 'udp6' : 'udp4');
  return new Promise<Attempt>((resolve) => {
    const done = (a: Attempt) => {
      clearTimeout(timer);
      sock.close();
      resolve(a);
    };
    const timer = setTimeout(() => done({ outcome: 'timeout', ms: performance.now() - started }), t.timeoutMs);
    sock.on('message', (msg) => done({ outcome: 'ok', ms: performance.now() - started, reply: JSON.parse(msg.toString('utf8')) as Record<string, unknown> }));
    sock.on('error', (err: NodeJS.ErrnoException) => done({ outcome: outcomeOf(err), ms: performance.now() - started, error: err.message }));
    // A connected socket hears ICMP port unreachable as ECONNREFUSED.
    sock.bind({ port: 0, ...(t.from ? { address: t.from } : {}) }, () => {
      sock.connect(t.port, t.host, () => sock.send('ping'));
    });
  });
}

/** bulkOnce reads a bulk transfer to its end, hashing as it goes; a slow reader pauses the socket now and then. */
/** bulkNow: the running bulk transfer's reader (one at a time), for bulk-status and bulk-resume. */
let bulkNow: { got: () => number; holding: () => boolean; resume: () => void } | null = null;

function bulkOnce(t: Target, bytes: number, pauseEveryBytes: number, pauseMs: number, holdAt: number): Promise<Record<string, unknown>> {
  const started = performance.now();
  const socket = connect({ host: t.host, port: t.port });
  const hash = createHash('sha256');
  let got = 0;
  let holding = false;
  bulkNow = {
    got: () => got,
    holding: () => holding,
    resume: () => {
      holding = false;
      socket.resume();
    },
  };
  let nextPause = pauseEveryBytes > 0 ? pauseEveryBytes : Infinity;
  return new Promise((resolve) => {
    const timer = setTimeout(() => finish('timeout'), t.timeoutMs);
    const finish = (outcome: string, error?: string) => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ outcome, bytes: got, sha256: hash.digest('hex'), ms: performance.now() - started, ...(error ? { error } : {}) });
    };
    socket.on('connect', () => socket.write(`${bytes}\n`));
    socket.on('data', (chunk: Buffer) => {
      hash.update(chunk);
      got += chunk.length;
      if (holdAt > 0 && got >= holdAt && !holding && got - chunk.length < holdAt) {
        holding = true;
        socket.pause();
      } else if (got >= nextPause) {
        nextPause += pauseEveryBytes;
        socket.pause();
        setTimeout(() => socket.resume(), pauseMs);
      }
    });
    socket.on('end', () => finish(got === bytes ? 'ok' : 'closed'));
    socket.on('error', (err: NodeJS.ErrnoException) => finish(outcomeOf(err), err.message));
  });
}

/** many opens `count` connections at once and keeps each until every one has its hello (or failed), then closes them all. */
async function many(t: Target, count: number): Promise<Attempt[]> {
  const sockets: Socket[] = [];
  const attempts = await Promise.all(
    Array.from({ length: count }, () => {
      const started = performance.now();
      const socket = connect({ host: t.host, port: t.port });
      sockets.push(socket);
      return readLine(new LineReader(socket), started, t.timeoutMs);
    }),
  );
  for (const s of sockets) s.destroy();
  return attempts;
}

async function handle(req: Record<string, unknown>): Promise<Record<string, unknown>> {
  const t: Target = { host: String(req.host), port: Number(req.port), from: req.from as string | undefined, timeoutMs: Number(req.timeoutMs ?? 2000) };
  switch (req.op) {
    case 'tcp':
    case 'udp': {
      const results: Attempt[] = [];
      const started = performance.now();
      const forMs = req.forMs === undefined ? Infinity : Number(req.forMs);
      for (let i = 0; i < Number(req.count ?? 1) && performance.now() - started < forMs; i++) {
        const a = req.op === 'tcp' ? await tcpOnce(t, false) : await udpOnce(t);
        results.push(a);
        // One timeout already decides any test that expects answers; more would only make a failing run slow.
        if (a.outcome === 'timeout') break;
        if (req.gapMs) await new Promise((r) => setTimeout(r, Number(req.gapMs)));
      }
      return { results };
    }
    case 'open':
      return { result: await tcpOnce(t, true) };
    case 'send': {
      const c = kept.get(Number(req.conn));
      if (!c) return { result: { outcome: 'error', ms: 0, error: `no open connection ${String(req.conn)}` } };
      const started = performance.now();
      c.socket.write(String(req.text) + '\n');
      return { result: await readLine(c.reader, started, t.timeoutMs) };
    }
    case 'close': {
      kept.get(Number(req.conn))?.socket.destroy();
      kept.delete(Number(req.conn));
      return {};
    }
    case 'bulk':
      return { result: await bulkOnce(t, Number(req.bytes), Number(req.pauseEveryBytes ?? 0), Number(req.pauseMs ?? 0), Number(req.holdAt ?? 0)) };
    case 'bulk-status':
      return { result: { got: bulkNow?.got() ?? 0, holding: bulkNow?.holding() ?? false } };
    case 'bulk-resume':
      bulkNow?.resume();
      return {};
    case 'many':
      return { results: await many(t, Number(req.count)) };
    default:
      return { error: `unknown op ${String(req.op)}` };
  }
}

process.stdout.write(JSON.stringify({ ready: true }) + '\n');
const rl = createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const req = JSON.parse(line) as Record<string, unknown>;
  handle(req).then(
    (res) => process.stdout.write(JSON.stringify({ id: req.id, ...res }) + '\n'),
    (err: Error) => process.stdout.write(JSON.stringify({ id: req.id, error: err.message }) + '\n'),
  );
});
rl.on('close', () => process.exit(0));

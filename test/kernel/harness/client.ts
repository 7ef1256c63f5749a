import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { NsProcess, ProcessTracker } from './processes.ts';

const AGENT = join(import.meta.dirname, 'client-agent.ts');

/** Outcome is how one connection attempt ended, as the client saw it. */
export type Outcome = 'ok' | 'refused' | 'timeout' | 'reset' | 'unreachable' | 'closed' | 'error';

/** Attempt is one connection (TCP) or request (UDP) and what answered it. */
export interface Attempt {
  outcome: Outcome;
  /** ms: from connect (or send) to the answer or the failure. */
  ms: number;
  /** name: the backend that answered; peer: the client address that backend saw. */
  name?: string;
  peer?: string;
  echo?: string;
  error?: string;
}

/** Target is where a client connects to, optionally from one of its own addresses. */
export interface Target {
  host: string;
  port: number;
  /** from: the local address to connect from (a client namespace has two). */
  from?: string;
  timeoutMs?: number;
}

/** Tally summarises attempts: outcomes and which backends answered how often. */
export interface Tally {
  attempts: Attempt[];
  outcomes: Record<string, number>;
  /** backends: answering backend names, sorted. */
  backends: string[];
  /** peers: the client addresses the backends saw, sorted and distinct. */
  peers: string[];
}

export function tally(attempts: Attempt[]): Tally {
  const outcomes: Record<string, number> = {};
  for (const a of attempts) outcomes[a.outcome] = (outcomes[a.outcome] ?? 0) + 1;
  const distinct = (xs: (string | undefined)[]) => [...new Set(xs.filter((x): x is string => x !== undefined))].sort();
  return { attempts, outcomes, backends: distinct(attempts.map((a) => a.name)), peers: distinct(attempts.map((a) => a.peer)) };
}

function attemptOf(raw: { outcome: Outcome; ms: number; reply?: Record<string, unknown>; error?: string }): Attempt {
  const a: Attempt = { outcome: raw.outcome, ms: Math.round(raw.ms * 10) / 10 };
  if (raw.reply) {
    if (typeof raw.reply.name === 'string') a.name = raw.reply.name;
    if (typeof raw.reply.peer === 'string') a.peer = raw.reply.peer;
    if (typeof raw.reply.echo === 'string') a.echo = raw.reply.echo;
  }
  if (raw.error) a.error = raw.error;
  return a;
}

/**
 * NsClient talks to a client agent running inside one namespace: TCP
 * connections (connect, read which backend answered, close), UDP requests, and
 * kept-open TCP connections that survive across a kproxy restart.
 */
export class NsClient {
  readonly ns: string;
  readonly #proc: NsProcess;
  readonly #pending = new Map<number, (res: Record<string, unknown>) => void>();
  #nextId = 1;
  readonly #ready: Promise<void>;

  constructor(ns: string, tracker: ProcessTracker) {
    this.ns = ns;
    this.#proc = tracker.start(`client agent in ${ns}`, ns, [process.execPath, AGENT], { stdoutIsProtocol: true });
    let markReady: () => void = () => {};
    this.#ready = new Promise((resolve, reject) => {
      markReady = resolve;
      void this.#proc.exited.then((code) => reject(new Error(`client agent in ${ns} exited (${code}) before it was ready: ${this.#proc.log.tail(20)}`)));
    });
    const rl = createInterface({ input: this.#proc.child.stdout! });
    rl.on('line', (line) => {
      const msg = JSON.parse(line) as Record<string, unknown>;
      if (msg.ready) return markReady();
      const done = this.#pending.get(Number(msg.id));
      this.#pending.delete(Number(msg.id));
      done?.(msg);
    });
  }

  async #call(req: Record<string, unknown>): Promise<Record<string, unknown>> {
    await this.#ready;
    const id = this.#nextId++;
    const res = await new Promise<Record<string, unknown>>((resolve, reject) => {
      this.#pending.set(id, resolve);
      this.#proc.exited.then((code) => reject(new Error(`client agent in ${this.ns} exited (${code}): ${this.#proc.log.tail(20)}`)));
      this.#proc.child.stdin!.write(JSON.stringify({ id, ...req }) + '\n');
    });
    if (typeof res.error === 'string') throw new Error(`client agent in ${this.ns}: ${res.error}`);
    return res;
  }

  /** tcp opens `count` connections one after another and reports each (stopping at the first timeout). */
  async tcp(t: Target, count = 1): Promise<Tally> {
    const res = await this.#call({ op: 'tcp', ...t, timeoutMs: t.timeoutMs ?? 2000, count });
    return tally((res.results as Parameters<typeof attemptOf>[0][]).map(attemptOf));
  }

  /**
   * tcpFor keeps opening connections, `gapMs` apart, for `forMs`: the traffic
   * that runs while a test restarts or replaces the proxy.
   */
  async tcpFor(t: Target, forMs: number, gapMs = 10): Promise<Tally> {
    const res = await this.#call({ op: 'tcp', ...t, timeoutMs: t.timeoutMs ?? 2000, count: Number.MAX_SAFE_INTEGER, forMs, gapMs });
    return tally((res.results as Parameters<typeof attemptOf>[0][]).map(attemptOf));
  }

  /** udp sends `count` requests, each from a new socket (a new conntrack flow); it stops at the first timeout. */
  async udp(t: Target, count = 1): Promise<Tally> {
    const res = await this.#call({ op: 'udp', ...t, timeoutMs: t.timeoutMs ?? 2000, count });
    return tally((res.results as Parameters<typeof attemptOf>[0][]).map(attemptOf));
  }

  /** open connects and keeps the connection; `send` then exchanges lines over it. */
  async open(t: Target): Promise<{ conn: number; hello: Attempt }> {
    const res = await this.#call({ op: 'open', ...t, timeoutMs: t.timeoutMs ?? 2000 });
    const raw = res.result as Parameters<typeof attemptOf>[0] & { conn?: number };
    const hello = attemptOf(raw);
    if (raw.conn === undefined) throw new Error(`connecting to ${t.host}:${t.port} from ${this.ns} failed: ${JSON.stringify(hello)}`);
    return { conn: raw.conn, hello };
  }

  /** send writes one line over a kept connection and returns the backend's echo. */
  async send(conn: number, text: string, timeoutMs = 2000): Promise<Attempt> {
    const res = await this.#call({ op: 'send', conn, text, timeoutMs });
    return attemptOf(res.result as Parameters<typeof attemptOf>[0]);
  }

  async close(conn: number): Promise<void> {
    await this.#call({ op: 'close', conn });
  }

  /**
   * bulk asks a backend's bulk port for `bytes` of bulk-data.ts's stream and
   * reads it to the end (pausing `pauseMs` after every `pauseEveryBytes`: a slow
   * reader); it returns what arrived as a count and a sha256.
   */
  async bulk(t: Target & { bytes: number; pauseEveryBytes?: number; pauseMs?: number; holdAt?: number }): Promise<{ outcome: Outcome; bytes: number; sha256: string; ms: number; error?: string }> {
    const res = await this.#call({ op: 'bulk', ...t, timeoutMs: t.timeoutMs ?? 120_000 });
    return res.result as { outcome: Outcome; bytes: number; sha256: string; ms: number; error?: string };
  }

  /** bulkStatus: the running bulk transfer's bytes read so far, and whether its reader holds (bulk's holdAt). */
  async bulkStatus(): Promise<{ got: number; holding: boolean }> {
    return (await this.#call({ op: 'bulk-status' })).result as { got: number; holding: boolean };
  }

  /** bulkResume lets a holding bulk reader read again. */
  async bulkResume(): Promise<void> {
    await this.#call({ op: 'bulk-resume' });
  }

  /** many opens `count` connections at once, waits for every hello, then closes them all. */
  async many(t: Target, count: number): Promise<Tally> {
    const res = await this.#call({ op: 'many', ...t, timeoutMs: t.timeoutMs ?? 20_000, count });
    return tally((res.results as Parameters<typeof attemptOf>[0][]).map(attemptOf));
  }
}

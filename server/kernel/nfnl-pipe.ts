import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { constants } from 'node:os';
import { join } from 'node:path';
import type { Logger } from '../log.ts';

/**
 * NfnlPipe is kproxy's netfilter netlink socket, held by server/kernel/native/nfnl-pipe.c
 * (Node has no AF_NETLINK sockets): one long-lived child process, spawned
 * with an argument array, that sends the bytes kproxy gives it and returns
 * the kernel's replies. Requests are answered in order; one is in flight at a
 * time. The frame format is the C program's (see its header comment).
 */
export interface NfnlPipe {
  /** batch sends one datagram (an nf_tables batch) and returns every reply the kernel queued for it. */
  batch(bytes: Uint8Array): Promise<Buffer[]>;
  /** requests sends each message in turn (dumps, gets) and returns all replies, each request's to its end. */
  requests(bytes: Uint8Array): Promise<Buffer[]>;
  /** ifindex resolves an interface name in the namespace (-errno when there is none). */
  ifindex(name: string): Promise<number>;
  /** ifname is the name of an interface index in the namespace (null when there is none). */
  ifname(index: number): Promise<string | null>;
  /**
   * xtables reads a legacy (x_tables) table of the namespace in one getsockopt and answers,
   * per chain in the table's order, "C NAME RULES" then a "J TARGET" line for each of its rules
   * that jumps or goes to a chain (text, in pieces); null when the kernel has no such table.
   */
  xtables(family: 4 | 6, table: string): Promise<Buffer[] | null>;
  /** close ends the child (its stdin closes; it exits). */
  close(): void;
  readonly pid: number;
  /** alive: the helper runs and speaks the protocol (false once it exited, was killed or was closed). */
  readonly alive: boolean;
  /** foreignDatagrams: datagrams the helper dropped because the kernel did not send them. */
  readonly foreignDatagrams: number;
}

/** NfnlPipeError: a request through the helper failed (the helper may still run: see NfnlPipeGoneError). */
export class NfnlPipeError extends Error {}

/** NfnlPipeGoneError: the helper is missing, could not start, died, or answered out of protocol (and was ended): nothing more goes through it. */
export class NfnlPipeGoneError extends NfnlPipeError {}

/** NFNL_PIPE_ENV: a path to the nfnl-pipe program, instead of the one `npm run build` makes. */
export const NFNL_PIPE_ENV = 'KPROXY_NFNL_PIPE';
/** PROTOCOL_VERSION: the C program's (2: 'F' frames for dropped foreign datagrams, the reply timeout). */
export const PROTOCOL_VERSION = 2;
/** MAX_ANSWER_FRAME: the longest frame the helper sends (a datagram is at most its 256 KiB buffer). */
export const MAX_ANSWER_FRAME = 1 << 20;

/**
 * findNfnlPipe: where the built program is. From dist/server/kernel/ (the
 * daemon as built) it is dist/native/nfnl-pipe; from server/kernel/ (the
 * sources, as the tests run them) the same file under dist/.
 */
export function findNfnlPipe(env: NodeJS.ProcessEnv = process.env): string | null {
  if (env[NFNL_PIPE_ENV]) return env[NFNL_PIPE_ENV]!;
  const here = import.meta.dirname;
  for (const p of [join(here, '..', '..', 'native', 'nfnl-pipe'), join(here, '..', '..', 'dist', 'native', 'nfnl-pipe')]) if (existsSync(p)) return p;
  return null;
}

/** Frame is one frame from the helper: its kind ('D', 'E', 'F') and payload. */
export interface Frame {
  readonly kind: string;
  readonly payload: Buffer;
}

/** FRAME_SIZES: the payload length each kind of answer frame must have (null: any, up to MAX_ANSWER_FRAME). */
const FRAME_SIZES: Readonly<Record<string, number | null>> = { D: null, E: 4, F: 8 };

/**
 * FrameReader cuts the helper's stdout into frames (u32 LE payload length,
 * u8 kind, three zero bytes, the payload), however the bytes arrive. A frame
 * of an unknown kind, of the wrong size for its kind, or longer than
 * MAX_ANSWER_FRAME is out of protocol: push throws NfnlPipeGoneError rather
 * than wait for (and buffer) a length that a corrupted header made up.
 */
export class FrameReader {
  #chunks: Buffer[] = [];
  #buffered = 0;

  /** push takes the next bytes and returns the frames they complete, in order. */
  push(chunk: Buffer): Frame[] {
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
    if (this.#buffered < 8) return [];
    let buf = this.#chunks.length === 1 ? this.#chunks[0] : Buffer.concat(this.#chunks, this.#buffered);
    const out: Frame[] = [];
    let off = 0;
    while (buf.length - off >= 8) {
      const len = buf.readUInt32LE(off);
      const kind = String.fromCharCode(buf[off + 4]);
      const size = FRAME_SIZES[kind];
      if (size === undefined) throw new NfnlPipeGoneError(`an answer frame of unknown kind 0x${buf[off + 4].toString(16)} (length ${len})`);
      if (size !== null && len !== size) throw new NfnlPipeGoneError(`an '${kind}' frame of ${len} bytes (it has ${size})`);
      if (len > MAX_ANSWER_FRAME) throw new NfnlPipeGoneError(`a '${kind}' frame of ${len} bytes (at most ${MAX_ANSWER_FRAME})`);
      if (buf.length - off < 8 + len) break;
      // A copy: the frame outlives the chunk it arrived in.
      out.push({ kind, payload: Buffer.from(buf.subarray(off + 8, off + 8 + len)) });
      off += 8 + len;
    }
    buf = buf.subarray(off);
    this.#chunks = buf.length ? [buf] : [];
    this.#buffered = buf.length;
    return out;
  }
}

/** errnoName: "ETIMEDOUT" for 110, "errno N" for a number libc has no name for here. */
export function errnoName(errno: number): string {
  return Object.entries(constants.errno).find(([, v]) => v === errno)?.[0] ?? `errno ${errno}`;
}

interface Pending {
  readonly resolve: (r: { data: Buffer[]; status: number }) => void;
  readonly reject: (err: Error) => void;
  readonly data: Buffer[];
}

export interface StartOptions {
  /** timeoutMs bounds one request (a first sync's batch at 10,000 services takes the kernel seconds); default 120 s. */
  timeoutMs?: number;
  /**
   * replyTimeoutMs: how long the helper waits for the kernel's next reply to a
   * request (dumps, gets) before it answers ETIMEDOUT; default the helper's
   * own, 5 s. The kernel answers within the call: a silence of seconds means
   * no answer is coming, and the sync must not wait timeoutMs for it.
   */
  replyTimeoutMs?: number;
  /** prefix: argv to run the program under (tests: ["ip", "netns", "exec", NS]); none on the host. */
  prefix?: readonly string[];
  /** logger: where dropped foreign datagrams are reported (none: counted only). */
  logger?: Logger;
}

/**
 * startNfnlPipe spawns the program and waits for it to say its socket is open.
 * A program that is missing, exits, or does not speak PROTOCOL_VERSION (an
 * older build) rejects with NfnlPipeGoneError.
 */
export function startNfnlPipe(path: string, opts: StartOptions = {}): Promise<NfnlPipe> {
  const timeoutMs = opts.timeoutMs ?? 120_000;
  const logger = opts.logger;
  return new Promise((resolveStart, rejectStart) => {
    let child: ChildProcess;
    try {
      const argv = [...(opts.prefix ?? []), path, ...(opts.replyTimeoutMs ? ['--reply-timeout-ms', String(Math.ceil(opts.replyTimeoutMs))] : [])];
      child = spawn(argv[0], argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
    } catch (err) {
      rejectStart(new NfnlPipeGoneError(`cannot start ${path}: ${(err as Error).message}`, { cause: err }));
      return;
    }
    // The daemon may exit with the helper running (--once): only a start or a request in flight holds the event loop.
    child.unref();
    const handles = [child.stdin, child.stdout, child.stderr] as unknown as { ref?: () => void; unref?: () => void }[];
    const hold = (busy: boolean) => {
      for (const h of handles) {
        if (busy) h?.ref?.();
        else h?.unref?.();
      }
    };
    const queue: Pending[] = [];
    let started = false;
    let dead: NfnlPipeGoneError | null = null;
    let closed = false;
    let stderr = '';
    let foreign = 0;
    const reader = new FrameReader();

    const fail = (err: NfnlPipeGoneError) => {
      if (dead) return;
      dead = err;
      if (!started) rejectStart(err);
      for (const p of queue.splice(0)) p.reject(err);
    };
    /** outOfProtocol ends a helper that said something kproxy cannot trust the rest of. */
    const outOfProtocol = (what: string) => {
      fail(new NfnlPipeGoneError(`${path} sent ${what}; it was stopped`));
      child.kill('SIGKILL');
    };
    child.on('error', (err) => fail(new NfnlPipeGoneError(`${path}: ${err.message}`, { cause: err })));
    child.on('exit', (code, signal) => fail(new NfnlPipeGoneError(`${path} exited (${signal ?? `code ${code}`})${stderr.trim() ? `: ${stderr.trim()}` : ''}`)));
    child.stderr!.on('data', (d: Buffer) => {
      if (stderr.length < 4096) stderr += d.toString('utf8');
    });
    child.stdin!.on('error', () => {
      // The child is gone; its exit event says why.
    });

    const onForeign = (payload: Buffer) => {
      foreign++;
      // Logged at 1, 2, 4, 8, … drops: a process flooding the socket cannot flood the log.
      if ((foreign & (foreign - 1)) === 0) {
        logger?.warn('dropped a netlink datagram that did not come from the kernel (another process sent it to the netfilter socket)', {
          senderPortId: payload.readUInt32LE(0),
          bytes: payload.readUInt32LE(4),
          droppedSoFar: foreign,
        });
      }
    };

    const onFrame = ({ kind, payload }: Frame) => {
      if (dead) return;
      if (!started) {
        if (kind !== 'E' || payload.readInt32LE(0) !== PROTOCOL_VERSION) {
          const said = kind === 'E' ? `protocol ${payload.readInt32LE(0)}` : `a '${kind}' frame`;
          outOfProtocol(`${said} at start where protocol ${PROTOCOL_VERSION} was expected (an older build? npm run build makes it again)`);
          return;
        }
        started = true;
        hold(false);
        resolveStart(pipe);
        return;
      }
      if (kind === 'F') return onForeign(payload);
      const p = queue[0];
      if (!p) return outOfProtocol(`an answer to a request that was not made`);
      if (kind === 'D') p.data.push(payload);
      else {
        queue.shift();
        if (queue.length === 0) hold(false);
        p.resolve({ data: p.data, status: payload.readInt32LE(0) });
      }
    };

    child.stdout!.on('data', (d: Buffer) => {
      let frames: Frame[];
      try {
        frames = reader.push(d);
      } catch (err) {
        return outOfProtocol((err as Error).message);
      }
      for (const f of frames) onFrame(f);
    });

    const request = (kind: string, payload: Uint8Array): Promise<{ data: Buffer[]; status: number }> => {
      if (dead) return Promise.reject(dead);
      if (closed) return Promise.reject(new NfnlPipeGoneError(`${path} was closed`));
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          fail(new NfnlPipeGoneError(`${path} did not answer within ${timeoutMs} ms; it was stopped`));
          child.kill('SIGKILL');
        }, timeoutMs);
        queue.push({
          resolve: (r) => {
            clearTimeout(timer);
            resolve(r);
          },
          reject: (e) => {
            clearTimeout(timer);
            reject(e);
          },
          data: [],
        });
        hold(true);
        const head = Buffer.alloc(8);
        head.writeUInt32LE(payload.length, 0);
        head.write(kind, 4, 'latin1');
        child.stdin!.write(head);
        child.stdin!.write(payload);
      });
    };

    const pipe: NfnlPipe = {
      pid: child.pid ?? -1,
      get alive() {
        return dead === null && !closed;
      },
      get foreignDatagrams() {
        return foreign;
      },
      async batch(bytes) {
        const r = await request('B', bytes);
        if (r.status < 0) throw new NfnlPipeError(`sending the batch failed: ${errnoName(-r.status)}`);
        return r.data;
      },
      async requests(bytes) {
        const r = await request('Q', bytes);
        if (r.status === -constants.errno.ETIMEDOUT) throw new NfnlPipeError(`netlink request failed: ETIMEDOUT (the kernel did not answer within ${opts.replyTimeoutMs ?? 5000} ms)`);
        if (r.status < 0) throw new NfnlPipeError(`netlink request failed: ${errnoName(-r.status)}`);
        return r.data;
      },
      async ifindex(name) {
        const r = await request('I', Buffer.from(name, 'utf8'));
        return r.status;
      },
      async ifname(index) {
        const b = Buffer.alloc(4);
        b.writeUInt32LE(index >>> 0, 0);
        const r = await request('N', b);
        return r.status === 0 && r.data.length ? r.data[0].toString('utf8') : null;
      },
      async xtables(family, table) {
        const r = await request('X', Buffer.concat([Buffer.of(family), Buffer.from(table, 'latin1')]));
        if (r.status === -constants.errno.ENOENT) return null;
        if (r.status < 0) throw new NfnlPipeError(`reading the ${family === 6 ? 'ip6' : 'ip'}tables ${table} table failed: ${errnoName(-r.status)}`);
        return r.data;
      },
      close() {
        // Requests already sent are still answered: the helper reads its stdin to the end before it exits.
        closed = true;
        child.stdin!.end();
      },
    };
  });
}

import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

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
  /** close ends the child (its stdin closes; it exits). */
  close(): void;
  readonly pid: number;
}

/** NfnlPipeError: the helper is missing, could not start, died, or answered out of protocol. */
export class NfnlPipeError extends Error {}

/** NFNL_PIPE_ENV: a path to the nfnl-pipe program, instead of the one `npm run build` makes. */
export const NFNL_PIPE_ENV = 'KPROXY_NFNL_PIPE';
const PROTOCOL_VERSION = 1;

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

interface Pending {
  readonly resolve: (r: { data: Buffer[]; status: number }) => void;
  readonly reject: (err: Error) => void;
  readonly data: Buffer[];
}

export interface StartOptions {
  /** timeoutMs bounds one request (a first sync's batch at 10,000 services takes the kernel seconds); default 120 s. */
  timeoutMs?: number;
  /** prefix: argv to run the program under (tests: ["ip", "netns", "exec", NS]); none on the host. */
  prefix?: readonly string[];
}

/** startNfnlPipe spawns the program and waits for it to say its socket is open. */
export function startNfnlPipe(path: string, opts: StartOptions = {}): Promise<NfnlPipe> {
  const timeoutMs = opts.timeoutMs ?? 120_000;
  return new Promise((resolveStart, rejectStart) => {
    let child: ChildProcess;
    try {
      const argv = [...(opts.prefix ?? []), path];
      child = spawn(argv[0], argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
    } catch (err) {
      rejectStart(new NfnlPipeError(`cannot start ${path}: ${(err as Error).message}`, { cause: err }));
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
    let dead: NfnlPipeError | null = null;
    let stderr = '';
    let chunks: Buffer[] = [];
    let buffered = 0;

    const fail = (err: NfnlPipeError) => {
      if (dead) return;
      dead = err;
      if (!started) rejectStart(err);
      for (const p of queue.splice(0)) p.reject(err);
    };
    child.on('error', (err) => fail(new NfnlPipeError(`${path}: ${err.message}`, { cause: err })));
    child.on('exit', (code, signal) => fail(new NfnlPipeError(`${path} exited (${signal ?? `code ${code}`})${stderr.trim() ? `: ${stderr.trim()}` : ''}`)));
    child.stderr!.on('data', (d: Buffer) => {
      if (stderr.length < 4096) stderr += d.toString('utf8');
    });
    child.stdin!.on('error', () => {
      // The child is gone; its exit event says why.
    });

    const onFrame = (kind: number, payload: Buffer) => {
      if (!started) {
        if (kind !== 0x45 /* 'E' */ || payload.length !== 4 || payload.readInt32LE(0) !== PROTOCOL_VERSION) {
          fail(new NfnlPipeError(`${path} does not speak protocol ${PROTOCOL_VERSION}`));
          child.kill();
          return;
        }
        started = true;
        hold(false);
        resolveStart(pipe);
        return;
      }
      const p = queue[0];
      if (!p) {
        fail(new NfnlPipeError(`${path} answered a request that was not made`));
        child.kill();
        return;
      }
      if (kind === 0x44 /* 'D' */) p.data.push(payload);
      else if (kind === 0x45 && payload.length === 4) {
        queue.shift();
        if (queue.length === 0) hold(false);
        p.resolve({ data: p.data, status: payload.readInt32LE(0) });
      } else {
        fail(new NfnlPipeError(`${path} sent an unknown frame`));
        child.kill();
      }
    };

    child.stdout!.on('data', (d: Buffer) => {
      chunks.push(d);
      buffered += d.length;
      if (buffered < 8) return;
      let buf = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, buffered);
      let off = 0;
      while (buf.length - off >= 8) {
        const len = buf.readUInt32LE(off);
        if (buf.length - off < 8 + len) break;
        // A copy: the frame outlives the chunk it arrived in.
        onFrame(buf[off + 4], Buffer.from(buf.subarray(off + 8, off + 8 + len)));
        off += 8 + len;
      }
      buf = buf.subarray(off);
      chunks = buf.length ? [buf] : [];
      buffered = buf.length;
    });

    const request = (kind: string, payload: Uint8Array): Promise<{ data: Buffer[]; status: number }> => {
      if (dead) return Promise.reject(dead);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          const err = new NfnlPipeError(`${path} did not answer within ${timeoutMs} ms`);
          fail(err);
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
      async batch(bytes) {
        const r = await request('B', bytes);
        if (r.status < 0) throw new NfnlPipeError(`sending the batch failed: errno ${-r.status}`);
        return r.data;
      },
      async requests(bytes) {
        const r = await request('Q', bytes);
        if (r.status < 0) throw new NfnlPipeError(`netlink request failed: errno ${-r.status}`);
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
      close() {
        child.stdin!.end();
      },
    };
  });
}

import { spawn, type ChildProcess } from 'node:child_process';
import { CommandFailedError, CommandTimeoutError } from '../errors.ts';
import { execFile, type ExecFn } from './exec.ts';

/** StatusResult: what a check or a one-rule edit tells kproxy (its output is not read). */
export interface StatusResult {
  readonly code: number;
  readonly stderr: string;
}

/** StatusFn runs one program with an argument array and answers its exit code and stderr. */
export type StatusFn = (file: string, args: readonly string[], opts?: { timeoutMs?: number }) => Promise<StatusResult>;

/** STDERR_MAX: stderr kept per command (an error message, not a listing). */
const STDERR_MAX = 16 * 1024;

/**
 * LAUNCHER_SCRIPT runs one command per input line (already quoted by quote())
 * and answers `<exit code> <stderr length>\n<stderr>`. stdout goes to
 * /dev/null; LC_ALL=C makes ${#err} a byte count. It ends at end of input,
 * that is when the daemon exits.
 */
const LAUNCHER_SCRIPT = `export LC_ALL=C
while IFS= read -r cmd; do
  err=$(eval "$cmd" 2>&1 >/dev/null </dev/null)
  rc=$?
  printf '%d %d\\n' "$rc" "\${#err}"
  printf '%s' "$err"
done
`;

/** quote makes one argument a single-quoted sh word: nothing in it is interpreted. */
function quote(arg: string): string {
  return `'${arg.replaceAll("'", `'\\''`)}'`;
}

interface Job {
  readonly line: string;
  readonly file: string;
  readonly args: readonly string[];
  readonly timeoutMs: number;
  readonly resolve: (r: StatusResult) => void;
  readonly reject: (e: Error) => void;
}

/**
 * createLauncher returns a StatusFn that runs commands from one small
 * long-lived /bin/sh instead of spawning them from the daemon.
 *
 * Why: spawning forks the daemon, and the fork copies its page tables while
 * the event loop waits: 1.2 ms at 50 MiB of RSS, 3 ms at 560 MiB on the
 * bench machine, more on a busy node. The canary poll runs `iptables -S`
 * once a second per IP family, so in userspace mode (where the event loop
 * carries every relayed connection) each poll was a stall in the traffic.
 * The shell forks instead, and it is small.
 *
 * Commands run one at a time, in order. A command that outlives its timeout
 * ends the shell (its process group: the command too) with a
 * CommandTimeoutError; the next command starts a new shell. Where the shell
 * cannot run (no /bin/sh), or for an argument sh's line protocol cannot carry
 * (a newline or NUL), the command is spawned directly (`fallback`).
 */
export function createLauncher(opts: { shell?: string; fallback?: ExecFn } = {}): StatusFn & { close(): void } {
  const shell = opts.shell ?? '/bin/sh';
  const fallback = opts.fallback ?? execFile;
  let child: ChildProcess | null = null;
  let unavailable = false;
  let pending: Buffer = Buffer.alloc(0);
  let current: (Job & { timer: NodeJS.Timeout }) | null = null;
  const queue: Job[] = [];

  const endShell = () => {
    if (!child) return;
    const c = child;
    child = null;
    pending = Buffer.alloc(0);
    // The shell leads its own process group: the command it runs goes with it.
    if (c.pid !== undefined && c.exitCode === null && c.signalCode === null) {
      try {
        process.kill(-c.pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }
  };

  const failCurrent = (err: Error) => {
    if (!current) return;
    clearTimeout(current.timer);
    current.reject(err);
    current = null;
  };

  const onOutput = (b: Buffer) => {
    pending = pending.length ? Buffer.concat([pending, b]) : b;
    while (current) {
      const nl = pending.indexOf(10);
      if (nl < 0) return;
      const [code, len] = pending.subarray(0, nl).toString('latin1').split(' ').map(Number);
      if (pending.length < nl + 1 + len) return;
      const stderr = pending.subarray(nl + 1, nl + 1 + Math.min(len, STDERR_MAX)).toString('utf8');
      pending = pending.subarray(nl + 1 + len);
      clearTimeout(current.timer);
      const done = current;
      current = null;
      done.resolve({ code, stderr });
      next();
    }
  };

  const start = (): ChildProcess | null => {
    if (child) return child;
    let c: ChildProcess;
    try {
      c = spawn(shell, ['-c', LAUNCHER_SCRIPT], { stdio: ['pipe', 'pipe', 'ignore'], detached: true });
    } catch {
      unavailable = true;
      return null;
    }
    child = c;
    // An idle shell must not keep the daemon alive (it ends when its input closes, at the daemon's exit);
    // a command in flight does, through its timer (`kproxy --cleanup` waits for its last command).
    c.unref();
    for (const s of [c.stdin, c.stdout]) (s as unknown as { unref(): void }).unref();
    c.stdin!.on('error', () => {});
    c.stdout!.on('data', (b: Buffer) => {
      if (child === c) onOutput(b);
    });
    c.on('error', (e: NodeJS.ErrnoException) => {
      if (child !== c) return;
      child = null;
      if (e.code === 'ENOENT' || e.code === 'EACCES') unavailable = true;
      // The command in flight is run again directly (a spawn failure ran nothing).
      const job = current;
      if (job) {
        clearTimeout(job.timer);
        current = null;
        queue.unshift(job);
      }
      next();
    });
    c.on('exit', () => {
      if (child !== c) return;
      child = null;
      failCurrent(new CommandFailedError(`${shell} running commands for kproxy exited`));
      next();
    });
    return c;
  };

  const next = () => {
    while (!current && queue.length > 0) {
      const job = queue.shift()!;
      const sh = unavailable ? null : start();
      if (!sh) {
        fallback(job.file, job.args, { timeoutMs: job.timeoutMs }).then(job.resolve, job.reject);
        continue;
      }
      const timer = setTimeout(() => {
        endShell();
        failCurrent(new CommandTimeoutError(`${job.file} did not finish within ${job.timeoutMs} ms`));
        next();
      }, job.timeoutMs);
      current = { ...job, timer };
      sh.stdin!.write(job.line + '\n');
    }
  };

  const run: StatusFn = (file, args, o = {}) => {
    const timeoutMs = o.timeoutMs ?? 60_000;
    const words = [file, ...args];
    if (unavailable || words.some((w) => w.includes('\n') || w.includes('\0'))) return fallback(file, args, { timeoutMs });
    return new Promise<StatusResult>((resolve, reject) => {
      queue.push({ line: words.map(quote).join(' '), file, args, timeoutMs, resolve, reject });
      next();
    });
  };
  return Object.assign(run, {
    close: () => {
      endShell();
      failCurrent(new CommandFailedError('the launcher was closed'));
      for (const j of queue.splice(0)) j.reject(new CommandFailedError('the launcher was closed'));
    },
  });
}

let shared: (StatusFn & { close(): void }) | null = null;

/** sharedLauncher: the daemon's one launcher (one shell for every runner that uses it). */
export function sharedLauncher(): StatusFn {
  shared ??= createLauncher();
  return shared;
}

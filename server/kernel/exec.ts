import { spawn } from 'node:child_process';
import { open, statfs, unlink, type FileHandle } from 'node:fs/promises';
import { setPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Writable } from 'node:stream';
import { CommandFailedError, CommandNotFoundError, CommandTimeoutError } from '../errors.ts';
import { textPieces } from './text-pieces.ts';

export interface ExecOptions {
  /** stdin is written to the process and then closed (restore input). */
  stdin?: string | Buffer;
  /** timeoutMs kills the process (SIGKILL) after this long; default 60 s. */
  timeoutMs?: number;
  /** maxOutputBytes caps captured stdout (a full iptables-save can be large); default 512 MiB. */
  maxOutputBytes?: number;
  env?: NodeJS.ProcessEnv;
  /**
   * stdoutFile: the process writes its output to an unlinked temporary file,
   * read back in one piece once it exited (iptables-save of a big node). Through
   * a pipe the output arrives in 64 KiB buffers that are concatenated and
   * dropped: at 10,000 Services × 10 endpoints, 34 MB of them per read, which
   * glibc's malloc keeps (scattered between live objects) long after they are
   * freed. Falls back to the pipe when no file can be made, and runs the
   * command again through the pipe when the temporary directory's file system
   * is (nearly) full after it: a program writing to a full disk loses the end
   * of its output, and iptables-save exits 0 all the same. Only for commands
   * that may run twice (reads).
   */
  stdoutFile?: boolean;
  /**
   * background: the process runs at BACKGROUND_NICE (lower CPU priority),
   * for reads nobody's networking waits on (the dashboard's look at the
   * kernel): on a busy node they yield the CPU to kproxy's own loop and
   * whatever else the node runs. Best effort: a priority that cannot be set
   * leaves the process as it is.
   */
  background?: boolean;
  /** onSpawn is told the process's PID once it runs (to watch it, e.g. for the xtables lock). */
  onSpawn?: (pid: number) => void;
}

/** BACKGROUND_NICE: the niceness of a background process (ExecOptions.background). */
export const BACKGROUND_NICE = 10;

export interface ExecResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** ExecFn runs one program with an argument array; it never goes through a shell. */
export type ExecFn = (file: string, args: readonly string[], opts?: ExecOptions) => Promise<ExecResult>;

/**
 * execFile spawns a program directly (no shell, so no value is ever interpreted
 * by one), feeds stdin, and collects output. A non-zero exit is a result, not an
 * error; a missing program or a timeout is an error.
 */
export const execFile: ExecFn = async (file, args, opts = {}) => {
  const input = typeof opts.stdin === 'string' && opts.stdin.length >= STDIN_FILE_MIN ? await stdinFile(opts.stdin) : null;
  const output = opts.stdoutFile ? await outputFile() : null;
  try {
    const res = await run(file, args, opts, input, output);
    if (!output) return res;
    // The output may have lost its end on a full disk: the command runs again (it is a read), through a pipe.
    if (input === null && (await tempSpaceLow())) return await run(file, args, opts, null, null);
    return { ...res, stdout: await readOutput(output, file, opts.maxOutputBytes ?? MAX_OUTPUT_BYTES) };
  } finally {
    await input?.close().catch(() => {});
    await output?.close().catch(() => {});
  }
};

/**
 * TEMP_SPACE_MIN: free bytes the temporary directory must keep for an output
 * file to be trusted (and to be used at all): below it, a write may have
 * failed for want of space, which the writing program need not report.
 */
const TEMP_SPACE_MIN = 1 << 20;

/** tempSpaceLow: the temporary directory's file system has less than TEMP_SPACE_MIN free for this user (or cannot say). */
async function tempSpaceLow(): Promise<boolean> {
  try {
    const s = await statfs(tmpdir());
    // Root may write into the blocks the file system reserves for it; others may not.
    const free = (process.geteuid?.() === 0 ? s.bfree : s.bavail) * s.bsize;
    return free < TEMP_SPACE_MIN;
  } catch {
    return true;
  }
}

/** MAX_OUTPUT_BYTES: the default cap on captured stdout. */
const MAX_OUTPUT_BYTES = 512 * 1024 * 1024;

function run(file: string, args: readonly string[], opts: ExecOptions, input: FileHandle | null, output: FileHandle | null): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args as string[], { stdio: [input?.fd ?? 'pipe', output?.fd ?? 'pipe', 'pipe'], env: opts.env ?? process.env });
    if (child.pid !== undefined) opts.onSpawn?.(child.pid);
    if (opts.background && child.pid !== undefined) {
      try {
        setPriority(child.pid, BACKGROUND_NICE);
      } catch {
        // Gone already, or not allowed: it runs at kproxy's priority.
      }
    }
    // Listened for first, and the pipes below may be missing: a spawn that fails for want of file descriptors
    // (EMFILE, e.g. the userspace mode holding many connections) has no stdio streams and emits 'error' later;
    // without a listener by then that error would end the daemon.
    child.on('error', (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      if (e.code === 'ENOENT') reject(new CommandNotFoundError(`${file} is not installed or not on PATH`, { cause: e }));
      else reject(new CommandFailedError(`running ${file} failed: ${e.message}`, { cause: e }));
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let outBytes = 0;
    let timedOut = false;
    const max = opts.maxOutputBytes ?? MAX_OUTPUT_BYTES;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, opts.timeoutMs ?? 60_000);
    child.stdout?.on('data', (b: Buffer) => {
      outBytes += b.length;
      if (outBytes <= max) out.push(b);
    });
    child.stderr?.on('data', (b: Buffer) => {
      if (err.length < 1024) err.push(b);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (timedOut) return reject(new CommandTimeoutError(`${file} ${args.slice(0, 4).join(' ')} did not finish within ${opts.timeoutMs ?? 60_000} ms`));
      if (outBytes > max) return reject(new CommandFailedError(`${file} wrote more than ${max} bytes of output`));
      resolve({ code: code ?? (signal ? 128 : 1), stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') });
    });
    if (input) return; // the process reads its input from the file
    // EPIPE on stdin (the process exited early) surfaces through 'close' with its exit code.
    child.stdin?.on('error', () => {});
    if (child.stdin && typeof opts.stdin === 'string' && opts.stdin.length > STDIN_CHUNK) writeInPieces(child.stdin, opts.stdin);
    else if (opts.stdin !== undefined) child.stdin?.end(opts.stdin);
    else child.stdin?.end();
  });
}

/**
 * STDIN_FILE_MIN: an input of at least this many characters reaches the
 * process as a file instead of a pipe. Through a pipe, the process reads only
 * as fast as the event loop refills it: while the loop builds another family's
 * rules (a dual-stack first sync) or collects garbage, iptables-restore waits
 * on an empty pipe. From a file it reads at its own pace, as a bare restore
 * does.
 */
const STDIN_FILE_MIN = 4 * (1 << 20);

let tempFiles = 0;

/** tempPath names a file of kproxy's in the temporary directory (made with 'wx', unlinked at once by its maker). */
function tempPath(kind: 'stdin' | 'stdout'): string {
  return join(tmpdir(), `kproxy-${kind}-${process.pid}-${++tempFiles}`);
}

/**
 * stdinFile writes a long input to a file in the temporary directory, a piece
 * at a time on libuv's threads, and returns it opened for reading, already
 * unlinked (nothing is left behind, even if kproxy dies). null when the file
 * cannot be made (a read-only or full temporary directory): the input then goes
 * through a pipe as before.
 */
async function stdinFile(text: string): Promise<FileHandle | null> {
  const path = tempPath('stdin');
  let writer: FileHandle | null = null;
  let reader: FileHandle | null = null;
  try {
    writer = await open(path, 'wx', 0o600);
    for (const piece of textPieces(text, STDIN_CHUNK)) await writer.write(piece);
    reader = await open(path, 'r');
    return reader;
  } catch {
    await reader?.close().catch(() => {});
    return null;
  } finally {
    await writer?.close().catch(() => {});
    await unlink(path).catch(() => {});
  }
}

/** outputFile makes an unlinked temporary file for a process's stdout; null when it cannot, or the disk is (nearly) full (the pipe is used). */
async function outputFile(): Promise<FileHandle | null> {
  if (await tempSpaceLow()) return null;
  const path = tempPath('stdout');
  try {
    return await open(path, 'wx+', 0o600);
  } catch {
    return null;
  } finally {
    await unlink(path).catch(() => {});
  }
}

/** readOutput reads what the process wrote to its output file, in one buffer (one allocation, released whole). */
async function readOutput(output: FileHandle, file: string, max: number): Promise<string> {
  const { size } = await output.stat();
  if (size > max) throw new CommandFailedError(`${file} wrote more than ${max} bytes of output`);
  const buf = Buffer.allocUnsafeSlow(size);
  let at = 0;
  while (at < size) {
    const { bytesRead } = await output.read(buf, at, size - at, at);
    if (bytesRead === 0) break;
    at += bytesRead;
  }
  return buf.toString('utf8', 0, at);
}

/** STDIN_CHUNK: characters of a long input encoded and written at a time. */
const STDIN_CHUNK = 1 << 20;

/**
 * writeInPieces writes a long text to a process a piece at a time, each when
 * the pipe has taken the one before: written whole, a 33 MB restore input
 * would be copied into one 33 MB buffer held until the process has read all
 * of it (seconds, for iptables-restore at 10,000 Services × 10 endpoints), on
 * top of the text itself.
 */
function writeInPieces(stdin: Writable, text: string): void {
  const pieces = textPieces(text, STDIN_CHUNK);
  let closed = false;
  const next = (): void => {
    for (let piece = pieces.next(); !piece.done; piece = pieces.next()) {
      if (closed) return;
      if (!stdin.write(piece.value)) return void stdin.once('drain', next);
    }
    if (!closed) stdin.end();
  };
  stdin.once('close', () => (closed = true));
  next();
}

/**
 * timeoutForInput: a command's timeout and msPerMiB more per MiB of the input
 * it reads (the input's UTF-16 length stands for its size): a restore of a big
 * cluster's rules takes time in proportion, and a fixed bound would end good
 * runs on slow nodes.
 */
export function timeoutForInput(baseMs: number, input: string, msPerMiB: number): number {
  return baseMs + Math.ceil((input.length / (1024 * 1024)) * msPerMiB);
}

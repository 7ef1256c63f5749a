import { spawn, type ChildProcess } from 'node:child_process';

/** LogTail keeps the last lines a process wrote (stdout and stderr interleaved) for failure reports. */
export class LogTail {
  readonly #lines: string[] = [];
  readonly #max: number;
  #partial = '';
  readonly #listeners = new Set<(line: string) => void>();

  constructor(max = 400) {
    this.#max = max;
  }

  push(chunk: string): void {
    const parts = (this.#partial + chunk).split('\n');
    this.#partial = parts.pop() ?? '';
    for (const line of parts) {
      this.#lines.push(line);
      if (this.#lines.length > this.#max) this.#lines.shift();
      for (const l of this.#listeners) l(line);
    }
  }

  /** tail returns the last n lines. */
  tail(n = 60): string {
    return [...this.#lines.slice(-n), ...(this.#partial ? [this.#partial] : [])].join('\n');
  }

  /** onLine calls fn for every complete line from now on; the returned function stops it. */
  onLine(fn: (line: string) => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }
}

/** NsProcess is a process the harness started inside a namespace. */
export interface NsProcess {
  readonly name: string;
  readonly child: ChildProcess;
  readonly log: LogTail;
  /** exited resolves with the exit code (or the signal's name) once the process is gone. */
  readonly exited: Promise<number | string>;
}

/**
 * ProcessTracker starts processes in namespaces through `ip netns exec` (which
 * replaces itself with the program, so the child's PID is the program's) and
 * ends exactly those processes, by PID, when the cluster goes away.
 */
export class ProcessTracker {
  readonly #live = new Set<NsProcess>();

  /**
   * start runs argv inside ns. stdin stays open (servers and agents exit when it
   * closes); with `stdoutIsProtocol` stdout is left to the caller and only
   * stderr goes to the log.
   */
  start(name: string, ns: string, argv: readonly string[], opts: { stdoutIsProtocol?: boolean } = {}): NsProcess {
    const child = spawn('ip', ['netns', 'exec', ns, ...argv], { stdio: ['pipe', 'pipe', 'pipe'] });
    const log = new LogTail();
    if (!opts.stdoutIsProtocol) child.stdout?.setEncoding('utf8').on('data', (s: string) => log.push(s));
    child.stderr?.setEncoding('utf8').on('data', (s: string) => log.push(s));
    const exited = new Promise<number | string>((resolve) => {
      child.on('exit', (code, signal) => resolve(code ?? signal ?? 'unknown'));
      child.on('error', (err) => {
        log.push(`spawn failed: ${err.message}\n`);
        resolve('spawn-error');
      });
    });
    const p: NsProcess = { name, child, log, exited };
    this.#live.add(p);
    void exited.then(() => this.#live.delete(p));
    return p;
  }

  /** stop sends a signal to one process and waits for it to exit (SIGKILL after graceMs). */
  async stop(p: NsProcess, signal: NodeJS.Signals = 'SIGTERM', graceMs = 10_000): Promise<number | string> {
    if (p.child.exitCode !== null || p.child.signalCode !== null) return p.exited;
    p.child.kill(signal);
    const timer = setTimeout(() => p.child.kill('SIGKILL'), graceMs);
    try {
      return await p.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  /** stopAll kills every process still running (SIGKILL: teardown does not wait for grace). */
  async stopAll(): Promise<void> {
    await Promise.all([...this.#live].map((p) => this.stop(p, 'SIGKILL', 5_000)));
  }
}

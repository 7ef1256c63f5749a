import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';

/** CLI is the built daemon; tests that run it skip when it is not built (npm run build). */
export const CLI = join(import.meta.dirname, '../../dist/server/cli.js');
export const CLI_BUILT = existsSync(CLI);

/** freePort asks the kernel for a free loopback port. */
export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', () => resolve()));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

/** HttpAnswer is one GET: status and parsed JSON (or text) body; status 0 when nothing answered. */
export interface HttpAnswer {
  readonly status: number;
  readonly body: Record<string, unknown> | string;
}

/**
 * KproxyProcess is the real kproxy (dist/server/cli.js on this Node, which is
 * 24: the machine's bare `node` may be older) with --dry-run, its node servers
 * on free loopback ports: the whole start-up path, from the CLI to /readyz.
 */
export class KproxyProcess {
  readonly healthzPort: number;
  readonly metricsPort: number;
  readonly #child: ChildProcess;
  readonly #exited: Promise<number | null>;
  #out = '';

  private constructor(args: readonly string[], healthzPort: number, metricsPort: number) {
    this.healthzPort = healthzPort;
    this.metricsPort = metricsPort;
    this.#child = spawn(
      process.execPath,
      [CLI, '--dry-run', '--hostname-override', 'node-a', '--healthz-bind-address', `127.0.0.1:${healthzPort}`, '--metrics-bind-address', `127.0.0.1:${metricsPort}`, ...args],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    this.#child.stdout!.on('data', (d) => (this.#out += d));
    this.#child.stderr!.on('data', (d) => (this.#out += d));
    this.#exited = new Promise((resolve) => this.#child.on('exit', (code) => resolve(code)));
  }

  /** start runs kproxy with args and resolves once its healthz listener answers. */
  static async start(args: readonly string[]): Promise<KproxyProcess> {
    const p = new KproxyProcess(args, await freePort(), await freePort());
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (p.#child.exitCode !== null) throw new Error(`kproxy exited ${p.#child.exitCode}:\n${p.logs}`);
      if ((await p.get('/livez')).status !== 0) return p;
      if (Date.now() > deadline) {
        await p.stop();
        throw new Error(`kproxy's healthz listener did not answer in time:\n${p.logs}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  get logs(): string {
    return this.#out;
  }

  /** get asks the healthz listener (or, for /metrics, the metrics one). */
  async get(path: string): Promise<HttpAnswer> {
    const port = path === '/metrics' ? this.metricsPort : this.healthzPort;
    try {
      const res = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(5000) });
      const text = await res.text();
      return { status: res.status, body: (res.headers.get('content-type') ?? '').startsWith('application/json') ? (JSON.parse(text) as Record<string, unknown>) : text };
    } catch {
      return { status: 0, body: '' };
    }
  }

  /**
   * metric reads one sample of /metrics, null when absent: `series` is the name
   * with its labels as exposed, or a bare name that matches its one series whatever the labels.
   */
  async metric(series: string): Promise<number | null> {
    const { body } = await this.get('/metrics');
    const bare = !series.includes('{');
    const line = String(body)
      .split('\n')
      .find((l) => l.startsWith(series + ' ') || (bare && l.startsWith(series + '{')));
    return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : null;
  }

  /** stop ends kproxy with SIGTERM and waits for it (this process started it: by its PID only). */
  async stop(): Promise<number | null> {
    if (this.#child.exitCode === null && this.#child.signalCode === null) this.#child.kill('SIGTERM');
    return this.#exited;
  }
}

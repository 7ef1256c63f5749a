import { join } from 'node:path';
import type { ExecResult } from '../../../server/kernel/exec.ts';
import { waitFor } from '../../wait.ts';
import { nsExec } from './netns.ts';
import { LogTail, type NsProcess, type ProcessTracker } from './processes.ts';

/** CLI is the built daemon; the tier needs `npm run build` first (test/tiers.ts checks). */
export const CLI = join(import.meta.dirname, '../../../dist/server/cli.js');

export type Flavor = 'nft' | 'legacy';

/** HEALTHZ_PORT and METRICS_ADDRESS: where the daemon's node servers listen inside the node namespace. */
export const HEALTHZ_PORT = 10256;
export const METRICS_ADDRESS = '127.0.0.1:10249';

export interface KproxyOptions {
  /** manifests: the folder the file source follows. */
  manifests: string;
  flavor: Flavor;
  nodeName: string;
  clusterCIDR: string;
  extraArgs?: readonly string[];
}

/**
 * kproxyArgs are the flags every run in the tier uses. `--conntrack-max-per-core 0`
 * leaves nf_conntrack_max alone: it (and the conntrack hash size) is global to
 * the machine, and a test must never change the root namespace.
 */
export function kproxyArgs(o: KproxyOptions): string[] {
  return [
    '--source',
    `file:${o.manifests}`,
    '--hostname-override',
    o.nodeName,
    '--iptables-flavor',
    o.flavor,
    '--cluster-cidr',
    o.clusterCIDR,
    '--conntrack-max-per-core',
    '0',
    '--healthz-bind-address',
    `0.0.0.0:${HEALTHZ_PORT}`,
    '--metrics-bind-address',
    METRICS_ADDRESS,
    ...(o.extraArgs ?? []),
  ];
}

/**
 * Kproxy runs the real daemon inside a node namespace (`ip netns exec NODE
 * node dist/server/cli.js …`), always with this Node (process.execPath: the
 * system `node` is too old). One log collects every run on that node, so a
 * failure report shows the start, the restarts and the one-shot commands.
 */
export class Kproxy {
  readonly ns: string;
  readonly log = new LogTail(2000);
  readonly #tracker: ProcessTracker;
  #daemon: NsProcess | null = null;
  #runs = 0;

  constructor(ns: string, tracker: ProcessTracker) {
    this.ns = ns;
    this.#tracker = tracker;
  }

  get running(): boolean {
    return this.#daemon !== null;
  }

  /** pid: the running daemon's process ID (`ip netns exec` replaced itself with it), or null. */
  get pid(): number | null {
    return this.#daemon?.child.pid ?? null;
  }

  /** start launches the daemon and resolves after its first successful sync. */
  async start(o: KproxyOptions): Promise<void> {
    this.launch(o);
    await this.waitForFirstSync();
  }

  /** launch starts the daemon without waiting for anything (a start that must not sync). */
  launch(o: KproxyOptions): void {
    if (this.#daemon) throw new Error(`kproxy already runs in ${this.ns}`);
    const run = ++this.#runs;
    this.log.push(`----- daemon run ${run}: kproxy ${kproxyArgs(o).join(' ')}\n`);
    const p = this.#tracker.start(`kproxy in ${this.ns}`, this.ns, [process.execPath, CLI, ...kproxyArgs(o)]);
    p.log.onLine((line) => this.log.push(line + '\n'));
    this.#daemon = p;
    void p.exited.then((code) => {
      this.log.push(`----- daemon run ${run} exited: ${code}\n`);
      if (this.#daemon === p) this.#daemon = null;
    });
  }

  /**
   * waitForFirstSync resolves once the running daemon is ready: /readyz answers 200 once every
   * IP family's first sync has succeeded (the sync metric would be set by whichever family of a
   * dual-stack daemon synced first). On a loaded 2-core machine a dual-stack start once took over 20 s.
   */
  async waitForFirstSync(timeoutMs = 60_000): Promise<void> {
    await waitFor(
      async () => {
        if (!this.#daemon) throw new Error('the daemon exited');
        return (await this.curl(`http://127.0.0.1:${HEALTHZ_PORT}/readyz`)).status === 200;
      },
      { timeoutMs, intervalMs: 100, what: `kproxy's first sync in ${this.ns}` },
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n--- kproxy log ---\n${this.log.tail(40)}`);
    });
  }

  /** stop ends the daemon with SIGTERM (as kubelet would) and returns its exit code. */
  async stop(): Promise<number | string> {
    const p = this.#daemon;
    if (!p) return 'not running';
    return this.#tracker.stop(p, 'SIGTERM');
  }

  /** command runs kproxy to completion (--once, --cleanup, …) inside the node namespace. */
  async command(args: readonly string[]): Promise<ExecResult> {
    this.log.push(`----- kproxy ${args.join(' ')}\n`);
    const r = await nsExec(this.ns, [process.execPath, CLI, ...args], { timeoutMs: 60_000 });
    this.log.push(r.stderr + r.stdout + `----- exited ${r.code}\n`);
    return r;
  }

  /** curl fetches a URL from inside the node namespace: status, headers and body. */
  async curl(url: string): Promise<HttpAnswer> {
    return curlIn(this.ns, url);
  }

  /** lastSyncTimestamp reads kubeproxy_sync_proxy_rules_last_timestamp_seconds (0 before the first sync). */
  async lastSyncTimestamp(): Promise<number> {
    const { status, body } = await this.curl(`http://${METRICS_ADDRESS}/metrics`);
    if (status !== 200) return 0;
    const m = /^kubeproxy_sync_proxy_rules_last_timestamp_seconds(?:\{[^}]*\})? (\S+)$/m.exec(body);
    return m ? Number(m[1]) : 0;
  }
}

/** HttpAnswer is what curl got: status 0 means no HTTP answer at all (refused, timed out). */
export interface HttpAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
  error?: string;
}

/** curlIn runs curl inside a namespace (as an operator or a load balancer's probe would). */
export async function curlIn(ns: string, url: string, timeoutS = 2): Promise<HttpAnswer> {
  const r = await nsExec(ns, ['curl', '-sS', '-i', '--max-time', String(timeoutS), url]);
  const text = r.stdout.replace(/\r\n/g, '\n');
  const end = text.indexOf('\n\n');
  const status = /^HTTP\/[\d.]+ (\d{3})/.exec(text);
  if (r.code !== 0 || !status || end < 0) return { status: 0, headers: {}, body: '', error: r.stderr.trim() || `curl exited ${r.code}` };
  const headers: Record<string, string> = {};
  for (const line of text.slice(0, end).split('\n').slice(1)) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  return { status: Number(status[1]), headers, body: text.slice(end + 2) };
}

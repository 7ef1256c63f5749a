/**
 * api-churn measures network programming latency under churn through the
 * Kubernetes source, the production path: the daemon runs with --kubeconfig
 * (client-node informers, list then watch) against the fake API server,
 * which api-churn-driver.ts hosts inside the daemon's namespace and feeds.
 * The changes, their schedule and the latency attribution are churn.ts's;
 * what differs from the file source is the path a change takes (an API write
 * fanned out to the EndpointSlice watch, no file watch and no debounce).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { ChildProcess } from 'node:child_process';
import { measureChurnByMetrics, measureChurnWith, type ChurnResult } from './churn.ts';
import { Agent, Daemon, track } from './daemon.ts';
import { METRICS, NODE_NAME } from './full-sync.ts';
import { createNetns, deleteNetns, spawnInNetns } from './netns.ts';
import type { Flavor } from './replay.ts';
import type { Size } from './results.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const DRIVER = join(import.meta.dirname, 'api-churn-driver.ts');

/** DriverReady is the driver's first line: the server is loaded and the kubeconfig written. */
interface DriverReady {
  readonly kubeconfig: string;
  readonly url: string;
  readonly objects: number;
  readonly loadMs: number;
}

/** Churned is the driver's answer to a churn command. */
export interface Churned {
  readonly written: number[];
  /** lists / watches: API requests during the churn (relists or watch restarts would be measured with it). */
  readonly lists: number;
  readonly watches: number;
}

/** ApiChurnDriver talks to one api-churn-driver.ts process in a namespace, one command at a time. */
export class ApiChurnDriver {
  readonly child: ChildProcess;
  readonly ready: Promise<DriverReady>;
  #pending: { resolve: (v: Record<string, unknown>) => void; reject: (e: Error) => void } | null = null;
  #readyWaiter!: { resolve: (v: DriverReady) => void; reject: (e: Error) => void };

  constructor(ns: string, size: Size, nodeIP: string, churnTargets: number) {
    const args = [DRIVER, String(size.services), String(size.endpoints), NODE_NAME, nodeIP, String(churnTargets)];
    this.child = track(spawnInNetns(ns, process.execPath, args, { cwd: ROOT }));
    this.ready = new Promise((resolve, reject) => (this.#readyWaiter = { resolve, reject }));
    this.child.stderr!.on('data', (b: Buffer) => process.stderr.write(`[api driver ${ns}] ${b}`));
    this.child.on('exit', (code, sig) => {
      const err = new Error(`api churn driver exited (${code ?? sig})`);
      this.#readyWaiter.reject(err);
      this.#pending?.reject(err);
    });
    createInterface({ input: this.child.stdout! }).on('line', (line) => {
      const m = JSON.parse(line) as Record<string, unknown>;
      if (m.event === 'ready') return this.#readyWaiter.resolve(m as unknown as DriverReady);
      const p = this.#pending;
      this.#pending = null;
      if (m.event === 'error') p?.reject(new Error(`api churn driver: ${String(m.error)}`));
      else p?.resolve(m);
    });
  }

  /** churn makes the driver write `rate` EndpointSlice updates per second for `seconds`. */
  churn(rate: number, seconds: number): Promise<Churned> {
    if (this.#pending) throw new Error('api churn driver: one command at a time');
    return new Promise((resolve, reject) => {
      this.#pending = { resolve: (v) => resolve(v as unknown as Churned), reject };
      this.child.stdin!.write(JSON.stringify({ op: 'churn', rate, seconds }) + '\n');
    });
  }

  /** stop closes stdin (the driver stops its server and removes its kubeconfig), then ends it if it lingers. */
  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.stdin!.end();
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  }
}

export interface ApiChurnOptions {
  size: Size;
  flavor: Flavor;
  clusterCIDR: string;
  nodeIP: string;
  churnTargets: number;
  rate: number;
  seconds: number;
  timeoutMs?: number;
  /** mode: the proxy mode (default iptables). nftables mode has no dashboard yet: latencies come from /metrics per sync. */
  mode?: 'iptables' | 'nftables';
}

/** ApiChurnResult is churn through the API, with the start that preceded it. */
export interface ApiChurnResult extends ChurnResult {
  /** firstSyncMs: the first (full) sync's duration with the Kubernetes source. */
  readonly firstSyncMs: number;
  /** startToSyncedMs: daemon spawn to its first sync's end (lists of 10,000s of objects included). */
  readonly startToSyncedMs: number;
  /** apiLists / apiWatches: list and watch requests the server got during the churn (0 / 0 expected). */
  readonly apiLists: number;
  readonly apiWatches: number;
  /** maxSumErrorMs: nftables mode, the attribution's largest disagreement with the histogram's sum over a sync (churn.ts). */
  readonly maxSumErrorMs?: number;
}

/**
 * apiChurnRun starts, in a fresh namespace, the driver (fake API server with
 * the cluster), then kproxy with --kubeconfig, waits for its first sync, and
 * measures churn through the API the same way churn.ts does through files.
 */
export async function apiChurnRun(o: ApiChurnOptions): Promise<ApiChurnResult> {
  const ns = createNetns('api');
  // With the Kubernetes source the dashboard requires a bearer token (delegated auth otherwise asks the API
  // server for a TokenReview, which the fake does not serve): a token file of our own opens its history API.
  const tokenDir = mkdtempSync(join(tmpdir(), 'kproxy-bench-token-'));
  const token = randomBytes(16).toString('hex');
  writeFileSync(join(tokenDir, 'token'), token, { mode: 0o600 });
  let driver: ApiChurnDriver | null = null;
  let daemon: Daemon | null = null;
  let agent: Agent | null = null;
  try {
    driver = new ApiChurnDriver(ns, o.size, o.nodeIP, o.churnTargets);
    const ready = await driver.ready;
    const nft = o.mode === 'nftables';
    daemon = new Daemon({
      ns,
      kubeconfig: ready.kubeconfig,
      flavor: o.flavor,
      nodeName: NODE_NAME,
      clusterCIDR: o.clusterCIDR,
      extraArgs: nft ? ['--proxy-mode=nftables'] : [`--dashboard-token-file=${join(tokenDir, 'token')}`],
    });
    const first = await daemon.nextSync(0, o.timeoutMs ?? 600_000);
    if (!first.ok || !first.full) throw new Error(`first sync with the Kubernetes source ${first.ok ? 'was not full' : `failed: ${first.error}`}`);
    agent = new Agent(ns, token);
    await agent.get(`${METRICS}/metrics`); // the listener answers before the churn starts
    let churned: Churned | null = null;
    const d = driver;
    const drive = async () => {
      churned = await d.churn(o.rate, o.seconds);
      return churned.written;
    };
    const result = nft ? await measureChurnByMetrics({ daemon, agent }, o.rate, o.seconds, drive) : await measureChurnWith({ ns, daemon, agent, first }, o.rate, o.seconds, drive);
    const c = churned as Churned | null;
    return { ...result, firstSyncMs: first.ms, startToSyncedMs: first.at - daemon.startedAt, apiLists: c?.lists ?? NaN, apiWatches: c?.watches ?? NaN };
  } finally {
    agent?.stop();
    if (daemon) await daemon.stop();
    await driver?.stop();
    deleteNetns(ns);
    rmSync(tokenDir, { recursive: true, force: true });
  }
}

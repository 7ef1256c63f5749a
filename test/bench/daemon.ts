/**
 * daemon runs kproxy (the real CLI, on this Node: process.execPath) inside a
 * benchmark namespace and reads what it says about itself: its JSON log lines
 * (every sync logs seq, full/partial, ms, buildMs, applyMs), its /proc entries
 * (RSS, peak RSS, CPU time) and, through an agent in the same namespace, its
 * /metrics and dashboard API.
 */
import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { spawnInNetns } from './netns.ts';

const ROOT = join(import.meta.dirname, '..', '..');
/**
 * DIST_CLI: the built daemon, what the image and `npm run kproxy` run. The
 * benchmark runs it rather than server/cli.ts: Node's TypeScript stripping
 * alone would add about 20 MiB to every memory figure (run.ts checks the
 * build is not older than the sources).
 */
export const DIST_CLI = join(ROOT, 'dist', 'server', 'cli.js');
export const AGENT = join(import.meta.dirname, 'agent.ts');

/**
 * GC_ON_SIGUSR2 is preloaded into the benchmarked daemon (--import): SIGUSR2
 * runs a full garbage collection, so the benchmark can read the live heap and
 * the resident memory left after it, apart from garbage not yet collected.
 * Nothing else in the daemon changes: the collection comes from a context of
 * its own (V8's gc extension, turned on after start), so the daemon's
 * globalThis.gc is there only with the Node.js flags it runs with (as
 * shipped, --expose-gc). Plain JavaScript in a data: URL, not a .ts file: Node
 * would load its TypeScript stripping for it, about 20 MiB the daemon itself
 * never costs.
 */
export const GC_ON_SIGUSR2 = `data:text/javascript,${encodeURIComponent(
  "import v8 from 'node:v8'; import vm from 'node:vm'; v8.setFlagsFromString('--expose-gc'); const gc = vm.runInNewContext('gc'); process.on('SIGUSR2', () => { gc(); gc(); });",
)}`;

/** LogLine is one JSON log record of the daemon. */
export interface LogLine {
  ts: string;
  level: string;
  component: string;
  msg: string;
  [k: string]: unknown;
}

/** SyncLog is the daemon's own account of one sync (its "synced fully/partially" line). */
export interface SyncLog {
  /** family: the IP family whose proxier synced (a dual-stack daemon has one loop per family). */
  family: 'IPv4' | 'IPv6';
  seq: number;
  full: boolean;
  trigger: string;
  ms: number;
  buildMs: number;
  applyMs: number;
  lines: number;
  servicesChanged: number;
  ok: boolean;
  error?: string;
  /** at: when the line was read (epoch ms), a few ms after the sync ended. */
  at: number;
  /** finishedAt: the line's own timestamp (epoch ms), written as the sync ended. */
  finishedAt: number;
}

/** ProcStats are read from /proc/PID: memory in bytes, CPU in seconds. */
export interface ProcStats {
  rss: number;
  peakRss: number;
  cpuSelf: number;
  cpuChildren: number;
}

const TICK = 100; // USER_HZ on Linux

/** children: every process this module started, so an interrupted run can end them (by pid). */
const children = new Set<ChildProcess>();

/** killAll ends the daemons and agents still running (run.ts on SIGINT/SIGTERM). */
export function killAll(): void {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  children.clear();
}

/** track keeps a process this benchmark started, so killAll() ends it (the API churn driver uses it too). */
export function track(c: ChildProcess): ChildProcess {
  children.add(c);
  c.on('exit', () => children.delete(c));
  return c;
}

/** isSyncLine: the sync loop's line at the end of every sync, successful or not. */
function isSyncLine(l: LogLine): boolean {
  // kproxy/sync is the primary family's loop, kproxy/sync6 the IPv6 one of a dual-stack daemon.
  return /sync6?$/.test(l.component) && (l.msg === 'synced fully' || l.msg === 'synced partially' || l.msg.startsWith('sync failed'));
}

export function procStats(pid: number): ProcStats {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0) * 1024;
  // Fields after the command name (which may hold spaces), see proc(5): utime stime cutime cstime are 14-17.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const n = (i: number) => Number(f[i - 3]);
  return { rss: kb('VmRSS'), peakRss: kb('VmHWM'), cpuSelf: (n(14) + n(15)) / TICK, cpuChildren: (n(16) + n(17)) / TICK };
}

/** Agent talks to an agent.ts process (in some namespace) one command at a time. */
export class Agent {
  readonly child: ChildProcess;
  readonly wsMessages: { type: string; syncSeq: number; bytes: number; at: number; connectMs?: number }[] = [];
  #next = 1;
  readonly #waiting = new Map<number, (v: Record<string, unknown>) => void>();

  /** token: the dashboard's bearer token, sent with every GET (the Kubernetes source turns dashboard auth on). */
  readonly #token: string | undefined;

  constructor(ns: string, token?: string) {
    this.#token = token;
    this.child = track(spawnInNetns(ns, process.execPath, [AGENT], { cwd: ROOT }));
    this.child.stderr!.on('data', (b: Buffer) => process.stderr.write(`[agent ${ns}] ${b}`));
    createInterface({ input: this.child.stdout! }).on('line', (line) => {
      const m = JSON.parse(line) as Record<string, unknown>;
      if (m.id === 'ws') this.wsMessages.push(m as never);
      else this.#waiting.get(m.id as number)?.(m);
    });
  }

  call(cmd: Record<string, unknown>, timeoutMs = 120_000): Promise<Record<string, unknown>> {
    const id = this.#next++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`agent: ${String(cmd.op)} took over ${timeoutMs} ms`)), timeoutMs);
      this.#waiting.set(id, (v) => {
        clearTimeout(timer);
        this.#waiting.delete(id);
        if (v.ok === false) reject(new Error(`agent: ${String(cmd.op)} failed: ${String(v.error)}`));
        else resolve(v);
      });
      this.child.stdin!.write(JSON.stringify({ id, ...cmd }) + '\n');
    });
  }

  async get(url: string): Promise<string> {
    const r = await this.call({ op: 'get', url, ...(this.#token ? { token: this.#token } : {}) });
    if (r.status !== 200) throw new Error(`GET ${url}: ${String(r.status)} ${String(r.body).slice(0, 200)}`);
    return r.body as string;
  }

  stop(): void {
    this.child.stdin!.end();
    if (this.child.exitCode === null) this.child.kill('SIGTERM');
  }
}

/**
 * SHIPPED_NODE_FLAGS: the Node.js flags kproxy ships with (deploy/Dockerfile's
 * ENTRYPOINT, `npm run kproxy`), each for a measured gain (docs/performance.md):
 * V8's young generation capped at 2 MiB a semi-space (uncapped, a full sync
 * at 10,000 × 10 grows it to 128 MiB, which stays resident; 16 MiB, shipped
 * before, held 35-50 MiB more at rest for 3-7% less CPU in a full build), and
 * --expose-gc, for MemoryRelease's collection after a big full sync (300 →
 * 250 MiB at rest at 10,000 × 10). The benchmark measures kproxy as shipped
 * (test/unit/bench checks they agree).
 */
export const SHIPPED_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=2', '--expose-gc'];

/** benchNodeFlags: the shipped flags and KPROXY_BENCH_NODE_ARGS, extra Node.js flags for a bench's daemon (e.g. --cpu-prof). */
export function benchNodeFlags(): string[] {
  return [...SHIPPED_NODE_FLAGS, ...(process.env.KPROXY_BENCH_NODE_ARGS?.split(' ').filter(Boolean) ?? [])];
}

/**
 * SHIPPED_ENV: glibc malloc settings kproxy ships with (the image's ENV and
 * `npm run kproxy`): two arenas instead of up to eight per core (libuv's and
 * V8's threads each took one), and blocks of 1 MiB or more mapped on their
 * own and trimmed back, instead of glibc raising its mmap threshold after the
 * first big free (up to 32 MiB), so that the big buffers of a full sync and of
 * a kernel read stayed in the arenas. At 10,000 × 10 (legacy, idle 30 s
 * after the first sync, two runs each): 200-201 MiB against 236-238 MiB
 * resident, peak 357-359 against 373-377 MiB (docs/performance.md).
 */
export const SHIPPED_ENV: Readonly<Record<string, string>> = { MALLOC_ARENA_MAX: '2', MALLOC_MMAP_THRESHOLD_: '1048576', MALLOC_TRIM_THRESHOLD_: '1048576' };

export interface DaemonOptions {
  ns: string;
  /** manifests: the file source's folder (--source file:DIR); kubeconfig instead: the Kubernetes source. */
  manifests?: string;
  kubeconfig?: string;
  flavor: 'nft' | 'legacy' | 'auto';
  nodeName: string;
  /** clusterCIDR: --cluster-cidr (none when unset, as the example cluster runs). */
  clusterCIDR?: string;
  minSyncPeriod?: string;
  /** metrics: serve /metrics and the dashboard on 127.0.0.1:10249 (default true). */
  metrics?: boolean;
  extraArgs?: string[];
  /** entry: the CLI to run (default DIST_CLI, the built daemon). */
  entry?: string;
  /** nodeArgs: Node.js flags before the script (e.g. V8 heap sizes; default SHIPPED_NODE_FLAGS). */
  nodeArgs?: string[];
  /** shippedEnv: run with SHIPPED_ENV's malloc settings (default true; false: glibc's defaults). */
  shippedEnv?: boolean;
}

/** shippedCommand: how kproxy starts as shipped ("MALLOC_ARENA_MAX=2 … node --max-semi-space-size=2 --expose-gc"). */
export function shippedCommand(): string {
  return [...Object.entries(SHIPPED_ENV).map(([k, v]) => `${k}=${v}`), 'node', ...SHIPPED_NODE_FLAGS].join(' ');
}

/** daemonEnv: this process's environment, with the shipped malloc settings or without any MALLOC_ setting. */
export function daemonEnv(shipped: boolean): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MALLOC_')));
  return shipped ? { ...env, ...SHIPPED_ENV } : env;
}

/** Daemon is one running kproxy. */
export class Daemon {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly startedAt = Date.now();
  readonly logs: LogLine[] = [];
  readonly syncs: SyncLog[] = [];
  readonly errors: string[] = [];
  #waiters: { test: (l: LogLine) => boolean; resolve: (l: LogLine) => void }[] = [];
  #exited: Promise<number>;

  constructor(o: DaemonOptions) {
    const args = [
      // SIGUSR2 collects garbage: memory can be read without garbage in it.
      '--import',
      GC_ON_SIGUSR2,
      ...(o.nodeArgs ?? SHIPPED_NODE_FLAGS),
      o.entry ?? DIST_CLI,
      o.kubeconfig ? `--kubeconfig=${o.kubeconfig}` : `--source=file:${o.manifests}`,
      `--hostname-override=${o.nodeName}`,
      ...(o.clusterCIDR ? [`--cluster-cidr=${o.clusterCIDR}`] : []),
      `--iptables-flavor=${o.flavor}`,
      `--iptables-min-sync-period=${o.minSyncPeriod ?? '1s'}`,
      '--logging-format=json',
      '--healthz-bind-address=127.0.0.1:10256',
      `--metrics-bind-address=${o.metrics === false ? '' : '127.0.0.1:10249'}`,
      ...(o.extraArgs ?? []),
    ];
    this.child = track(spawnInNetns(o.ns, process.execPath, args, { cwd: ROOT, env: daemonEnv(o.shippedEnv ?? true) }));
    this.pid = this.child.pid!;
    this.child.stdout!.resume();
    createInterface({ input: this.child.stderr! }).on('line', (text) => this.#onLine(text));
    this.#exited = new Promise((resolve) => this.child.on('exit', (code, sig) => resolve(code ?? (sig ? 128 : 1))));
  }

  #onLine(text: string): void {
    let l: LogLine;
    try {
      l = JSON.parse(text) as LogLine;
    } catch {
      this.errors.push(text);
      return;
    }
    this.logs.push(l);
    if (this.logs.length > 5000) this.logs.splice(0, 1000);
    if (l.level === 'error') this.errors.push(`${l.component}: ${l.msg} ${String(l.err ?? '')}`);
    if (isSyncLine(l)) {
      const ok = l.level !== 'error';
      this.syncs.push({
        ok,
        ...(ok ? {} : { error: `${String(l.code)}: ${String(l.err)}` }),
        family: l.family === 'IPv6' ? 'IPv6' : 'IPv4',
        seq: l.seq as number,
        full: l.msg === 'synced fully' || !ok,
        trigger: l.trigger as string,
        ms: (l.ms as number) ?? NaN,
        buildMs: (l.buildMs as number) ?? NaN,
        applyMs: (l.applyMs as number) ?? NaN,
        lines: (l.lines as number) ?? 0,
        servicesChanged: (l.servicesChanged as number) ?? 0,
        at: Date.now(),
        finishedAt: Date.parse(l.ts),
      });
    }
    for (const w of [...this.#waiters]) {
      if (w.test(l)) {
        this.#waiters.splice(this.#waiters.indexOf(w), 1);
        w.resolve(l);
      }
    }
  }

  /** waitFor resolves with the first log line (from now on) that passes test. */
  waitFor(test: (l: LogLine) => boolean, timeoutMs: number, what: string): Promise<LogLine> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`kproxy: no "${what}" within ${timeoutMs} ms; last errors: ${this.errors.slice(-3).join(' | ')}`)), timeoutMs);
      const w = {
        test,
        resolve: (l: LogLine) => {
          clearTimeout(timer);
          resolve(l);
        },
      };
      this.#waiters.push(w);
      void this.#exited.then((code) => {
        if (!this.#waiters.includes(w)) return;
        clearTimeout(timer);
        reject(new Error(`kproxy exited (${code}) before "${what}"; last errors: ${this.errors.slice(-3).join(' | ')}`));
      });
    });
  }

  /**
   * nextSync waits for the next sync of a family after seq (any kind) and
   * returns it. The daemon syncs each IP family on its own (the synthetic
   * clusters are IPv4 unless dual-stack), so the family is part of the wait.
   */
  async nextSync(afterSeq: number, timeoutMs: number, family: SyncLog['family'] = 'IPv4'): Promise<SyncLog> {
    const match = (s: SyncLog) => s.seq > afterSeq && s.family === family;
    const have = this.syncs.find(match);
    if (have) return have;
    await this.waitFor((l) => isSyncLine(l) && (l.seq as number) > afterSeq && (l.family ?? 'IPv4') === family, timeoutMs, `${family} sync after ${afterSeq}`);
    return this.syncs.find(match)!;
  }

  get lastSeq(): number {
    return this.syncs.at(-1)?.seq ?? 0;
  }

  stats(): ProcStats {
    return procStats(this.pid);
  }

  /** collectGarbage asks the daemon for a full GC (GC_ON_SIGUSR2) and gives it time to finish. */
  async collectGarbage(): Promise<void> {
    process.kill(this.pid, 'SIGUSR2');
    await new Promise((r) => setTimeout(r, 1500));
  }

  async stop(): Promise<number> {
    if (this.child.exitCode === null) this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    const code = await this.#exited;
    clearTimeout(timer);
    return code;
  }
}

/**
 * nftables measures nftables mode (--proxy-mode nftables) on a synthetic
 * cluster (the generator of `npm run bench`), in private network namespaces
 * (kpt-bench-*, removed at the end and on interruption). Needs root and nft.
 * It is the `nftables` part of `npm run bench` (run.ts, beside the iptables
 * mode's figures), and runs alone too:
 *
 *   node test/bench/nftables.ts [--services 10000] [--endpoints 10] [--reps 3] [--backend netlink|nft] [--no-compare]
 *
 * The daemon writes with --nftables-backend (netlink by default, which the
 * result names with any transaction it handed to nft -f); then, unless
 * --no-compare, a daemon with the other writer takes over the same table and
 * makes the same kinds of partial syncs, so the two writers' figures come
 * from one run.
 * It measures, as the daemon logs them (durationMs = buildMs, kproxy's own
 * time, + applyMs, the kernel's `nft -f` transaction):
 * - the first full sync in a fresh namespace, and a bare `nft -f` of the same
 *   table in another fresh namespace, in the same run (kproxy's --dry-run
 *   writes that transaction: every command of the first sync, in a loadable
 *   order); their ratio;
 * - partial syncs: one service added, one endpoint changed, one service removed;
 * - a restart over the table already right: spawn → /readyz 200 polled from
 *   outside the daemon (an agent in the namespace), the first sync's lines, and
 *   whether the table changed at all (`nft -a list table`, rule handles
 *   included, before the stop and after the new daemon's first sync).
 * Network programming latency under churn through the Kubernetes source is
 * api-churn.ts's, with `mode: 'nftables'` (run.ts runs it with this part).
 * Timings on a shared machine are noisy; the lines written are not.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { generateCluster, POD_CIDR } from './cluster.ts';
import { Agent, Daemon, killAll, type SyncLog } from './daemon.ts';
import { writeAtomically, writeManifests, writeSlice } from './manifests.ts';
import { createNetns, deleteNetns, inNetns, removeAll } from './netns.ts';
import { movedSlice } from './partial-sync.ts';
import type { Size } from './results.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const NODE_NAME = 'bench-node';
const NODE_IP = '10.250.0.2';
/** HEALTHZ: the daemon's healthz listener (daemon.ts binds it in every benchmark daemon). */
const HEALTHZ = 'http://127.0.0.1:10256';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** NftSync is one sync as the daemon logged it. */
export interface NftSync {
  readonly ms: number;
  readonly buildMs: number;
  readonly applyMs: number;
  readonly lines: number;
  readonly full: boolean;
}

export type NftChange = 'add' | 'endpoint' | 'remove';

export interface NftablesRun {
  readonly size: Size;
  /** writer: how the daemon wrote the kernel (its start-up log: netlink with nft -f as fallback, or nft -f); absent in runs before it was recorded. */
  readonly writer?: string;
  /** fallbacks: transactions the netlink writer handed to nft -f, and why (its log). */
  readonly fallbacks?: readonly string[];
  readonly first: NftSync;
  /** spawnToSyncedMs: daemon spawn to its first sync's log line (Node start, manifests read, the sync). */
  readonly spawnToSyncedMs: number;
  /** bareNftMs: `nft -f` of the same transaction (bareCommands commands) in a fresh namespace, once, same run. */
  readonly bareNftMs: number;
  readonly bareCommands: number;
  /** ratio: first.ms / bareNftMs. */
  readonly ratio: number;
  readonly partial: readonly (NftSync & { kind: NftChange })[];
  readonly restart: {
    /** readyMs: spawn → the first /readyz 200, polled from an agent in the namespace every ~10 ms. */
    readonly readyMs: number;
    readonly spawnToSyncedMs: number;
    readonly sync: NftSync;
    /** tableUnchanged: `nft -a list table ip kube-proxy` is the same text (rule handles included) before and after. */
    readonly tableUnchanged: boolean;
  };
  /**
   * other: the same partial syncs in the same run by a daemon with the other
   * writer (--nftables-backend), started over the table the first left.
   */
  readonly other?: { readonly writer: string; readonly partial: readonly (NftSync & { kind: NftChange })[] };
}

const figures = (s: SyncLog): NftSync => ({ ms: s.ms, buildMs: s.buildMs, applyMs: s.applyMs, lines: s.lines, full: s.full });

async function firstSync(d: Daemon): Promise<SyncLog> {
  const s = await d.nextSync(0, 900_000);
  if (!s.ok) throw new Error(`nftables mode: first sync failed: ${s.error}`);
  return s;
}

async function nextChange(d: Daemon, after: number): Promise<SyncLog> {
  let s = await d.nextSync(after, 120_000);
  while (s.ok && s.servicesChanged === 0) s = await d.nextSync(s.seq, 120_000);
  if (!s.ok) throw new Error(`nftables mode: sync failed: ${s.error}`);
  return s;
}

/**
 * dryRunTransaction: the commands kproxy's --dry-run sends for this cluster's first sync (its simulated nft
 * applies exactly them). Its stdout goes to a file: through a pipe, the end of tens of MB can be lost when
 * the process exits.
 */
function dryRunTransaction(manifests: string, dir: string): string[] {
  const file = join(dir, 'dry-run.out');
  const fd = openSync(file, 'w');
  try {
    execFileSync(
      process.execPath,
      [
        join(ROOT, 'server', 'cli.ts'),
        '--once',
        '--dry-run',
        `--source=file:${manifests}`,
        `--hostname-override=${NODE_NAME}`,
        `--cluster-cidr=${POD_CIDR}`,
        '--proxy-mode=nftables',
        '--logging-format=json',
      ],
      { cwd: ROOT, stdio: ['ignore', fd, 'ignore'] },
    );
  } finally {
    closeSync(fd);
  }
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('add '));
}

/** bareNft times one `nft -f -` of a transaction in a fresh namespace. */
function bareNft(text: string): number {
  const ns = createNetns('nft-bare');
  try {
    const t0 = performance.now();
    execFileSync('ip', ['netns', 'exec', ns, 'nft', '-f', '-'], { input: text, maxBuffer: 1 << 30 });
    return performance.now() - t0;
  } finally {
    deleteNetns(ns);
  }
}

const listTable = (ns: string) => inNetns(ns, 'nft', ['-a', 'list', 'table', 'ip', 'kube-proxy']);

/** waitReady polls /readyz through the agent until it answers 200 and returns when it did (epoch ms). */
async function waitReady(agent: Agent, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      const r = await agent.call({ op: 'get', url: `${HEALTHZ}/readyz` }, 10_000);
      if (r.status === 200) return Date.now();
    } catch {
      // Not listening yet.
    }
    await sleep(10);
  }
  throw new Error(`nftables mode: no /readyz 200 within ${timeoutMs} ms of the restart`);
}

export interface NftablesOptions {
  size: Size;
  workDir: string;
  /** reps: rounds of one service added, one endpoint changed, one service removed. */
  reps: number;
  /** backend: --nftables-backend of the measured daemon (default netlink). */
  backend?: 'netlink' | 'nft';
  /** compare: then measure the partial syncs with the other writer too (default true). */
  compare?: boolean;
  log?: (msg: string) => void;
}

/** writerOf: the writer a daemon logged at start ("using nftables … writer=…"). */
function writerOf(d: Daemon): string {
  return String(d.logs.find((l) => l.msg === 'using nftables')?.writer ?? 'unknown');
}

/** fallbacksOf: the transactions the netlink writer handed to nft -f, with the reason (logged once per reason). */
function fallbacksOf(d: Daemon): string[] {
  return d.logs.filter((l) => l.msg === 'writing this transaction with nft -f').map((l) => String(l.why));
}

/** nftablesRun measures nftables mode once at a size (see the file's comment). */
export async function nftablesRun(o: NftablesOptions): Promise<NftablesRun> {
  const log = o.log ?? (() => {});
  const cluster = generateCluster({ services: o.size.services, endpointsPerService: o.size.endpoints, nodeName: NODE_NAME, nodeIP: NODE_IP });
  const dir = join(o.workDir, `nft-${o.size.services}x${o.size.endpoints}`);
  mkdirSync(dir, { recursive: true });
  const m = writeManifests(cluster, join(dir, 'cluster'), 20);
  const backend = o.backend ?? 'netlink';
  const other = backend === 'netlink' ? 'nft' : 'netlink';
  const daemonOpts = { manifests: m.dir, flavor: 'auto' as const, nodeName: NODE_NAME, clusterCIDR: POD_CIDR, metrics: false, extraArgs: ['--proxy-mode=nftables', `--nftables-backend=${backend}`] };
  const ns = createNetns('nft');
  let agent: Agent | null = null;
  const daemons: Daemon[] = [];
  try {
    const d = new Daemon({ ns, ...daemonOpts });
    daemons.push(d);
    const bareLoad = () => {
      const commands = dryRunTransaction(m.dir, dir);
      const ms = bareNft(commands.join('\n') + '\n');
      log(`bare nft -f of the same ${commands.length} commands: ${Math.round(ms)} ms`);
      return { commands, ms };
    };
    let first: SyncLog;
    try {
      first = await firstSync(d);
    } catch (err) {
      // What the kernel alone takes for that transaction says whether kproxy or nft is the slow part.
      await d.stop();
      const { commands, ms } = bareLoad();
      throw new Error(`${err instanceof Error ? err.message : String(err)} (a bare nft -f of the same ${commands.length} commands took ${Math.round(ms)} ms)`, { cause: err });
    }
    if (!first.full) throw new Error('nftables mode: the first sync in a fresh namespace was not full');
    log(`first full sync ${Math.round(first.ms)} ms (kernel ${Math.round(first.applyMs)}), ${first.lines} lines; writer: ${writerOf(d)}`);
    const { commands, ms: bare } = bareLoad();

    const targets = [...m.churn.keys()];
    /** partials: reps rounds of one service added, one endpoint changed, one service removed (extra-N, N from first). */
    const partials = async (d: Daemon, first: number): Promise<(NftSync & { kind: NftChange })[]> => {
      const partial: (NftSync & { kind: NftChange })[] = [];
      for (let rep = first; rep < first + o.reps; rep++) {
        const name = `extra-${rep}.json`;
        const svc = {
          apiVersion: 'v1',
          kind: 'Service',
          metadata: { name: `extra-${rep}`, namespace: 'bench-extra' },
          spec: { clusterIP: `10.111.0.${rep + 1}`, ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 8080 }] },
        };
        const slice = {
          apiVersion: 'discovery.k8s.io/v1',
          kind: 'EndpointSlice',
          metadata: { name: `extra-${rep}-a1b2c`, namespace: 'bench-extra', labels: { 'kubernetes.io/service-name': `extra-${rep}` } },
          addressType: 'IPv4',
          ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
          endpoints: Array.from({ length: o.size.endpoints }, (_, e) => ({ addresses: [`10.127.${rep}.${e + 1}`], conditions: { ready: true }, nodeName: `node-${e + 1}` })),
        };
        const change = async (kind: NftChange, make: () => void) => {
          await sleep(1300); // beyond minSyncPeriod: each change gets a sync of its own
          const after = d.lastSeq;
          make();
          const s = await nextChange(d, after);
          partial.push({ kind, ...figures(s) });
        };
        await change('add', () => writeAtomically(m.dir, name, JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [svc, slice] })));
        const t = targets[rep % targets.length];
        await change('endpoint', () => writeSlice(m, t, movedSlice(cluster, t, Date.now())));
        await change('remove', () => unlinkSync(join(m.dir, name)));
      }
      return partial;
    };
    const partial = await partials(d, 0);
    log(`partial syncs: ${partial.map((p) => `${p.kind} ${Math.round(p.ms)} ms (kernel ${Math.round(p.applyMs)})`).join(', ')}`);

    // Restart over the table already right: stale chains of the removals are gone after their delay.
    await sleep(2500);
    agent = new Agent(ns);
    await agent.call({ op: 'get', url: `${HEALTHZ}/readyz` });
    const before = listTable(ns);
    await d.stop();
    const again = new Daemon({ ns, ...daemonOpts });
    daemons.push(again);
    const readyAt = await waitReady(agent, 900_000);
    const restart = await firstSync(again);
    const after = listTable(ns);
    // KPT_BENCH_KEEP=DIR keeps both listings (rule handles included) to see what a restart rewrote.
    if (process.env.KPT_BENCH_KEEP) {
      writeFileSync(join(process.env.KPT_BENCH_KEEP, 'before-restart.nft'), before);
      writeFileSync(join(process.env.KPT_BENCH_KEEP, 'after-restart.nft'), after);
    }
    await again.stop();
    const result: NftablesRun = {
      size: o.size,
      writer: writerOf(d),
      fallbacks: fallbacksOf(d),
      first: figures(first),
      spawnToSyncedMs: first.finishedAt - d.startedAt,
      bareNftMs: bare,
      bareCommands: commands.length,
      ratio: first.ms / bare,
      partial,
      restart: { readyMs: readyAt - again.startedAt, spawnToSyncedMs: restart.finishedAt - again.startedAt, sync: figures(restart), tableUnchanged: before === after },
    };
    log(`restart: /readyz 200 ${result.restart.readyMs} ms after spawn; first sync ${restart.lines} lines, table ${result.restart.tableUnchanged ? 'unchanged' : 'CHANGED'}`);
    if (o.compare === false) return result;
    // The other writer, same table, same kind of changes: its partial syncs beside these.
    const cmp = new Daemon({ ns, ...daemonOpts, extraArgs: ['--proxy-mode=nftables', `--nftables-backend=${other}`] });
    daemons.push(cmp);
    const cmpFirst = await firstSync(cmp);
    if (!cmpFirst.ok) throw new Error(`nftables mode (${other} writer): the first sync over the table failed`);
    const cmpPartial = await partials(cmp, 100);
    await cmp.stop();
    log(`${other} writer: partial syncs ${cmpPartial.map((p) => `${p.kind} ${Math.round(p.ms)} ms (kernel ${Math.round(p.applyMs)})`).join(', ')}`);
    return { ...result, other: { writer: writerOf(cmp), partial: cmpPartial } };
  } finally {
    agent?.stop();
    for (const x of daemons) await x.stop();
    deleteNetns(ns);
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  const { values: opts } = parseArgs({
    options: {
      services: { type: 'string', default: '10000' },
      endpoints: { type: 'string', default: '10' },
      reps: { type: 'string', default: '3' },
      backend: { type: 'string', default: 'netlink' },
      compare: { type: 'boolean', default: true },
    },
  });
  const onSignal = () => {
    killAll();
    removeAll();
    process.exit(130);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const workDir = join(tmpdir(), `kpt-bench-nft-${process.pid}`);
  try {
    const r = await nftablesRun({
      size: { services: Number(opts.services), endpoints: Number(opts.endpoints) },
      workDir,
      reps: Number(opts.reps),
      backend: opts.backend === 'nft' ? 'nft' : 'netlink',
      compare: opts.compare,
      log: (m) => console.log(m),
    });
    console.log(JSON.stringify(r, null, 1));
  } catch (err) {
    console.error(err);
    process.exitCode = 1;
  } finally {
    killAll();
    removeAll();
    rmSync(workDir, { recursive: true, force: true });
  }
}

/**
 * full-sync measures kproxy's first sync after start in a fresh namespace, as
 * the daemon logs it (durationMs split into buildMs, kproxy's own time, and
 * applyMs, the kernel's: iptables-save, jump rules, iptables-restore), then
 * replays the very restore input it wrote with a bare iptables-restore in
 * another fresh namespace, in the same run: kproxy-total / bare-restore.
 */
import { Agent, Daemon, type SyncLog } from './daemon.ts';
import { createNetns, deleteNetns } from './netns.ts';
import { replayFresh, type Flavor } from './replay.ts';
import type { SyntheticCluster } from './cluster.ts';
import type { ManifestDir } from './manifests.ts';
import { measurePartial } from './partial-sync.ts';
import { MiB, summarize } from './stats.ts';

export const NODE_NAME = 'bench-node';
export const METRICS = 'http://127.0.0.1:10249';

export interface FullSyncRun {
  readonly totalMs: number;
  readonly buildMs: number;
  readonly applyMs: number;
  /** ownShare: buildMs / totalMs. */
  readonly ownShare: number;
  /** startToSyncedMs: process spawn to the end of the first sync (Node start, manifest parsing, the sync). */
  readonly startToSyncedMs: number;
  readonly bareRestoreMs: number;
  /** ratio: totalMs / bareRestoreMs, the headline. */
  readonly ratio: number;
  readonly lines: number;
  readonly inputBytes: number;
  readonly rules: number;
  /** CPU seconds spent by kproxy itself, and by its children (iptables processes), during the sync. */
  readonly cpuSelfS: number;
  readonly cpuChildrenS: number;
  /** rssAtSyncMiB: RSS when the sync ended; peakRssMiB: VmHWM then (start-up and the whole sync). */
  readonly rssAtSyncMiB: number;
  readonly peakRssMiB: number;
  /** steady: a few seconds later, once the dashboard and observers settled. */
  readonly steadyRssMiB: number;
  readonly steadyHeapMiB: number;
  readonly steadyPeakRssMiB: number;
  /** afterGc: then after a full garbage collection: the live heap, and what RSS stays. */
  readonly afterGcRssMiB: number;
  readonly afterGcHeapMiB: number;
  /**
   * afterWork: memory once the measurements on the running daemon (then: partial
   * syncs, churn, dashboard) are over and it idled a few seconds: what a node that
   * has seen changes holds, rather than one fresh from its first sync.
   */
  afterWork?: { readonly rssMiB: number; readonly peakRssMiB: number; readonly afterGcRssMiB: number; readonly afterGcHeapMiB: number };
}

/** RunContext is handed to extra measurements made on a daemon after its first sync. */
export interface RunContext {
  readonly ns: string;
  readonly daemon: Daemon;
  readonly agent: Agent;
  readonly first: SyncLog;
}

export interface FullSyncOptions {
  manifests: string;
  flavor: Flavor;
  clusterCIDR: string;
  /** settleMs: wait before the steady memory sample. */
  settleMs?: number;
  /** timeoutMs for the first sync. */
  timeoutMs?: number;
  /** then: more measurements on the running daemon (partial syncs, churn, dashboard). */
  then?: (ctx: RunContext) => Promise<void>;
  /** nodeArgs: Node.js flags for the daemon (V8 heap sizes, to try them). */
  nodeArgs?: string[];
  /** prepare: set up the namespace before kproxy starts (the data plane's links). */
  prepare?: (ns: string) => Promise<void> | void;
}

/** metricValue reads one unlabelled sample from Prometheus text. */
export function metricValue(text: string, name: string): number {
  const m = new RegExp(`^${name} ([0-9.e+-]+)$`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
}

/**
 * memorySample waits (the daemon settles), reads its memory, collects its
 * garbage and reads it again; the heap comes from /metrics when an agent can
 * reach the listener (NaN without one).
 */
export async function memorySample(d: Daemon, waitMs: number, agent: Agent | null) {
  const heapMiB = async () => (agent ? metricValue(await agent.get(`${METRICS}/metrics`), 'nodejs_heap_size_used_bytes') / MiB : NaN);
  await new Promise((r) => setTimeout(r, waitMs));
  const before = d.stats();
  const heapBefore = await heapMiB();
  await d.collectGarbage();
  const afterGc = d.stats();
  return { before, heapBefore, afterGc, heapAfterGc: await heapMiB() };
}

export async function fullSyncRun(o: FullSyncOptions): Promise<FullSyncRun> {
  const ns = createNetns('node');
  let daemon: Daemon | null = null;
  let agent: Agent | null = null;
  try {
    await o.prepare?.(ns);
    daemon = new Daemon({ ns, manifests: o.manifests, flavor: o.flavor, nodeName: NODE_NAME, clusterCIDR: o.clusterCIDR, nodeArgs: o.nodeArgs });
    const d = daemon;
    let cpuAtStart = { cpuSelf: 0, cpuChildren: 0 };
    void d
      .waitFor((l) => l.msg.startsWith('sources synced'), o.timeoutMs ?? 600_000, 'sources synced')
      .then(
        () => (cpuAtStart = d.stats()),
        () => {},
      );
    const first = await d.nextSync(0, o.timeoutMs ?? 600_000);
    const atSync = d.stats();
    if (!first.ok || !first.full) throw new Error(`first sync ${first.ok ? 'was not full' : `failed: ${first.error}`}`);
    agent = new Agent(ns);
    const input = await agent.get(`${METRICS}/api/v1/restore-input/last?family=IPv4`);
    const status = JSON.parse(await agent.get(`${METRICS}/api/v1/status`)) as { overview: { counts: { rulesByTable: Record<string, number> } } };
    // The IPv4 family's rules (the daemon is dual-stack: ip6tables holds its base chains, shown as ip6-…).
    const rules = Object.entries(status.overview.counts.rulesByTable)
      .filter(([t]) => !t.startsWith('ip6-'))
      .reduce((a, [, b]) => a + b, 0);
    const bare = replayFresh(o.flavor, input);
    const { before: steady, heapBefore, afterGc, heapAfterGc } = await memorySample(d, o.settleMs ?? 5000, agent);
    const run: FullSyncRun = {
      totalMs: first.ms,
      buildMs: first.buildMs,
      applyMs: first.applyMs,
      ownShare: first.buildMs / first.ms,
      startToSyncedMs: first.at - d.startedAt,
      bareRestoreMs: bare,
      ratio: first.ms / bare,
      lines: first.lines,
      inputBytes: Buffer.byteLength(input),
      rules,
      cpuSelfS: atSync.cpuSelf - cpuAtStart.cpuSelf,
      cpuChildrenS: atSync.cpuChildren - cpuAtStart.cpuChildren,
      rssAtSyncMiB: atSync.rss / MiB,
      peakRssMiB: atSync.peakRss / MiB,
      steadyRssMiB: steady.rss / MiB,
      steadyHeapMiB: heapBefore,
      steadyPeakRssMiB: steady.peakRss / MiB,
      afterGcRssMiB: afterGc.rss / MiB,
      afterGcHeapMiB: heapAfterGc,
    };
    if (o.then) {
      await o.then({ ns, daemon: d, agent, first });
      // The dashboard drops its parsed tables after a minute without viewers; the sample waits past that.
      const w = await memorySample(d, 65_000, agent);
      run.afterWork = { rssMiB: w.before.rss / MiB, peakRssMiB: w.afterGc.peakRss / MiB, afterGcRssMiB: w.afterGc.rss / MiB, afterGcHeapMiB: w.heapAfterGc };
    }
    return run;
  } finally {
    agent?.stop();
    if (daemon) await daemon.stop();
    deleteNetns(ns);
  }
}

/** MemoryOnly is a daemon's memory with a part of it switched off (the metrics listener, hence the dashboard). */
export interface MemoryOnly {
  readonly what: string;
  /** syncMs / buildMs: the first sync's total and kproxy's own part (what a V8 flag may cost). */
  readonly syncMs?: number;
  readonly buildMs?: number;
  /** partialMs / partialBuildMs: medians over partial syncs on the same daemon (when asked: partial). */
  readonly partialMs?: number;
  readonly partialBuildMs?: number;
  readonly rssAtSyncMiB: number;
  readonly peakRssMiB: number;
  readonly steadyRssMiB: number;
  readonly afterGcRssMiB: number;
}

/**
 * memoryVariant runs kproxy with something changed (metrics: false is
 * --metrics-bind-address "", so no /metrics and no dashboard; nodeArgs are
 * V8 flags) and reads its memory.
 */
export async function memoryVariant(
  o: Pick<FullSyncOptions, 'manifests' | 'flavor' | 'clusterCIDR' | 'settleMs'> & {
    what: string;
    metrics?: boolean;
    nodeArgs?: string[];
    /** shippedEnv: false runs with glibc's malloc defaults (SHIPPED_ENV left out). */
    shippedEnv?: boolean;
    /** partial: after the memory samples, partial syncs on the same daemon (partial-sync.ts; needs the metrics listener). */
    partial?: { cluster: SyntheticCluster; manifests: ManifestDir; reps: number };
  },
): Promise<MemoryOnly> {
  const ns = createNetns('node');
  const d = new Daemon({ ns, manifests: o.manifests, flavor: o.flavor, nodeName: NODE_NAME, clusterCIDR: o.clusterCIDR, metrics: o.metrics, nodeArgs: o.nodeArgs, shippedEnv: o.shippedEnv });
  let agent: Agent | null = null;
  try {
    const first = await d.nextSync(0, 1_800_000);
    if (!first.ok) throw new Error(`first sync failed: ${first.error}`);
    const atSync = d.stats();
    const { before: steady, afterGc } = await memorySample(d, o.settleMs ?? 5000, null);
    let partial: Pick<MemoryOnly, 'partialMs' | 'partialBuildMs'> = {};
    if (o.partial) {
      agent = new Agent(ns);
      const samples = await measurePartial({ ns, daemon: d, agent, first }, o.partial.cluster, o.partial.manifests, o.partial.reps);
      partial = { partialMs: summarize(samples.map((x) => x.ms)).median, partialBuildMs: summarize(samples.map((x) => x.buildMs)).median };
    }
    return {
      what: o.what,
      syncMs: first.ms,
      buildMs: first.buildMs,
      ...partial,
      rssAtSyncMiB: atSync.rss / MiB,
      peakRssMiB: steady.peakRss / MiB,
      steadyRssMiB: steady.rss / MiB,
      afterGcRssMiB: afterGc.rss / MiB,
    };
  } finally {
    agent?.stop();
    await d.stop();
    deleteNetns(ns);
  }
}

/**
 * churn measures network programming latency under a steady stream of
 * endpoint changes through the file source (or, api-churn.ts, through the
 * Kubernetes API): `rate` EndpointSlice updates per
 * second for `seconds`, round-robin over the churn targets, each stamped with
 * the endpoints controller's last-change-trigger-time annotation (ms). The
 * daemon records, per sync, the largest latency it programmed (finishedAt -
 * trigger time, the dashboard's sync history); since the changes arrive in
 * order, each sync programmed the changes from its oldest one to the next
 * sync's oldest, which gives every change's own latency.
 *
 * A daemon without the dashboard (nftables mode, for now) has no sync history
 * to ask: measureChurnByMetrics reads, after each sync line, the network
 * programming histogram of /metrics instead. The growth of its count is how
 * many changes that sync programmed (in order, so which ones); the growth of
 * its sum checks the attribution to the ms.
 */
import type { SyntheticCluster } from './cluster.ts';
import type { Agent, Daemon } from './daemon.ts';
import { METRICS, metricValue, type RunContext } from './full-sync.ts';
import { writeSlice, type ManifestDir } from './manifests.ts';
import { movedSlice, syncRows } from './partial-sync.ts';
import { percentiles, type Percentiles } from './stats.ts';

export interface ChurnResult {
  readonly rate: number;
  readonly seconds: number;
  readonly changes: number;
  /** attributed: changes matched to the sync that programmed them. */
  readonly attributed: number;
  /** metricCount: kubeproxy_network_programming_duration_seconds observations during the run. */
  readonly metricCount: number;
  readonly latencyMs: Percentiles;
  readonly syncs: number;
  readonly syncMs: Percentiles;
  /** cpuShare: kproxy's CPU time over the run's wall time (1 = one core). */
  readonly cpuShare: number;
  readonly failedSyncs: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** ChurnSyncRow is the part of a dashboard sync history row attribution needs. */
export interface ChurnSyncRow {
  readonly seq: number;
  readonly finishedAt: number;
  readonly programmingMs: number | null;
  readonly ok: boolean;
}

/**
 * attributeLatencies gives each change (written[i], epoch ms, in order) its
 * latency: the finish of the sync that programmed it minus its time. A sync
 * reports its largest latency, i.e. its oldest change (finishedAt -
 * programmingMs, to the ms); it programmed every change from that one to the
 * next sync's oldest. Changes no sync claims are left out.
 */
export function attributeLatencies(written: readonly number[], rows: readonly ChurnSyncRow[]): number[] {
  const syncs = rows.filter((r) => r.ok && r.programmingMs !== null).sort((a, b) => a.seq - b.seq);
  const firstIndex = syncs.map((r) => {
    const t = r.finishedAt - r.programmingMs!;
    let best = -1;
    for (let i = 0; i < written.length; i++) {
      if (Math.abs(written[i] - t) <= 1 && (best < 0 || Math.abs(written[i] - t) < Math.abs(written[best] - t))) best = i;
    }
    return best;
  });
  const out: number[] = [];
  for (let s = 0; s < syncs.length; s++) {
    const from = firstIndex[s];
    if (from < 0) continue;
    const next = firstIndex.slice(s + 1).find((i) => i > from) ?? written.length;
    for (let i = from; i < next; i++) out.push(syncs[s].finishedAt - written[i]);
  }
  return out;
}

/** ChurnTimer is the time the churn schedule runs on (real, or a fake in unit tests). */
export interface ChurnTimer {
  now(): number;
  sleep(ms: number): Promise<void>;
}

const realTimer: ChurnTimer = { now: () => Date.now(), sleep };

/**
 * driveChurn makes `rate` changes per second for `seconds`: change i is due
 * at start + i/rate s (late ones go at once, never skipped), write(i, at)
 * makes it, stamped `at`; returns the write times in order. Both sources use
 * it: the file source's driver here, the API source's in api-churn-driver.ts.
 */
export async function driveChurn(rate: number, seconds: number, write: (i: number, at: number) => void, timer: ChurnTimer = realTimer): Promise<number[]> {
  const written: number[] = [];
  const t0 = timer.now();
  const n = Math.round(rate * seconds);
  for (let i = 0; i < n; i++) {
    const wait = t0 + (i * 1000) / rate - timer.now();
    if (wait > 0) await timer.sleep(wait);
    const at = timer.now();
    write(i, at);
    written.push(at);
  }
  return written;
}

/**
 * measureChurnWith runs drive (which makes the changes and returns their
 * times, epoch ms, in order) against the daemon of ctx and attributes each
 * change's latency from the daemon's sync history.
 */
export async function measureChurnWith(ctx: RunContext, rate: number, seconds: number, drive: () => Promise<readonly number[]>): Promise<ChurnResult> {
  // The histogram appears with its first observation (as kube-proxy's): absent counts as none yet.
  const observations = (text: string) => {
    const v = metricValue(text, 'kubeproxy_network_programming_duration_seconds_count');
    return Number.isNaN(v) ? 0 : v;
  };
  const metricsBefore = observations(await ctx.agent.get(`${METRICS}/metrics`));
  const seqBefore = ctx.daemon.lastSeq;
  const cpu0 = ctx.daemon.stats().cpuSelf;
  const t0 = Date.now();
  const written = await drive();
  const wall = (Date.now() - t0) / 1000;
  const cpu1 = ctx.daemon.stats().cpuSelf;
  await sleep(3000); // the last changes' syncs
  const rows = (await syncRows(ctx)).filter((r) => r.seq > seqBefore);
  const metricsAfter = observations(await ctx.agent.get(`${METRICS}/metrics`));
  const latencies = attributeLatencies(written, rows);
  return {
    rate,
    seconds,
    changes: written.length,
    attributed: latencies.length,
    metricCount: metricsAfter - metricsBefore,
    latencyMs: percentiles(latencies),
    syncs: rows.length,
    syncMs: percentiles(rows.map((r) => r.finishedAt - r.startedAt)),
    cpuShare: (cpu1 - cpu0) / wall,
    failedSyncs: rows.filter((r) => !r.ok).length,
  };
}

/** measureChurn drives the churn through the file source: each change rewrites one churn target's slice file. */
export async function measureChurn(ctx: RunContext, c: SyntheticCluster, m: ManifestDir, rate: number, seconds: number): Promise<ChurnResult> {
  const targets = [...m.churn.keys()];
  return measureChurnWith(ctx, rate, seconds, () =>
    driveChurn(rate, seconds, (i, at) => {
      const index = targets[i % targets.length];
      writeSlice(m, index, movedSlice(c, index, at));
    }),
  );
}

const HISTOGRAM = 'kubeproxy_network_programming_duration_seconds';

/** metricTotal sums a metric's samples over all its label sets (NaN when it has none). */
export function metricTotal(text: string, name: string): number {
  let total = NaN;
  for (const m of text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+-]+)$`, 'gm'))) total = (Number.isNaN(total) ? 0 : total) + Number(m[1]);
  return total;
}

/** CountedSync is one sync seen from outside: its end (its log line's time) and the histogram's growth over it. */
export interface CountedSync {
  readonly seq: number;
  readonly finishedAt: number;
  readonly ok: boolean;
  /** count / sumMs: observations the sync added to the network programming histogram, and their sum. */
  readonly count: number;
  readonly sumMs: number;
}

/**
 * attributeByCounts gives each change (written[i], epoch ms, in order) its latency: sync k (in order)
 * programmed the next count_k changes. maxSumErrorMs: the largest difference, over the syncs, between
 * the latencies so attributed and the sum the daemon observed (a few ms at most when the attribution is right).
 */
export function attributeByCounts(written: readonly number[], syncs: readonly CountedSync[]): { latencies: number[]; maxSumErrorMs: number } {
  const latencies: number[] = [];
  let next = 0;
  let maxSumErrorMs = 0;
  for (const s of [...syncs].sort((a, b) => a.seq - b.seq)) {
    if (!s.ok || s.count <= 0) continue;
    const mine = written.slice(next, next + s.count).map((w) => s.finishedAt - w);
    next += s.count;
    latencies.push(...mine);
    maxSumErrorMs = Math.max(maxSumErrorMs, Math.abs(mine.reduce((a, b) => a + b, 0) - s.sumMs));
  }
  return { latencies, maxSumErrorMs };
}

/** ByMetricsContext: a daemon and an agent that reaches its /metrics (no dashboard needed). */
export interface ByMetricsContext {
  readonly daemon: Daemon;
  readonly agent: Agent;
}

/** measureChurnByMetrics is measureChurnWith for a daemon without the dashboard: latencies from the histogram's growth per sync. */
export async function measureChurnByMetrics(ctx: ByMetricsContext, rate: number, seconds: number, drive: () => Promise<readonly number[]>): Promise<ChurnResult & { maxSumErrorMs: number }> {
  const read = async () => {
    const text = await ctx.agent.get(`${METRICS}/metrics`);
    const count = metricTotal(text, `${HISTOGRAM}_count`);
    const sum = metricTotal(text, `${HISTOGRAM}_sum`);
    return { count: Number.isNaN(count) ? 0 : count, sumMs: Number.isNaN(sum) ? 0 : sum * 1000 };
  };
  const seqBefore = ctx.daemon.lastSeq;
  let last = await read();
  const countBefore = last.count;
  const rows: CountedSync[] = [];
  let watching = true;
  let seen = seqBefore;
  // After each sync line, before the next sync (minSyncPeriod apart): the histogram's growth is that sync's.
  const watcher = (async () => {
    while (watching) {
      const s = ctx.daemon.syncs.find((x) => x.seq > seen && x.family === 'IPv4');
      if (!s) {
        await sleep(5);
        continue;
      }
      seen = s.seq;
      const now = await read();
      rows.push({ seq: s.seq, finishedAt: s.finishedAt, ok: s.ok, count: now.count - last.count, sumMs: now.sumMs - last.sumMs });
      last = now;
    }
  })();
  const cpu0 = ctx.daemon.stats().cpuSelf;
  const t0 = Date.now();
  let written: readonly number[];
  let wall: number;
  let cpu1: number;
  try {
    written = await drive();
    wall = (Date.now() - t0) / 1000;
    cpu1 = ctx.daemon.stats().cpuSelf;
    await sleep(3000); // the last changes' syncs
  } finally {
    watching = false;
    await watcher;
  }
  const { latencies, maxSumErrorMs } = attributeByCounts(written, rows);
  return {
    rate,
    seconds,
    changes: written.length,
    attributed: latencies.length,
    metricCount: last.count - countBefore,
    latencyMs: percentiles(latencies),
    syncs: rows.length,
    syncMs: percentiles(rows.map((r) => ctx.daemon.syncs.find((x) => x.seq === r.seq)!.ms)),
    cpuShare: (cpu1 - cpu0) / wall,
    failedSyncs: rows.filter((r) => !r.ok).length,
    maxSumErrorMs,
  };
}

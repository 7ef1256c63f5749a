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
 */
import type { SyntheticCluster } from './cluster.ts';
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

import { renderDualStack } from './dual-stack.ts';
/**
 * report turns a run's results into the targets' verdicts and a markdown
 * report (tables per measurement). Run it alone to re-render a saved run:
 *   node test/bench/report.ts test/bench/results/<file>.json
 */
import { readFileSync } from 'node:fs';
import { fmt, fmtSummary, MiB, summarize, type Percentiles } from './stats.ts';
import type { NftablesRun, NftChange } from './nftables.ts';
import { traceTarget } from './trace.ts';
import { parseTargets } from './parse.ts';
import { livezTargets, renderLivez } from './livez-load.ts';
import type { UserspaceRun } from './userspace.ts';
import { sizeName, type Results, type Size, type TargetResult } from './results.ts';

const same = (a: Size, b: Size) => a.services === b.services && a.endpoints === b.endpoints;
const TEN_K_2: Size = { services: 10_000, endpoints: 2 };
const TEN_K_10: Size = { services: 10_000, endpoints: 10 };
const THIRTY_K_10: Size = { services: 30_000, endpoints: 10 };
/** RSS_TARGETS: steady and peak RSS per size (MiB), issue 18's. */
const RSS_TARGETS: readonly { size: Size; steady: number; peak: number }[] = [
  { size: TEN_K_2, steady: 200, peak: 220 },
  { size: TEN_K_10, steady: 300, peak: 400 },
  { size: THIRTY_K_10, steady: 700, peak: 900 },
];
/** EXAMPLE_IDLE_MIB, CLIENT_CONNECTED_MIB, GROWTH_MAX: the example cluster idle, 10,000 × 10 with a dashboard client, steady RSS 10,000 × 2 → × 10. */
const EXAMPLE_IDLE_MIB = 100;
const CLIENT_CONNECTED_MIB = 350;
const GROWTH_MAX = 1.5;
/** COLD_START_MS: spawn → first sync done at 10,000 × 2, each source; LIST_DECODE_MS: 20,000 listed objects decoded. */
const COLD_START_MS = 5000;
const LIST_DECODE_MS = 500;

function defaultFlavor(r: Results): string {
  return r.machine.autoFlavor.flavor === 'legacy' ? 'legacy' : 'nft';
}

const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
const sign = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(1)}`;
const p = (x: Percentiles, unit = 'ms') => `p50 ${fmt(x.p50)} / p99 ${fmt(x.p99)} ${unit}`;

/** evaluateTargets checks the issue's targets against the node's default flavour. */
export function evaluateTargets(r: Results): TargetResult[] {
  const flavor = defaultFlavor(r);
  const out: TargetResult[] = [];
  const full = (size: Size) => r.fullSync.find((f) => same(f.size, size) && f.flavor === flavor);

  const f2 = full(TEN_K_2);
  if (f2?.runs.length) {
    const total = summarize(f2.runs.map((x) => x.totalMs));
    const share = summarize(f2.runs.map((x) => x.ownShare));
    out.push({ name: `Full sync 10,000 × 2 (${flavor}): total`, target: '≤ 5 s', measured: fmtSummary(total, 'ms'), met: total.median <= 5000 });
    out.push({ name: `Full sync 10,000 × 2 (${flavor}): kproxy's own share`, target: '≤ 20%', measured: `${pct(share.median)} (${pct(share.min)}–${pct(share.max)})`, met: share.median <= 0.2 });
  }
  const f10 = full(TEN_K_10);
  if (f10?.runs.length) {
    const ratio = summarize(f10.runs.map((x) => x.ratio));
    out.push({
      name: `Full sync 10,000 × 10 (${flavor}): kproxy-total / bare iptables-restore`,
      target: '≤ 1.3',
      measured: `${ratio.median.toFixed(2)} (${ratio.min.toFixed(2)}–${ratio.max.toFixed(2)})`,
      met: ratio.median <= 1.3,
    });
  }
  for (const size of [TEN_K_2, TEN_K_10]) {
    const part = r.partial.find((x) => same(x.size, size) && x.flavor === flavor);
    const eps = part?.samples.filter((s) => s.kind === 'endpoint') ?? [];
    if (!eps.length) continue;
    const ms = summarize(eps.map((s) => s.ms));
    const e2e = summarize(eps.map((s) => s.endToEndMs));
    out.push({
      name: `Partial sync at ${sizeName(size)} (${flavor}), one service's endpoint changed: sync duration`,
      target: '≤ 100 ms',
      measured: fmtSummary(ms, 'ms'),
      met: ms.median <= 100,
      note: `kernel floor for any change at this size ${fmt(part!.kernelFloorMs ?? NaN, 'ms')}; file written → rules in the kernel (file source debounce included): ${fmtSummary(e2e, 'ms')}`,
    });
  }
  // Judged through the Kubernetes API (the production path, no file debounce) when measured; the file source is shown beside it.
  const churnOf = (source: 'file' | 'api') => {
    const mine = r.churn.filter((c) => (c.mode ?? 'iptables') === 'iptables' && c.flavor === flavor && (c.source ?? 'file') === source);
    return mine.find((c) => same(c.size, TEN_K_10)) ?? mine[0];
  };
  const churnApi = churnOf('api');
  const churnFile = churnOf('file');
  const churn = churnApi ?? churnFile;
  if (churn) {
    const limit = churn.minSyncPeriodMs + 1000;
    const measured = (c: NonNullable<typeof churn>) => `${p(c.latencyMs)}, max ${fmt(c.latencyMs.max)} ms (${c.attributed}/${c.changes} changes)`;
    out.push({
      name: `Network programming latency at ${sizeName(churn.size)} (${flavor}), ${churn.rate} updates/s`,
      target: `p99 ≤ minSyncPeriod + 1 s = ${limit} ms`,
      measured: churnApi ? `through the Kubernetes API: ${measured(churnApi)}` : measured(churn),
      met: churn.latencyMs.p99 <= limit,
      ...(churnApi && churnFile ? { note: `through the file source (its debounce included): ${measured(churnFile)}` } : {}),
    });
  }
  out.push(...memoryTargets(r, flavor));
  if (r.leak) {
    const g = r.leak.growthMiB;
    out.push({
      name: `No growth over ${r.leak.syncs.toLocaleString('en-US')} syncs (${r.leak.services.toLocaleString('en-US')} × ${r.leak.endpoints}, in process, after GC)`,
      target: 'no growth',
      measured: `live heap ${sign(g.heap)} MiB, of which restore inputs kept by the dashboard ${sign(g.inputsKept)} MiB; RSS ${sign(g.rss)} MiB, of which V8's young generation ${sign(g.newSpace ?? 0)} MiB; from sync ${g.from} to ${g.to}`,
      met: g.heap - g.inputsKept < 1 && g.rss - (g.newSpace ?? 0) < 16,
      note: 'after warm-up. Two bounded growths are counted apart: the dashboard keeps partial restore inputs as text (up to 16 MiB) before folding them into its model of the tables, and V8 may double its young generation (up to --max-semi-space-size)',
    });
  }
  for (const d of r.dualStack ?? []) {
    const perFamily = d.families.map((f) => `${f.family} ${fmt(f.totalMs)} / ${fmt(f.bareRestoreMs)} ms`).join(', ');
    const name = `Dual-stack full sync, ${d.services.toLocaleString('en-US')} × ${d.endpointsPerFamily} per family (${d.flavor})`;
    if (d.bareSideBySideMs === undefined) {
      out.push({
        name: `${name}: both families' syncs / bare restores of the same inputs`,
        target: '≤ 1.3',
        measured: `${d.ratio.toFixed(2)} (${perFamily}; both programmed ${fmt(d.wallMs)} ms after the first began)`,
        met: d.ratio <= 1.3,
      });
      continue;
    }
    out.push({
      name: `${name}: both families programmed / bare restores of the same inputs side by side`,
      target: '≤ 1.3',
      measured: `${d.ratio.toFixed(2)} (${fmt(d.wallMs)} / ${fmt(d.bareSideBySideMs)} ms)`,
      met: d.ratio <= 1.3,
      note: `each family's sync over its input restored alone (the families' syncs compete for the cores, a lone restore does not): ${perFamily}, summed ${(d.sumRatio ?? NaN).toFixed(2)}`,
    });
  }
  out.push(...nftablesTargets(r));
  if (r.userspace) out.push(...userspaceTargets(r.userspace));
  if (r.trace) out.push(traceTarget(r.trace));
  if (r.parse) out.push(...parseTargets(r.parse));
  if (r.livez) out.push(...livezTargets(r.livez));
  return out;
}

/** memoryTargets: issue 18's memory and cold start targets, on the node's default flavour. */
export function memoryTargets(r: Results, flavor: string): TargetResult[] {
  const out: TargetResult[] = [];
  const full = (size: Size) => r.fullSync.find((f) => same(f.size, size) && f.flavor === flavor && f.runs.length);
  const steadyOf = (size: Size) => {
    const f = full(size);
    return f ? summarize(f.runs.map((x) => x.steadyRssMiB)) : null;
  };
  const idle = r.exampleIdle ?? [];
  if (idle.length) {
    const worst = idle.reduce((a, b) => (b.rssMiB > a.rssMiB ? b : a));
    out.push({
      name: 'The example cluster (deploy/examples/), idle in --dry-run: RSS, every mode',
      target: `≤ ${EXAMPLE_IDLE_MIB} MiB`,
      measured: idle.map((x) => `${x.mode} ${fmt(x.rssMiB, 'MiB')}`).join(', '),
      met: worst.rssMiB <= EXAMPLE_IDLE_MIB,
      note: `live heap ${idle.map((x) => fmt(x.heapMiB, 'MiB')).join(' / ')} (same order)`,
    });
  }
  for (const t of RSS_TARGETS) {
    const f = full(t.size);
    if (!f) continue;
    const steady = summarize(f.runs.map((x) => x.steadyRssMiB));
    const peak = summarize(f.runs.map((x) => Math.max(x.peakRssMiB, x.steadyPeakRssMiB)));
    const live = summarize(f.runs.map((x) => x.afterGcHeapMiB ?? NaN));
    const gcRss = summarize(f.runs.map((x) => x.afterGcRssMiB ?? NaN));
    out.push({
      name: `RSS at ${sizeName(t.size)} (${flavor}), steady`,
      target: `≤ ${t.steady} MiB`,
      measured: fmtSummary(steady, 'MiB'),
      met: steady.median <= t.steady,
      note: `after a full GC: RSS ${fmtSummary(gcRss, 'MiB')}, live heap ${fmtSummary(live, 'MiB')}`,
    });
    out.push({ name: `RSS at ${sizeName(t.size)} (${flavor}), peak (start-up and full sync)`, target: `≤ ${t.peak} MiB`, measured: fmtSummary(peak, 'MiB'), met: peak.median <= t.peak });
  }
  const client = (r.clientConnected ?? []).find((c) => same(c.size, TEN_K_10) && c.flavor === flavor);
  if (client) {
    out.push({
      name: `RSS at 10,000 × 10 (${flavor}) with a dashboard client connected, steady`,
      target: `≤ ${CLIENT_CONNECTED_MIB} MiB`,
      measured: fmt(client.rssMiB, 'MiB'),
      met: client.rssMiB <= CLIENT_CONNECTED_MIB,
      note: `held once the read is done (median of the last samples); highest sample ${fmt(client.maxRssMiB ?? NaN, 'MiB')}, peak so far ${fmt(client.peakRssMiB, 'MiB')}; after a full GC ${fmt(client.afterGcRssMiB, 'MiB')}, live heap ${fmt(client.heapMiB, 'MiB')}`,
    });
  }
  const s2 = steadyOf(TEN_K_2);
  const s10 = steadyOf(TEN_K_10);
  if (s2 && s10) {
    const growth = s10.median / s2.median;
    out.push({
      name: `Steady RSS from 10,000 × 2 to 10,000 × 10 (${flavor}, four times the endpoints)`,
      target: `≤ ${GROWTH_MAX} ×`,
      measured: `${growth.toFixed(2)} × (${fmt(s2.median, 'MiB')} → ${fmt(s10.median, 'MiB')})`,
      met: growth <= GROWTH_MAX,
    });
  }
  for (const c of r.coldStart ?? []) {
    out.push({
      name: `Cold start at ${sizeName(c.size)} (${c.flavor}) through the ${c.source === 'file' ? 'file source (one multi-document YAML manifest)' : 'Kubernetes source (the fake API server)'}: spawn → first sync done`,
      target: `≤ ${COLD_START_MS / 1000} s`,
      measured: fmt(c.totalMs, 'ms'),
      met: c.totalMs <= COLD_START_MS,
      note: `start ${fmt(c.startMs, 'ms')}, ${c.source === 'file' ? 'read and parse' : 'list'} ${fmt(c.readMs, 'ms')}, wait ${fmt(c.waitMs ?? NaN, 'ms')}, build ${fmt(c.buildMs, 'ms')}, kernel ${fmt(c.kernelMs, 'ms')}, other ${fmt(c.otherMs, 'ms')}`,
    });
  }
  if (r.listDecode) {
    const d = r.listDecode;
    out.push({
      name: `Decoding ${d.objects.toLocaleString('en-US')} listed objects (${(d.bytes / MiB).toFixed(1)} MiB of list bodies)`,
      target: `≤ ${LIST_DECODE_MS / 1000} s`,
      measured: fmt(d.plainMs, 'ms'),
      met: d.plainMs <= LIST_DECODE_MS,
      note: `through client-node's model classes (ObjectSerializer): ${fmt(d.modelsMs, 'ms')}`,
    });
  }
  return out;
}

/** userspaceTargets: issue 14's bench targets, userspace mode against iptables mode in the same namespaces and run. */
export function userspaceTargets(u: UserspaceRun): TargetResult[] {
  const med = (xs: readonly number[]) => median([...xs]);
  return [
    {
      name: `userspace mode: bulk TCP throughput / the iptables mode's DNAT path (${u.bulkBytes / 1048576} MiB per transfer, median of ${u.throughput.userspace.length})`,
      target: '≥ 0.5',
      measured: `${u.throughputRatio.toFixed(2)} (${fmt(med(u.throughput.userspace))} / ${fmt(med(u.throughput.iptables))} MiB/s)`,
      met: u.throughputRatio >= 0.5,
    },
    {
      name: `userspace mode: added p99 latency, 64-byte requests at ${u.latency.rate.toLocaleString('en-US')}/s over 10 connections for ${u.latency.seconds} s`,
      target: '≤ 1 ms',
      measured: `${u.addedP99Ms.toFixed(2)} ms (p99 ${u.latency.userspace.p99.toFixed(2)} / ${u.latency.iptables.p99.toFixed(2)} ms; p50 ${u.latency.userspace.p50.toFixed(2)} / ${u.latency.iptables.p50.toFixed(2)} ms)`,
      met: u.addedP99Ms <= 1,
      note: `requests that found their connection still waiting were skipped: ${u.latency.skipped.userspace} (userspace), ${u.latency.skipped.iptables} (iptables)`,
    },
    {
      name: `userspace mode: RSS cost of ${u.idle.count.toLocaleString('en-US')} open idle connections`,
      target: '≤ 150 MiB',
      measured:
        u.idle.open < u.idle.count && u.idle.measuredCostMiB !== undefined
          ? `${fmt(u.idle.costMiB)} MiB scaled from ${fmt(u.idle.measuredCostMiB)} MiB for the ${u.idle.open.toLocaleString('en-US')} the daemon's descriptor limit could hold (${fmt(u.idle.rssBeforeMiB)} → ${fmt(u.idle.rssAfterMiB)} MiB, ${u.idle.failed} failed)`
          : `${fmt(u.idle.costMiB)} MiB (${fmt(u.idle.rssBeforeMiB)} → ${fmt(u.idle.rssAfterMiB)} MiB; ${u.idle.open.toLocaleString('en-US')} held, ${u.idle.failed} failed)`,
      // Scaled figures count when every connection the daemon could hold was held (none failed).
      met: u.idle.costMiB <= 150 && u.idle.failed === 0 && (u.idle.open === u.idle.count || u.idle.measuredCostMiB !== undefined),
    },
  ];
}

const median = (xs: number[]) => summarize(xs).median;
const nftPartial = (n: NftablesRun, kind: NftChange) => n.partial.filter((p) => p.kind === kind);
const nftChurn = (r: Results, size: Size) => r.churn.find((c) => c.mode === 'nftables' && same(c.size, size));

/**
 * nftablesTargets: issue 12's "Fast" targets for nftables mode, at 10,000 × 10 (medians over the reps).
 * MIN_SYNC_PERIOD_MS is the daemons' --iptables-min-sync-period (run.ts).
 */
export function nftablesTargets(r: Results): TargetResult[] {
  const out: TargetResult[] = [];
  for (const n of r.nftables ?? []) {
    if (!same(n.size, TEN_K_10)) continue;
    const at = `nftables mode, ${sizeName(n.size)}`;
    for (const [kind, what] of [
      ['add', 'one service added'],
      ['endpoint', 'one endpoint changed'],
    ] as const) {
      const xs = nftPartial(n, kind);
      if (!xs.length) continue;
      const ms = summarize(xs.map((x) => x.ms));
      const kernel = summarize(xs.map((x) => x.applyMs));
      out.push({
        name: `${at}, ${what}: sync (of which the kernel's nft transaction)`,
        target: '≤ 20 ms (kernel ≤ 10 ms)',
        measured: `${fmtSummary(ms, 'ms')} (kernel ${fmtSummary(kernel, 'ms')}), ${median(xs.map((x) => x.lines))} lines`,
        met: ms.median <= 20 && kernel.median <= 10,
      });
    }
    out.push({
      name: `${at}: first full sync`,
      target: '≤ 4 s',
      measured: `${fmt(n.first.ms, 'ms')} (kernel ${fmt(n.first.applyMs, 'ms')}, kproxy ${fmt(n.first.buildMs, 'ms')})`,
      met: n.first.ms <= 4000,
    });
    out.push({
      name: `${at}: first full sync / bare \`nft -f\` of the same transaction (one run)`,
      target: '≤ 1.2',
      measured: `${n.ratio.toFixed(2)} (${fmt(n.first.ms)} / ${fmt(n.bareNftMs)} ms, ${n.bareCommands.toLocaleString('en-US')} commands)`,
      met: n.ratio <= 1.2,
    });
    out.push({
      name: `${at}: restart with the table already right, spawn → /readyz 200 (polled from outside), and nothing rewritten`,
      target: '≤ 3 s, 0 lines',
      measured: `${fmt(n.restart.readyMs, 'ms')}; first sync ${n.restart.sync.lines} lines (${fmt(n.restart.sync.ms, 'ms')}), table ${n.restart.tableUnchanged ? 'unchanged, rule handles included' : '**changed**'}`,
      met: n.restart.readyMs <= 3000 && n.restart.sync.lines === 0 && n.restart.tableUnchanged,
    });
  }
  const churn = nftChurn(r, TEN_K_10);
  if (churn) {
    const limit = churn.minSyncPeriodMs + 300;
    out.push({
      name: `nftables mode, network programming latency at ${sizeName(churn.size)}, ${churn.rate} updates/s through the Kubernetes API`,
      target: `p99 ≤ minSyncPeriod + 300 ms = ${limit} ms`,
      measured: `${p(churn.latencyMs)}, max ${fmt(churn.latencyMs.max)} ms (${churn.attributed}/${churn.changes} changes)`,
      met: churn.latencyMs.p99 <= limit && churn.attributed === churn.changes,
    });
  }
  return out;
}

/** renderNftables: nftables mode's figures, each beside the iptables mode's at the same size in the same run (the node default flavour). */
function renderNftables(r: Results): string[] {
  const flavor = defaultFlavor(r);
  const parts = ['#### nftables mode, beside the iptables mode'];
  parts.push(
    `*nftables*: \`--proxy-mode nftables\` in a fresh namespace (test/bench/nftables.ts); sync figures as the daemon logs them, *kernel* is the \`nft -f\` transaction. *bare nft -f*: the same transaction (kproxy's \`--dry-run\` writes it) loaded by a bare \`nft -f\` in another fresh namespace, once, in the same run. *restart*: the daemon stopped and started again over its table; *ready* is spawn → the first \`/readyz\` 200, polled every ~10 ms from an agent in the namespace. *iptables (${flavor})*: the iptables mode's figure at the same size in this run, where it was measured (– otherwise).`,
  );
  for (const n of r.nftables ?? []) {
    if (n.writer) parts.push(`Writer: ${n.writer}${n.fallbacks?.length ? `; handed to nft -f: ${n.fallbacks.join('; ')}` : ''}.`);
    const ipt = r.fullSync.find((f) => same(f.size, n.size) && f.flavor === flavor);
    const iptRun = ipt?.runs.length ? ipt.runs : null;
    const iptPartial = r.partial.find((x) => same(x.size, n.size) && x.flavor === flavor);
    const iptChurn = r.churn.find((c) => (c.mode ?? 'iptables') === 'iptables' && c.source === 'api' && c.flavor === flavor && same(c.size, n.size));
    const nftChurnHere = nftChurn(r, n.size);
    const sync = (xs: { ms: number; applyMs: number; lines: number }[]) =>
      xs.length ? `${fmtSummary(summarize(xs.map((x) => x.ms)), 'ms')}, kernel ${fmtSummary(summarize(xs.map((x) => x.applyMs)), 'ms')}, ${median(xs.map((x) => x.lines))} lines` : '–';
    const rows: string[][] = [];
    for (const [kind, what] of [
      ['add', 'one service added: sync'],
      ['endpoint', 'one endpoint changed: sync'],
      ['remove', 'one service removed: sync'],
    ] as const) {
      rows.push([what, sync(nftPartial(n, kind)), sync(iptPartial?.samples.filter((s) => s.kind === kind) ?? [])]);
    }
    // The other nftables writer (--nftables-backend), same table, same run.
    if (n.other) for (const kind of ['add', 'endpoint', 'remove'] as const) rows.push([`… written by ${n.other.writer}: ${kind}`, sync(n.other.partial.filter((p) => p.kind === kind)), '–']);
    rows.push([
      'first full sync',
      `${fmt(n.first.ms, 'ms')} (kproxy ${fmt(n.first.buildMs, 'ms')}, kernel ${fmt(n.first.applyMs, 'ms')}), ${n.first.lines.toLocaleString('en-US')} lines`,
      iptRun ? `${fmtSummary(summarize(iptRun.map((x) => x.totalMs)), 'ms')} (kproxy ${fmtSummary(summarize(iptRun.map((x) => x.buildMs)), 'ms')})` : '–',
    ]);
    rows.push([
      'bare load of the same input (nft -f / iptables-restore)',
      `${fmt(n.bareNftMs, 'ms')} (${n.bareCommands.toLocaleString('en-US')} commands)`,
      iptRun ? fmtSummary(summarize(iptRun.map((x) => x.bareRestoreMs)), 'ms') : '–',
    ]);
    rows.push(['ratio kproxy / bare', n.ratio.toFixed(2), iptRun ? summarize(iptRun.map((x) => x.ratio)).median.toFixed(2) : '–']);
    rows.push(['spawn → first sync done', fmt(n.spawnToSyncedMs, 'ms'), iptRun ? fmtSummary(summarize(iptRun.map((x) => x.startToSyncedMs)), 'ms') : '–']);
    rows.push([
      'restart over the right table: spawn → /readyz 200',
      `${fmt(n.restart.readyMs, 'ms')} (first sync ${fmt(n.restart.sync.ms, 'ms')}, ${n.restart.sync.lines} lines, table ${n.restart.tableUnchanged ? 'unchanged' : 'changed'})`,
      '–',
    ]);
    const churn = (c: (typeof r.churn)[number] | undefined) =>
      c ? `p50 ${fmt(c.latencyMs.p50)} / p99 ${fmt(c.latencyMs.p99)} / max ${fmt(c.latencyMs.max)} ms (${c.attributed}/${c.changes} changes, ${c.seconds} s, ${c.syncs} syncs)` : '–';
    rows.push([`network programming latency, ${nftChurnHere?.rate ?? 50} updates/s through the Kubernetes API`, churn(nftChurnHere), churn(iptChurn)]);
    parts.push(table([`${sizeName(n.size)}`, 'nftables', `iptables (${flavor})`], rows));
  }
  return parts;
}

function table(head: string[], rows: (string | number)[][]): string {
  const line = (cells: (string | number)[]) => `| ${cells.map(String).join(' | ')} |`;
  return [line(head), line(head.map(() => '---')), ...rows.map(line)].join('\n');
}

/** renderMarkdown writes the whole report. */
export function renderMarkdown(r: Results): string {
  const m = r.machine;
  const parts: string[] = [];
  parts.push(`### kproxy benchmark (${r.mode}${r.only ? `, only ${r.only.join(', ')}` : ''}), ${r.startedAt.slice(0, 16).replace('T', ' ')} UTC`);
  parts.push(
    `Machine: ${m.cores} cores (${m.cpu}), ${m.memoryGiB} GiB, Linux ${m.kernel}; ${m.iptables.legacy}, ${m.iptables.nft}; ` +
      `\`--iptables-flavor auto\` in a fresh namespace: **${m.autoFlavor.flavor}** (${m.autoFlavor.why}); Node.js ${m.node}; kproxy ${m.commit}${m.dirty ? ' (with uncommitted changes)' : ''}. Run took ${Math.round(r.durationS / 60)} min.` +
      (m.loadAverage ? ` Load average (1/5/15 min) ${m.loadAverage.join(' / ')} at the start${r.loadAverageAtEnd ? `, ${r.loadAverageAtEnd.join(' / ')} at the end` : ''}.` : ''),
  );

  parts.push('#### Targets');
  parts.push(
    table(
      ['target', 'goal', 'measured', 'met'],
      r.targets.map((t) => [t.name + (t.note ? ` — ${t.note}` : ''), t.target, t.measured, t.met === null ? '–' : t.met ? 'yes' : '**no**']),
    ),
  );

  parts.push('#### Full sync (first sync after start, fresh namespace)');
  parts.push(
    "Median (min–max) over the runs. *kproxy total* is the daemon's sync duration: *build* is kproxy's own time (build, diff, serialise), *kernel* the rest (iptables-save, iptables-restore). *bare restore* replays the same restore input with a bare `iptables-restore` in another fresh namespace, in the same run.",
  );
  parts.push(
    table(
      ['size', 'flavour', 'runs', 'kproxy total', 'build', 'kernel', 'own share', 'bare restore', 'ratio', 'rules', 'input', 'spawn → synced', 'CPU kproxy / iptables'],
      r.fullSync
        .filter((f) => f.runs.length)
        .map((f) => {
          const s = (g: (x: (typeof f.runs)[number]) => number) => summarize(f.runs.map(g));
          return [
            sizeName(f.size),
            f.flavor,
            f.runs.length,
            fmtSummary(
              s((x) => x.totalMs),
              'ms',
            ),
            fmtSummary(
              s((x) => x.buildMs),
              'ms',
            ),
            fmtSummary(
              s((x) => x.applyMs),
              'ms',
            ),
            pct(s((x) => x.ownShare).median),
            fmtSummary(
              s((x) => x.bareRestoreMs),
              'ms',
            ),
            s((x) => x.ratio).median.toFixed(2),
            f.runs[0].rules.toLocaleString('en-US'),
            `${(f.runs[0].inputBytes / 1024 / 1024).toFixed(1)} MiB`,
            fmtSummary(
              s((x) => x.startToSyncedMs),
              'ms',
            ),
            `${s((x) => x.cpuSelfS).median.toFixed(1)} s / ${s((x) => x.cpuChildrenS).median.toFixed(1)} s`,
          ];
        }),
    ),
  );

  parts.push('#### Memory (daemon RSS from /proc, heap from its /metrics)');
  parts.push(
    table(
      ['size', 'flavour', 'RSS at end of full sync', 'peak RSS', 'steady RSS (after settle)', 'steady heap used', 'RSS after a full GC', 'live heap (after GC)'],
      r.fullSync
        .filter((f) => f.runs.length)
        .map((f) => {
          const s = (g: (x: (typeof f.runs)[number]) => number) => fmtSummary(summarize(f.runs.map(g)), 'MiB');
          return [
            sizeName(f.size),
            f.flavor,
            s((x) => x.rssAtSyncMiB),
            s((x) => Math.max(x.peakRssMiB, x.steadyPeakRssMiB)),
            s((x) => x.steadyRssMiB),
            s((x) => x.steadyHeapMiB),
            s((x) => x.afterGcRssMiB ?? NaN),
            s((x) => x.afterGcHeapMiB ?? NaN),
          ];
        }),
    ),
  );

  const worked = r.fullSync.flatMap((f) => f.runs.filter((x) => x.afterWork).map((x) => ({ f, w: x.afterWork! })));
  if (worked.length) {
    parts.push('After the partial syncs, churn and dashboard measurements on the same daemon, 65 s idle (the dashboard has dropped its parsed tables):');
    parts.push(
      table(
        ['size', 'flavour', 'RSS', 'peak RSS (whole life)', 'RSS after a full GC', 'live heap (after GC)'],
        worked.map(({ f, w }) => [sizeName(f.size), f.flavor, fmt(w.rssMiB, 'MiB'), fmt(w.peakRssMiB, 'MiB'), fmt(w.afterGcRssMiB, 'MiB'), fmt(w.afterGcHeapMiB, 'MiB')]),
      ),
    );
  }

  if (r.memoryVariants?.length) {
    parts.push(
      table(
        ['size', 'flavour', 'variant', 'full sync (build)', 'partial syncs, median (build)', 'RSS at end of full sync', 'peak RSS', 'steady RSS', 'RSS after a full GC'],
        r.memoryVariants.map((v) => [
          sizeName(v.size),
          v.flavor,
          v.what,
          v.syncMs === undefined ? '–' : `${fmt(v.syncMs, 'ms')} (${fmt(v.buildMs ?? NaN, 'ms')})`,
          v.partialMs === undefined ? '–' : `${fmt(v.partialMs, 'ms')} (${fmt(v.partialBuildMs ?? NaN, 'ms')})`,
          fmt(v.rssAtSyncMiB, 'MiB'),
          fmt(v.peakRssMiB, 'MiB'),
          fmt(v.steadyRssMiB, 'MiB'),
          fmt(v.afterGcRssMiB, 'MiB'),
        ]),
      ),
    );
  }

  if (r.exampleIdle?.length) {
    parts.push('The example cluster (`deploy/examples/`) in `--dry-run` (the simulated kernel), idle 20 s after its first sync:');
    parts.push(
      table(
        ['mode', 'RSS', 'peak RSS', 'RSS after a full GC', 'live heap (after GC)'],
        r.exampleIdle.map((x) => [x.mode, fmt(x.rssMiB, 'MiB'), fmt(x.peakRssMiB, 'MiB'), fmt(x.afterGcRssMiB, 'MiB'), fmt(x.heapMiB, 'MiB')]),
      ),
    );
  }
  if (r.clientConnected?.length) {
    parts.push(
      "With one dashboard client connected (the WebSocket open, its snapshot received, the dashboard's read of the kernel done, drift included; then RSS sampled once a second, the client still connected: RSS is the median of the last third of the samples, the highest sample is the read's garbage before V8 collects it):",
    );
    parts.push(
      table(
        ['size', 'flavour', 'connect → snapshot', 'connect → kernel read', 'RSS', 'highest sample', 'peak RSS (whole life)', 'RSS after a full GC', 'live heap (after GC)'],
        r.clientConnected.map((c) => [
          sizeName(c.size),
          c.flavor,
          fmt(c.snapshotMs, 'ms'),
          fmt(c.kernelReadMs ?? NaN, 'ms'),
          fmt(c.rssMiB, 'MiB'),
          fmt(c.maxRssMiB ?? NaN, 'MiB'),
          fmt(c.peakRssMiB, 'MiB'),
          fmt(c.afterGcRssMiB, 'MiB'),
          fmt(c.heapMiB, 'MiB'),
        ]),
      ),
    );
  }

  if (r.coldStart?.length || r.listDecode) {
    parts.push('#### Cold start (spawn → first sync done, fresh namespace)');
    parts.push(
      "*start*: spawn → the daemon's first log line (Node.js and kproxy's imports); *read*: → `sources synced` (the manifest read and parsed, or the lists; the Kubernetes client's import where used; the trackers); *wait*: → the first sync starting; *build* and *kernel*: the first sync's own split; *other*: the rest of the sync. The file source reads one multi-document YAML manifest.",
    );
    if (r.coldStart?.length) {
      parts.push(
        table(
          ['size', 'flavour', 'source', 'spawn → synced', 'start', 'read', 'wait', 'build', 'kernel', 'other', 'peak RSS'],
          r.coldStart.map((c) => [
            sizeName(c.size),
            c.flavor,
            c.source === 'file' ? `file (${(c.manifestBytes / MiB).toFixed(1)} MiB YAML)` : 'Kubernetes API',
            fmt(c.totalMs, 'ms'),
            fmt(c.startMs, 'ms'),
            fmt(c.readMs, 'ms'),
            fmt(c.waitMs ?? NaN, 'ms'),
            fmt(c.buildMs, 'ms'),
            fmt(c.kernelMs, 'ms'),
            fmt(c.otherMs, 'ms'),
            fmt(c.peakRssMiB, 'MiB'),
          ]),
        ),
      );
    }
    if (r.listDecode) {
      const d = r.listDecode;
      parts.push(
        `Decoding the list bodies of ${d.objects.toLocaleString('en-US')} objects (${(d.bytes / MiB).toFixed(1)} MiB, in process, best of 3): kproxy's plain JSON ${fmt(d.plainMs, 'ms')}, client-node's model classes ${fmt(d.modelsMs, 'ms')}.`,
      );
    }
  }

  if (r.partial.length) {
    parts.push('#### Partial syncs (one change per sync)');
    parts.push(
      "*end to end*: manifest file written → sync finished (includes the file source's 250 ms debounce). CPU: kproxy's own, per sync. *kernel floor*: a bare `iptables-restore` adding one chain with one rule in the same namespace, best of 3: what any change that adds a rule costs at this size.",
    );
    const rows: (string | number)[][] = [];
    for (const pr of r.partial) {
      for (const kind of ['endpoint', 'add', 'remove'] as const) {
        const xs = pr.samples.filter((x) => x.kind === kind);
        if (!xs.length) continue;
        const s = (g: (x: (typeof xs)[number]) => number) => fmtSummary(summarize(xs.map(g)), 'ms');
        const label = kind === 'endpoint' ? 'one endpoint changed' : kind === 'add' ? 'one service added' : 'one service removed';
        rows.push([
          sizeName(pr.size),
          pr.flavor,
          label,
          s((x) => x.ms),
          s((x) => x.buildMs),
          s((x) => x.applyMs),
          fmt(pr.kernelFloorMs ?? NaN, 'ms'),
          fmt(summarize(xs.map((x) => x.lines)).median),
          s((x) => x.endToEndMs),
          s((x) => x.cpuSelfMs),
        ]);
      }
    }
    parts.push(table(['size', 'flavour', 'change', 'sync', 'build', 'kernel', 'kernel floor', 'lines', 'end to end', 'CPU'], rows));
  }

  if (r.churn.length) {
    parts.push('#### Network programming latency under churn (EndpointSlice updates)');
    parts.push(
      "*file*: each update rewrites a slice file (the file source debounces 250 ms, up to 500 ms under continuous writes). *Kubernetes API*: kproxy runs with `--kubeconfig` against the fake API server in its namespace, each update is an API write its EndpointSlice watch delivers (client-node informers, as in a cluster). *nftables mode* has no dashboard (hence no sync history) yet: after each sync the bench reads the daemon's `kubeproxy_network_programming_duration_seconds` histogram; its count's growth is how many changes that sync programmed (they arrive in order), its sum's growth checks the attribution.",
    );
    parts.push(
      table(
        ['size', 'flavour', 'source', 'updates/s', 'duration', 'latency p50', 'p90', 'p99', 'max', 'syncs', 'sync duration p50 / p99', 'kproxy CPU'],
        r.churn.map((c) => [
          sizeName(c.size),
          c.mode === 'nftables' ? 'nftables mode' : c.flavor,
          c.source === 'api' ? 'Kubernetes API' : 'file',
          c.rate,
          `${c.seconds} s`,
          fmt(c.latencyMs.p50, 'ms'),
          fmt(c.latencyMs.p90, 'ms'),
          fmt(c.latencyMs.p99, 'ms'),
          fmt(c.latencyMs.max, 'ms'),
          `${c.syncs}${c.failedSyncs ? ` (${c.failedSyncs} failed)` : ''}`,
          `${fmt(c.syncMs.p50)} / ${fmt(c.syncMs.p99)} ms`,
          pct(c.cpuShare) + ' of a core',
        ]),
      ),
    );
  }

  if (r.dataPlane.length) {
    parts.push('#### Data plane: TCP connect time through the node');
    parts.push(
      "Client namespace → node namespace (kproxy) → backend namespace. *via service*: to a cluster IP whose rule is last in KUBE-SERVICES; *to pod*: straight to the backend's IP (its SYN also walks KUBE-SERVICES, without a match); *no rules*: to the pod before kproxy started.",
    );
    parts.push(
      table(
        ['size', 'flavour', 'via service', 'to pod', 'no rules (to pod)'],
        r.dataPlane.map((d) => [sizeName(d.size), d.flavor, d.withRules.viaService ? p(d.withRules.viaService) : 'n/a', p(d.withRules.toPod), p(d.noRules.toPod)]),
      ),
    );
  }

  if (r.dashboard.length) {
    parts.push('#### Dashboard (WebSocket, as a browser gets it)');
    parts.push(
      table(
        ['size', 'flavour', 'snapshot', 'server build + serialise', 'connect → snapshot received', 'delta per partial sync'],
        r.dashboard.map((d) => [
          sizeName(d.size),
          d.flavor,
          `${(d.snapshotBytes / 1024 / 1024).toFixed(2)} MiB`,
          d.snapshotBuildMs === null ? 'n/a' : fmt(d.snapshotBuildMs, 'ms'),
          fmt(d.connectToSnapshotMs, 'ms'),
          d.deltaBytes.map((b) => `${(b / 1024).toFixed(1)} KiB`).join(', '),
        ]),
      ),
    );
  }

  if (r.leak) {
    const l = r.leak;
    parts.push(`#### ${l.syncs.toLocaleString('en-US')} syncs in one process (${l.services.toLocaleString('en-US')} × ${l.endpoints}; kernel replaced by one that takes any input)`);
    parts.push(
      table(
        ['after sync', ...l.samples.map((s) => String(s.syncs))],
        [
          ['heap (MiB, after GC)', ...l.samples.map((s) => s.heapMiB.toFixed(1))],
          ['restore inputs kept by the dashboard (MiB)', ...l.samples.map((s) => (s.inputsKeptMiB ?? NaN).toFixed(1))],
          ['RSS (MiB)', ...l.samples.map((s) => s.rssMiB.toFixed(0))],
          ["V8's young generation (MiB)", ...l.samples.map((s) => (s.newSpaceMiB ?? NaN).toFixed(0))],
        ],
      ),
    );
    parts.push(
      table(
        ['per sync', 'p50', 'p99'],
        [
          ['whole sync (file source to restore input)', fmt(l.syncMs.p50, 'ms'), fmt(l.syncMs.p99, 'ms')],
          ['metrics observer', fmt(l.observerMs.metrics.p50, 'ms'), fmt(l.observerMs.metrics.p99, 'ms')],
          ['health observers (proxy health, service health checks)', fmt(l.observerMs.health.p50, 'ms'), fmt(l.observerMs.health.p99, 'ms')],
          ['dashboard observer (its deferred work not included)', fmt(l.observerMs.dashboard.p50, 'ms'), fmt(l.observerMs.dashboard.p99, 'ms')],
        ],
      ),
    );
  }
  if (r.nftables?.length) parts.push(...renderNftables(r));
  if (r.livez) parts.push(renderLivez(r.livez));
  if (r.notes.length) parts.push('#### Notes\n' + r.notes.map((n) => `- ${n}`).join('\n'));
  if (r.dualStack?.length) parts.push(renderDualStack(r.dualStack));
  return parts.join('\n\n') + '\n';
}

if (import.meta.main) {
  const results = JSON.parse(readFileSync(process.argv[2], 'utf8')) as Results;
  results.targets = evaluateTargets(results);
  process.stdout.write(renderMarkdown(results));
}

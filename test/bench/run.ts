/**
 * run is `npm run bench`: kproxy against the kernel's own limit, on synthetic
 * clusters, in private network namespaces (kpt-bench-*, removed at the end
 * and on interruption). Needs root and iptables (legacy and nft).
 *
 *   npm run bench -- --quick        a few minutes: 1k/10k services, both flavours for full syncs
 *   npm run bench                   the full size: 1k/10k/30k × 2/10 endpoints, 3 runs each
 *   options: --flavor nft|legacy|both  --runs N  --out DIR  --docs (rewrite docs/performance.md's table)
 *            --only full,partial,churn,dashboard,dataplane,memory,leak,dualstack,nftables,userspace,trace,coldstart,parse,livez (some parts; daemons are
 *            still started at the sizes those parts need, one full-sync run each unless `full` is listed)
 *   nftables: --proxy-mode nftables at 10,000 × 10 (nftables.ts: first full sync vs a bare nft -f, partial syncs,
 *            restart over the right table) and its churn through the Kubernetes API, reported beside iptables mode
 *   userspace: the userspace mode's relay against the iptables mode's DNAT path in the same namespaces
 *            (userspace.ts: bulk throughput, round trips at 1,000/s, 10,000 idle connections' RSS)
 *   trace: the packet tracer at 10,000 × 10 over each mode's parsed read (trace.ts, in a child process: no kernel)
 *   memory: full syncs at 10,000 × 2 and × 10 (and 30,000 × 10 in the full run), a dashboard client connected at
 *            10,000 × 10, variants (V8 flags, no dashboard), the example cluster idle in each mode (memory.ts)
 *   coldstart: spawn → first sync done at 10,000 × 2 through the file source and the Kubernetes source (coldstart.ts),
 *            and list decoding in process (list-decode.ts)
 *   parse: the file source's cold start, 20,000 documents (10,000 × 10) in one --- stream, JSON- and YAML-shaped (parse.ts, in a child process)
 *   livez: /livez while the dashboard and the health port are hammered, at 10,000 × 10 (livez-load.ts: a daemon in its own namespace)
 * Daemons run the built CLI (dist/): `npm run build` first.
 *
 * Writes results/<date>-<mode>.json and .md (test/bench/results/ by default).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { apiChurnRun } from './api-churn.ts';
import { measureChurn } from './churn.ts';
import { generateCluster, POD_CIDR, type SyntheticCluster } from './cluster.ts';
import { coldStartRun, writeYamlManifest } from './coldstart.ts';
import { DIST_CLI, killAll, shippedCommand } from './daemon.ts';
import { measureConnects, wireDataPlane, writeProbe, type ConnectTimes, type DataPlane } from './dataplane.ts';
import { fullSyncRun, memoryVariant, METRICS, NODE_NAME, type RunContext } from './full-sync.ts';
import { describeMachine } from './machine.ts';
import { clientConnected, exampleIdle } from './memory.ts';
import { PROXY_MODES } from '../../server/config/proxy-mode.ts';
import { dualStackRun } from './dual-stack.ts';
import { writeManifests, type ManifestDir } from './manifests.ts';
import { removeAll } from './netns.ts';
import type { TraceBench } from './trace.ts';
import type { ParseBench } from './parse.ts';
import { measureLivezUnderLoad } from './livez-load.ts';
import { userspaceRun } from './userspace.ts';
import { nftablesRun } from './nftables.ts';
import { kernelFloorMs, measurePartial } from './partial-sync.ts';
import type { Flavor } from './replay.ts';
import { evaluateTargets, renderMarkdown } from './report.ts';
import { sizeName, type LeakResult, type ListDecode, type Results, type Size } from './results.ts';

const { values: opts } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    flavor: { type: 'string', default: 'both' },
    runs: { type: 'string' },
    out: { type: 'string', default: join(import.meta.dirname, 'results') },
    docs: { type: 'boolean', default: false },
    only: { type: 'string' },
  },
});
const PARTS = ['full', 'partial', 'churn', 'dashboard', 'dataplane', 'memory', 'leak', 'dualstack', 'nftables', 'userspace', 'trace', 'coldstart', 'parse', 'livez'] as const;
type Part = (typeof PARTS)[number];
const only = opts.only ? new Set(opts.only.split(',').map((x) => x.trim())) : null;
for (const x of only ?? []) if (!PARTS.includes(x as Part)) throw new Error(`--only: unknown part "${x}" (parts: ${PARTS.join(', ')})`);
/** want: the part is measured in this run. */
const want = (part: Part) => !only || only.has(part);
const quick = opts.quick!;
const flavors: Flavor[] = opts.flavor === 'both' ? ['nft', 'legacy'] : [opts.flavor as Flavor];
const ROOT = join(import.meta.dirname, '..', '..');
const MIN_SYNC_PERIOD_MS = 1000; // kproxy's default, what the daemons run with
const NODE_IP = '10.250.0.2';
/** CHURN_TARGETS: services whose slices the churn drivers edit (file source and API alike). */
const CHURN_TARGETS = 100;

const S = (services: number, endpoints: number): Size => ({ services, endpoints });
/** DUAL_STACK_SIZE: the dual-stack cluster, per family (every Service has both families). */
const DUAL_STACK_SIZE = S(10_000, 2);
/** NFTABLES_SIZE: where nftables mode is measured (issue 12's targets), beside iptables mode's figures at that size. */
const NFTABLES_SIZE = S(10_000, 10);
/** LIVEZ_SIZE: where /livez is measured under load (issue 17: 10,000 Services); LIVEZ_SECONDS: each load phase's length. */
const LIVEZ_SIZE = S(10_000, 10);
const LIVEZ_SECONDS = quick ? 10 : 15;
const same = (a: Size, b: Size) => a.services === b.services && a.endpoints === b.endpoints;

/** Plan: which sizes get which measurement. The first flavour listed is the node default (auto picks nft). */
const plan = quick
  ? {
      full: [
        { size: S(1000, 2), flavors, runs: 2 },
        { size: S(10_000, 2), flavors, runs: 2 },
        { size: S(10_000, 10), flavors: flavors.slice(0, 1), runs: 1 },
      ],
      partialAt: [S(10_000, 2), S(10_000, 10)],
      partialReps: 3,
      churnAt: S(10_000, 10),
      churnSeconds: 20,
      dashboardAt: S(10_000, 10),
      dataPlaneAt: [S(1000, 2), S(10_000, 2)],
      connects: 1000,
      leak: { size: S(1000, 10), syncs: 1000 },
      extrasFlavors: flavors.slice(0, 1),
    }
  : {
      full: [S(1000, 2), S(1000, 10), S(10_000, 2), S(10_000, 10), S(30_000, 2), S(30_000, 10)].map((size) => ({ size, flavors, runs: 3 })),
      partialAt: [S(10_000, 2), S(10_000, 10)],
      partialReps: 5,
      churnAt: S(10_000, 10),
      churnSeconds: 60,
      dashboardAt: S(10_000, 10),
      dataPlaneAt: [S(1000, 2), S(10_000, 2), S(30_000, 2)],
      connects: 2000,
      leak: { size: S(10_000, 10), syncs: 1000 },
      extrasFlavors: flavors,
    };
if (opts.runs) for (const f of plan.full) f.runs = Number(opts.runs);
/**
 * STEADY_AFTER_MS: the steady memory sample's wait after a first sync. Past
 * MemoryRelease's collection (3 s after a big full sync): what the node holds
 * from then on, not the sync's garbage.
 */
const STEADY_AFTER_MS = 8000;
/** MEMORY_SIZE: where the variants and the connected dashboard client are measured; MEMORY_SIZES: every size the memory part needs a full sync at. */
const MEMORY_SIZE = S(10_000, 10);
const MEMORY_SIZES = quick ? [S(10_000, 2), MEMORY_SIZE] : [S(10_000, 2), MEMORY_SIZE, S(30_000, 10)];
if (!want('full')) {
  // Keep only the sizes a wanted part runs on (memory: the full sync's own memory at the target size), once each.
  const hosts = (size: Size) =>
    (want('partial') && plan.partialAt.some((s) => same(s, size))) ||
    (want('churn') && same(plan.churnAt, size)) ||
    (want('dashboard') && same(plan.dashboardAt, size)) ||
    (want('dataplane') && plan.dataPlaneAt.some((s) => same(s, size))) ||
    (want('memory') && MEMORY_SIZES.some((s) => same(s, size)));
  plan.full = plan.full.filter((f) => hosts(f.size)).map((f) => ({ ...f, runs: opts.runs ? Number(opts.runs) : 1 }));
}

function log(msg: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
}

function preflight(): void {
  if (process.getuid?.() !== 0) throw new Error('npm run bench needs root (network namespaces, iptables)');
  checkBuilt();
  for (const bin of ['ip', 'iptables-legacy-restore', 'iptables-nft-restore', 'iptables-legacy-save', 'iptables-nft-save']) {
    try {
      execFileSync('sh', ['-c', `command -v ${bin}`], { stdio: 'ignore' });
    } catch {
      throw new Error(`npm run bench needs ${bin} (Debian: apt-get install iptables iproute2)`);
    }
  }
}

/** checkBuilt refuses a missing or stale build: the daemons run dist/, which must be what the sources say. */
function checkBuilt(): void {
  let built: number;
  try {
    built = statSync(DIST_CLI).mtimeMs;
  } catch {
    throw new Error(`npm run bench runs the built daemon (${DIST_CLI}): run npm run build first`);
  }
  const newest = readdirSync(join(ROOT, 'server'), { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts') && !e.name.endsWith('.test.ts'))
    .reduce((m, e) => Math.max(m, statSync(join(e.parentPath, e.name)).mtimeMs), 0);
  if (newest > built) throw new Error('server/ changed since the last build: run npm run build first (the daemons run dist/)');
}

const scratch = join('/tmp', `kproxy-bench-${process.pid}`);
const clusters = new Map<string, { cluster: SyntheticCluster; manifests: ManifestDir }>();

function clusterFor(size: Size): { cluster: SyntheticCluster; manifests: ManifestDir } {
  const key = `${size.services}x${size.endpoints}`;
  let c = clusters.get(key);
  if (!c) {
    const t0 = performance.now();
    const cluster = generateCluster({ services: size.services, endpointsPerService: size.endpoints, nodeName: NODE_NAME, nodeIP: NODE_IP });
    const manifests = writeManifests(cluster, join(scratch, key), CHURN_TARGETS);
    writeProbe(manifests.dir);
    c = { cluster, manifests };
    clusters.set(key, c);
    log(`generated ${sizeName(size)}: ${(manifests.bytes / 1024 / 1024).toFixed(1)} MiB of manifests in ${Math.round(performance.now() - t0)} ms`);
  }
  return c;
}

async function dashboardNumbers(ctx: RunContext, c: { cluster: SyntheticCluster; manifests: ManifestDir }, size: Size, flavor: Flavor, results: Results): Promise<void> {
  const before = ctx.agent.wsMessages.length;
  await ctx.agent.call({ op: 'ws', url: 'ws://127.0.0.1:10249/ws' });
  const t0 = Date.now();
  while (!ctx.agent.wsMessages.slice(before).some((m) => m.type === 'snapshot')) {
    if (Date.now() - t0 > 60_000) throw new Error('no dashboard snapshot');
    await new Promise((r) => setTimeout(r, 20));
  }
  const snap = ctx.agent.wsMessages.slice(before).find((m) => m.type === 'snapshot')!;
  const status = JSON.parse(await ctx.agent.get(`${METRICS}/api/v1/status`)) as { overview: { stream?: { lastSnapshotMs?: number } } };
  const samples = await measurePartial(ctx, c.cluster, c.manifests, 1);
  await ctx.agent.call({ op: 'ws-close' });
  results.dashboard.push({
    size,
    flavor,
    snapshotBytes: snap.bytes,
    snapshotBuildMs: status.overview.stream?.lastSnapshotMs ?? null,
    connectToSnapshotMs: snap.connectMs ?? NaN,
    deltaBytes: samples.map((s) => s.deltaBytes ?? NaN),
  });
}

function runLeak(size: Size, syncs: number): LeakResult {
  const dir = join(scratch, `leak-${size.services}x${size.endpoints}`);
  const out = execFileSync(process.execPath, ['--expose-gc', join(import.meta.dirname, 'leak.ts'), dir, String(size.services), String(size.endpoints), String(syncs)], {
    encoding: 'utf8',
    cwd: ROOT,
    maxBuffer: 64 * 1024 * 1024,
    timeout: 1_800_000,
  });
  rmSync(dir, { recursive: true, force: true });
  return JSON.parse(out.trim().split('\n').at(-1)!) as LeakResult;
}

/** COLD_START_SIZE: where cold start is measured (issue 18: ready within seconds at 10,000 × 2 through any source). */
const COLD_START_SIZE = S(10_000, 2);

/** coldStart: spawn → first sync done through the file source (one YAML manifest) and the Kubernetes source, then list decoding in process. */
async function coldStart(results: Results): Promise<void> {
  const manifest = writeYamlManifest(clusterFor(COLD_START_SIZE).cluster, join(scratch, 'coldstart'));
  for (const flavor of flavors) {
    for (const source of ['file', 'api'] as const) {
      log(`cold start at ${sizeName(COLD_START_SIZE)} ${flavor} through the ${source === 'file' ? 'file source' : 'Kubernetes API'}`);
      try {
        const r = await coldStartRun({ size: COLD_START_SIZE, flavor, clusterCIDR: POD_CIDR, nodeIP: NODE_IP, ...(source === 'file' ? { manifest } : {}) });
        (results.coldStart ??= []).push(r);
        log(`  ${Math.round(r.totalMs)} ms: start ${Math.round(r.startMs)}, read ${Math.round(r.readMs)}, build ${Math.round(r.buildMs)}, kernel ${Math.round(r.kernelMs)}`);
      } catch (err) {
        results.notes.push(`cold start through ${source} (${flavor}) failed: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  }
  log(`list decoding: ${sizeName(COLD_START_SIZE)} in process`);
  try {
    const out = execFileSync(process.execPath, [join(import.meta.dirname, 'list-decode.ts'), String(COLD_START_SIZE.services), String(COLD_START_SIZE.endpoints)], {
      encoding: 'utf8',
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    results.listDecode = JSON.parse(out.trim().split('\n').at(-1)!) as ListDecode;
  } catch (err) {
    results.notes.push(`list decoding failed: ${err instanceof Error ? err.message : String(err)}`);
  }
}

async function main(): Promise<Results> {
  preflight();
  mkdirSync(scratch, { recursive: true });
  const startedAt = new Date();
  log(`mode ${quick ? 'quick' : 'full'}${only ? ` (only ${[...only].join(', ')})` : ''}, flavours ${flavors.join(', ')}; scratch ${scratch}`);
  const results: Results = {
    mode: quick ? 'quick' : 'full',
    startedAt: startedAt.toISOString(),
    durationS: 0,
    machine: await describeMachine(join(scratch, 'auto')),
    fullSync: [],
    partial: [],
    churn: [],
    dataPlane: [],
    dashboard: [],
    leak: null,
    memoryVariants: [],
    targets: [],
    notes: only ? [`Only these parts were measured: ${[...only].join(', ')}; full syncs ran only to host them.`] : [],
    ...(only ? { only: [...only] } : {}),
  };
  log(`machine: ${results.machine.cores} cores, kernel ${results.machine.kernel}, auto flavour ${results.machine.autoFlavor.flavor}`);

  for (const step of plan.full) {
    const c = clusterFor(step.size);
    for (const flavor of step.flavors) {
      const entry = { size: step.size, flavor, runs: [] as Results['fullSync'][number]['runs'] };
      results.fullSync.push(entry);
      for (let run = 1; run <= step.runs; run++) {
        const extras = run === 1 && plan.extrasFlavors.includes(flavor);
        const doDataPlane = extras && want('dataplane') && plan.dataPlaneAt.some((s) => same(s, step.size));
        const doPartial = extras && want('partial') && plan.partialAt.some((s) => same(s, step.size));
        const doChurn = extras && want('churn') && same(plan.churnAt, step.size);
        const doDashboard = extras && want('dashboard') && same(plan.dashboardAt, step.size);
        const doClient = extras && want('memory') && same(MEMORY_SIZE, step.size);
        let dp: DataPlane | null = null;
        let noRules: ConnectTimes | null = null;
        log(`full sync ${sizeName(step.size)} ${flavor}, run ${run}/${step.runs}`);
        try {
          const r = await fullSyncRun({
            manifests: c.manifests.dir,
            flavor,
            clusterCIDR: POD_CIDR,
            settleMs: STEADY_AFTER_MS,
            timeoutMs: 1_800_000,
            prepare: doDataPlane
              ? async (ns) => {
                  dp = await wireDataPlane(ns);
                  noRules = await measureConnects(dp, plan.connects, false);
                }
              : undefined,
            // Only a run with measurements on its daemon has an "after work" memory sample worth its 65 s wait.
            then: !(doDataPlane || doPartial || doChurn || doDashboard || doClient)
              ? undefined
              : async (ctx) => {
                  if (doDataPlane && dp && noRules) {
                    log(`  data plane: ${plan.connects} connects`);
                    results.dataPlane.push({ size: step.size, flavor, noRules, withRules: await measureConnects(dp, plan.connects) });
                  }
                  if (doPartial) {
                    log(`  partial syncs (${plan.partialReps} × endpoint, add, remove)`);
                    const samples = await measurePartial(ctx, c.cluster, c.manifests, plan.partialReps);
                    results.partial.push({ size: step.size, flavor, samples, kernelFloorMs: kernelFloorMs(ctx.ns, flavor) });
                  }
                  if (doChurn) {
                    log(`  churn: 50 updates/s for ${plan.churnSeconds} s through the file source`);
                    results.churn.push({ size: step.size, flavor, minSyncPeriodMs: MIN_SYNC_PERIOD_MS, source: 'file', ...(await measureChurn(ctx, c.cluster, c.manifests, 50, plan.churnSeconds)) });
                  }
                  if (doDashboard) {
                    log('  dashboard: snapshot and deltas');
                    await dashboardNumbers(ctx, c, step.size, flavor, results);
                  }
                  if (doClient) {
                    log('  memory with a dashboard client connected');
                    (results.clientConnected ??= []).push({ size: step.size, flavor, ...(await clientConnected(ctx, quick ? 10_000 : 40_000)) });
                  }
                },
          });
          entry.runs.push(r);
          log(
            `  total ${Math.round(r.totalMs)} ms (build ${Math.round(r.buildMs)}), bare restore ${Math.round(r.bareRestoreMs)} ms, ratio ${r.ratio.toFixed(2)}, steady RSS ${Math.round(r.steadyRssMiB)} MiB`,
          );
        } catch (err) {
          const msg = err instanceof Error ? err.message : String(err);
          log(`  FAILED: ${msg}`);
          results.notes.push(`${sizeName(step.size)} ${flavor} run ${run} failed: ${msg}`);
        } finally {
          (dp as DataPlane | null)?.close();
        }
      }
    }
  }

  // Churn through the Kubernetes source (the production path) needs a daemon of its own: --kubeconfig, fake API server.
  for (const flavor of want('churn') ? plan.extrasFlavors : []) {
    log(`churn through the Kubernetes API at ${sizeName(plan.churnAt)} ${flavor}: 50 updates/s for ${plan.churnSeconds} s`);
    try {
      const r = await apiChurnRun({ size: plan.churnAt, flavor, clusterCIDR: POD_CIDR, nodeIP: NODE_IP, churnTargets: CHURN_TARGETS, rate: 50, seconds: plan.churnSeconds, timeoutMs: 1_800_000 });
      results.churn.push({ size: plan.churnAt, flavor, minSyncPeriodMs: MIN_SYNC_PERIOD_MS, source: 'api', ...r });
      log(`  first sync ${Math.round(r.firstSyncMs)} ms (spawn → synced ${Math.round(r.startToSyncedMs)} ms); latency p50 ${Math.round(r.latencyMs.p50)} / p99 ${Math.round(r.latencyMs.p99)} ms`);
      if (r.apiLists || r.apiWatches)
        results.notes.push(`churn through the API (${flavor}): the fake API server got ${r.apiLists} lists and ${r.apiWatches} watches during the churn (a relist or watch restart is in the numbers)`);
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      log(`  FAILED: ${msg}`);
      results.notes.push(`churn through the API at ${sizeName(plan.churnAt)} ${flavor} failed: ${msg}`);
    }
  }

  const memSize = MEMORY_SIZE;
  // The shipped flags and the ones shipped before, each with partial syncs on the same daemon: memory against build time, in one run.
  const partialOn = () => ({ ...clusterFor(memSize), reps: 3 });
  const variants = !want('memory')
    ? []
    : [
        { what: `as shipped (${shippedCommand()})`, partial: partialOn() },
        { what: 'node --max-semi-space-size=16 (shipped before: V8 young generation capped at 16 MiB per semi-space)', nodeArgs: ['--max-semi-space-size=16'], partial: partialOn() },
        { what: 'node --max-semi-space-size=2 without --expose-gc (no collection after the full sync: MemoryRelease off)', nodeArgs: ['--max-semi-space-size=2'] },
        { what: "V8's defaults (no flags: the young generation grows to 128 MiB)", nodeArgs: [] },
        { what: "glibc's malloc defaults (the shipped Node.js flags, without the shipped MALLOC_ settings)", shippedEnv: false },
        { what: 'no metrics listener (hence no dashboard)', metrics: false },
      ];
  for (const v of variants) {
    log(`memory at ${sizeName(memSize)} ${flavors[0]}: ${v.what}`);
    try {
      results.memoryVariants.push({
        size: memSize,
        flavor: flavors[0],
        ...(await memoryVariant({ manifests: clusterFor(memSize).manifests.dir, flavor: flavors[0], clusterCIDR: POD_CIDR, settleMs: STEADY_AFTER_MS, ...v })),
      });
    } catch (err) {
      results.notes.push(`memory (${v.what}) failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  // The example cluster idle in each mode: the smallest daemon there is (--dry-run, what the demo runs).
  for (const mode of want('memory') ? PROXY_MODES : []) {
    log(`memory: the example cluster idle, ${mode} mode (--dry-run)`);
    try {
      (results.exampleIdle ??= []).push(await exampleIdle(mode, 20_000));
    } catch (err) {
      results.notes.push(`memory: the example cluster in ${mode} mode failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  if (want('coldstart')) await coldStart(results);

  // nftables mode: its own daemon and namespace (nftables.ts), then its churn through the Kubernetes API.
  if (want('nftables')) {
    log(`nftables mode at ${sizeName(NFTABLES_SIZE)}`);
    try {
      const r = await nftablesRun({ size: NFTABLES_SIZE, workDir: scratch, reps: plan.partialReps, log: (m) => log(`  ${m}`) });
      (results.nftables ??= []).push(r);
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      log(`  FAILED: ${msg}`);
      results.notes.push(`nftables mode at ${sizeName(NFTABLES_SIZE)} failed: ${msg}`);
    }
    log(`nftables mode: churn through the Kubernetes API at ${sizeName(NFTABLES_SIZE)}, 50 updates/s for ${plan.churnSeconds} s`);
    try {
      const r = await apiChurnRun({
        size: NFTABLES_SIZE,
        flavor: flavors[0],
        mode: 'nftables',
        clusterCIDR: POD_CIDR,
        nodeIP: NODE_IP,
        churnTargets: CHURN_TARGETS,
        rate: 50,
        seconds: plan.churnSeconds,
        timeoutMs: 1_800_000,
      });
      results.churn.push({ size: NFTABLES_SIZE, flavor: flavors[0], mode: 'nftables', minSyncPeriodMs: MIN_SYNC_PERIOD_MS, source: 'api', ...r });
      log(
        `  latency p50 ${Math.round(r.latencyMs.p50)} / p99 ${Math.round(r.latencyMs.p99)} ms (${r.attributed}/${r.changes} changes; attribution within ${Math.round(r.maxSumErrorMs ?? NaN)} ms of the daemon's histogram sum per sync)`,
      );
      if (r.attributed !== r.changes) results.notes.push(`nftables churn: ${r.attributed} of ${r.changes} changes were attributed to a sync (the histogram counted ${r.metricCount})`);
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      log(`  FAILED: ${msg}`);
      results.notes.push(`nftables mode churn through the API at ${sizeName(NFTABLES_SIZE)} failed: ${msg}`);
    }
  }

  // The userspace mode's relay beside the iptables mode's DNAT path, in its own namespaces (userspace.ts).
  if (want('userspace')) {
    log('userspace mode: relay vs iptables DNAT (bulk throughput, round trips at 1,000/s, 10,000 idle connections)');
    try {
      results.userspace = await userspaceRun({ reps: quick ? 2 : 3, idle: 10_000, latencySeconds: quick ? 5 : 10, log: (m) => log(`  ${m}`) });
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      log(`  FAILED: ${msg}`);
      results.notes.push(`userspace mode failed: ${msg}`);
    }
  }

  // The packet tracer over parsed reads (trace.ts): in a child with room for three modes' reads of 10,000 × 10.
  if (want('trace')) {
    log("packet tracer: one trace at 10,000 × 10 over each mode's parsed read");
    try {
      const out = execFileSync(process.execPath, ['--max-old-space-size=6144', join(import.meta.dirname, 'trace.ts'), '10000', '10', '--json'], {
        encoding: 'utf8',
        maxBuffer: 64 * 1024 * 1024,
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      results.trace = JSON.parse(out.trim().split('\n').at(-1)!) as TraceBench;
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      log(`  FAILED: ${msg}`);
      results.notes.push(`packet tracer bench failed: ${msg}`);
    }
  }

  // The file source's cold start on one big file (parse.ts): in a child process, no kernel.
  if (want('parse')) {
    log('manifest parsing: 20,000 documents (10,000 × 10) in one --- stream, JSON- and YAML-shaped');
    try {
      const out = execFileSync(process.execPath, ['--max-old-space-size=4096', join(import.meta.dirname, 'parse.ts'), '10000', '10', '--json'], {
        encoding: 'utf8',
        maxBuffer: 64 * 1024 * 1024,
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      results.parse = JSON.parse(out.trim().split('\n').at(-1)!) as ParseBench;
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      log(`  FAILED: ${msg}`);
      results.notes.push(`manifest parsing bench failed: ${msg}`);
    }
  }

  // /livez under a hammered dashboard (livez-load.ts): a daemon of its own in a private namespace.
  if (want('livez')) {
    log(`/livez under load at ${sizeName(LIVEZ_SIZE)}: ${LIVEZ_SECONDS} s per phase`);
    try {
      results.livez = await measureLivezUnderLoad({ services: LIVEZ_SIZE.services, endpoints: LIVEZ_SIZE.endpoints, seconds: LIVEZ_SECONDS, kernel: 'netns', log: (m) => log(`  ${m}`) });
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      log(`  FAILED: ${msg}`);
      results.notes.push(`/livez under load failed: ${msg}`);
    }
  }

  // A dual-stack cluster: 10,000 Services × 2 endpoints per family, both families' first syncs and a partial sync each.
  for (const flavor of want('dualstack') ? flavors : []) {
    log(`dual-stack ${sizeName(DUAL_STACK_SIZE)} per family, ${flavor}`);
    try {
      const r = await dualStackRun({ services: DUAL_STACK_SIZE.services, endpoints: DUAL_STACK_SIZE.endpoints, flavor, workDir: scratch, partialReps: quick ? 3 : 5 });
      (results.dualStack ??= []).push(r);
      log(`  ${r.families.map((f) => `${f.family} ${Math.round(f.totalMs)} ms (bare ${Math.round(f.bareRestoreMs)})`).join(', ')}; ratio ${r.ratio.toFixed(2)}; wall ${Math.round(r.wallMs)} ms`);
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      log(`  FAILED: ${msg}`);
      results.notes.push(`dual-stack ${sizeName(DUAL_STACK_SIZE)} ${flavor} failed: ${msg}`);
    }
  }

  if (want('leak')) {
    log(`leak check: ${plan.leak.syncs} syncs in process at ${sizeName(plan.leak.size)}`);
    try {
      results.leak = runLeak(plan.leak.size, plan.leak.syncs);
    } catch (err) {
      results.notes.push(`leak check failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  results.durationS = (Date.now() - startedAt.getTime()) / 1000;
  results.loadAverageAtEnd = loadavg().map((x) => Math.round(x * 100) / 100);
  results.targets = evaluateTargets(results);
  return results;
}

function write(results: Results): void {
  mkdirSync(opts.out!, { recursive: true });
  const stamp = results.startedAt.replace(/[:]/g, '').replace(/\.\d+Z$/, 'Z');
  const base = join(opts.out!, `${stamp}-${results.mode}${results.only ? `-only-${results.only.join('-')}` : ''}`);
  const md = renderMarkdown(results);
  writeFileSync(`${base}.json`, JSON.stringify(results, null, 1) + '\n');
  writeFileSync(`${base}.md`, md);
  process.stdout.write(md);
  log(`wrote ${base}.json and .md`);
  if (opts.docs) {
    const docs = join(ROOT, 'docs', 'performance.md');
    const text = readFileSync(docs, 'utf8');
    const start = '<!-- bench:results:start -->';
    const end = '<!-- bench:results:end -->';
    const a = text.indexOf(start);
    const b = text.indexOf(end);
    if (a < 0 || b < a) throw new Error(`${docs} has no ${start} ... ${end} block`);
    writeFileSync(docs, `${text.slice(0, a + start.length)}\n${md}\n${text.slice(b)}`);
    log(`updated ${docs}`);
  }
}

const cleanUp = () => {
  killAll();
  removeAll();
  rmSync(scratch, { recursive: true, force: true });
};
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    log(`${sig}: removing namespaces and processes`);
    cleanUp();
    process.exit(130);
  });
}
try {
  write(await main());
} finally {
  cleanUp();
}

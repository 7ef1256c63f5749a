/**
 * leak runs the whole daemon in this process (inprocess.ts: file source,
 * state, sync loop, iptables backend over a kernel that takes any input,
 * metrics, health, dashboard) for SYNCS partial syncs, each after one
 * EndpointSlice file changed, and samples memory after a forced GC every
 * STEP syncs: a leak shows as growth from the first sample to the last. It
 * also reports each observer's time per sync. Prints one JSON line.
 *
 *   node --expose-gc test/bench/leak.ts DIR SERVICES ENDPOINTS SYNCS
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { getHeapSpaceStatistics } from 'node:v8';
import { generateCluster } from './cluster.ts';
import { NODE_NAME } from './full-sync.ts';
import { startInProcess, waitUntil } from './inprocess.ts';
import { writeManifests, writeSlice } from './manifests.ts';
import { movedSlice } from './partial-sync.ts';
import { MiB, percentiles } from './stats.ts';

const [dir, services, endpoints, syncs] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4]), Number(process.argv[5] ?? 1000)];
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');
const STEP = Math.max(1, Math.floor(syncs / 10));

const cluster = generateCluster({ services, endpointsPerService: endpoints, nodeName: NODE_NAME, nodeIP: '10.250.0.2' });
const manifests = writeManifests(cluster, dir, 100);
const targets = [...manifests.churn.keys()];
const ip = await startInProcess({ dir, nodeName: NODE_NAME, clusterCIDR: '10.64.0.0/10' });

/**
 * inputsKeptBytes: restore inputs since the last full sync. The dashboard keeps
 * them as text (up to 16 MiB, then folds them into its model of the tables),
 * a bounded growth of its own that the heap numbers are read against.
 */
let inputsKeptBytes = 0;
const sample = async (n: number) => {
  await sleep(20); // the dashboard's deferred work
  gc();
  gc();
  const m = process.memoryUsage();
  // V8 sizes the young generation by itself (it may double it, up to --max-semi-space-size): RSS follows, the heap does not.
  const newSpace = getHeapSpaceStatistics().find((x) => x.space_name === 'new_space')?.space_size ?? 0;
  return { syncs: n, rssMiB: m.rss / MiB, heapMiB: m.heapUsed / MiB, externalMiB: m.external / MiB, inputsKeptMiB: inputsKeptBytes / MiB, newSpaceMiB: newSpace / MiB };
};

const samples = [await sample(0)];
const syncMs: number[] = [];
const t0 = performance.now();
for (let i = 1; i <= syncs; i++) {
  const seq = ip.daemon.proxy.lastRecord!.seq;
  const index = targets[i % targets.length];
  writeSlice(manifests, index, movedSlice(cluster, index, Date.now()));
  await ip.source.reloadNow();
  await waitUntil(() => ip.daemon.proxy.lastRecord!.seq > seq, 60_000);
  const rec = ip.daemon.proxy.lastRecord!;
  if (!rec.ok || rec.full) throw new Error(`sync ${rec.seq}: ${rec.ok ? 'unexpectedly full' : rec.error?.message}`);
  syncMs.push(rec.durationMs);
  inputsKeptBytes = rec.full ? rec.bytesWritten : inputsKeptBytes + rec.bytesWritten;
  if (i % STEP === 0) samples.push(await sample(i));
}
const wallS = (performance.now() - t0) / 1000;
const skip = (a: number[]) => a.slice(Math.min(10, a.length - 1)); // the first syncs warm the JIT
const first = samples[1];
const last = samples.at(-1)!;
process.stdout.write(
  JSON.stringify({
    services,
    endpoints,
    syncs,
    wallS,
    samples,
    growthMiB: {
      rss: last.rssMiB - first.rssMiB,
      heap: last.heapMiB - first.heapMiB,
      inputsKept: last.inputsKeptMiB - first.inputsKeptMiB,
      newSpace: last.newSpaceMiB - first.newSpaceMiB,
      from: first.syncs,
      to: last.syncs,
    },
    syncMs: percentiles(skip(syncMs)),
    observerMs: {
      metrics: percentiles(skip(ip.times.metrics)),
      health: percentiles(skip(ip.times.health)),
      dashboard: percentiles(skip(ip.times.dashboard)),
    },
  }) + '\n',
);
await ip.stop();

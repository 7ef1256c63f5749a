/**
 * coldstart measures a fresh kproxy from spawn to its first sync done, in a
 * fresh namespace, through each source: the file source reading one
 * multi-document YAML manifest (every object its own document, as an export
 * or a generator writes them), and the Kubernetes source listing from the
 * fake API server (test/api/, hosted in the namespace by
 * api-churn-driver.ts, as api-churn.ts does). The breakdown comes from the
 * daemon's own log lines (JSON, with timestamps):
 *   start  spawn → its first log line (Node.js start and kproxy's imports)
 *   read   → "sources synced" (assembly, the Kubernetes client's import where
 *          used, the lists or the manifest's read and parse, the trackers)
 *   wait   → the first sync starting (the sync runner's turn)
 *   build  kproxy's part of the first sync (the sync log line's buildMs)
 *   kernel the sync's kernel part (iptables-save, iptables-restore: applyMs)
 *   other  the rest of the sync (its log line's ms less build and kernel)
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { ApiChurnDriver } from './api-churn.ts';
import type { SyntheticCluster } from './cluster.ts';
import { Daemon } from './daemon.ts';
import { NODE_NAME } from './full-sync.ts';
import { createNetns, deleteNetns } from './netns.ts';
import type { Flavor } from './replay.ts';
import type { Size } from './results.ts';
import { MiB } from './stats.ts';

export interface ColdStart {
  readonly source: 'file' | 'api';
  readonly size: Size;
  readonly flavor: Flavor;
  /** totalMs: spawn → the first sync's log line. */
  readonly totalMs: number;
  readonly startMs: number;
  readonly readMs: number;
  readonly waitMs: number;
  readonly buildMs: number;
  readonly kernelMs: number;
  readonly otherMs: number;
  /** manifestBytes: the file source's manifest (0 for the API). */
  readonly manifestBytes: number;
  readonly peakRssMiB: number;
}

/** writeYamlManifest writes the cluster as one multi-document YAML file: the Node, then each Service and its slice. */
export function writeYamlManifest(c: SyntheticCluster, dir: string): { file: string; bytes: number } {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const docs = [stringify(c.node)];
  for (let i = 0; i < c.services.length; i++) docs.push(stringify(c.services[i]), stringify(c.slices[i]));
  const text = docs.join('---\n');
  const file = join(dir, 'cluster.yaml');
  writeFileSync(file, text);
  return { file, bytes: Buffer.byteLength(text) };
}

export interface ColdStartOptions {
  size: Size;
  flavor: Flavor;
  clusterCIDR: string;
  nodeIP: string;
  /** manifest: the file source's one file; absent: the Kubernetes source through the fake API server. */
  manifest?: { file: string; bytes: number };
  timeoutMs?: number;
  /** entry: the CLI to start (default the built daemon, DIST_CLI): another build's, to compare two builds in one run. */
  entry?: string;
}

/** coldStartRun starts kproxy in a fresh namespace and times spawn → first sync done, with the breakdown. */
export async function coldStartRun(o: ColdStartOptions): Promise<ColdStart> {
  const ns = createNetns('cold');
  let driver: ApiChurnDriver | null = null;
  let d: Daemon | null = null;
  try {
    let where: { manifests: string } | { kubeconfig: string };
    if (o.manifest) where = { manifests: o.manifest.file };
    else {
      driver = new ApiChurnDriver(ns, o.size, o.nodeIP, 1);
      where = { kubeconfig: (await driver.ready).kubeconfig };
    }
    d = new Daemon({ ns, ...where, flavor: o.flavor, nodeName: NODE_NAME, clusterCIDR: o.clusterCIDR, ...(o.entry ? { entry: o.entry } : {}) });
    const first = await d.nextSync(0, o.timeoutMs ?? 600_000);
    if (!first.ok || !first.full) throw new Error(`first sync ${first.ok ? 'was not full' : `failed: ${first.error}`}`);
    const peak = d.stats().peakRss;
    const at = (test: (msg: string) => boolean) => {
      const l = d!.logs.find((x) => test(x.msg));
      if (!l) throw new Error('the daemon did not log its start-up');
      return Date.parse(l.ts);
    };
    const firstLine = Date.parse(d.logs[0].ts);
    const synced = at((m) => m.startsWith('sources synced'));
    const totalMs = first.finishedAt - d.startedAt;
    const startMs = firstLine - d.startedAt;
    const readMs = synced - firstLine;
    const waitMs = first.finishedAt - first.ms - synced;
    return {
      source: o.manifest ? 'file' : 'api',
      size: o.size,
      flavor: o.flavor,
      totalMs,
      startMs,
      readMs,
      waitMs,
      buildMs: first.buildMs,
      kernelMs: first.applyMs,
      otherMs: first.ms - first.buildMs - first.applyMs,
      manifestBytes: o.manifest?.bytes ?? 0,
      peakRssMiB: peak / MiB,
    };
  } finally {
    if (d) await d.stop();
    await driver?.stop();
    deleteNetns(ns);
  }
}

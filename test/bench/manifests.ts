/**
 * manifests writes a synthetic cluster as the folder kproxy's file source
 * reads (--source file:DIR): JSON Lists of SHARD services with their slices,
 * the Node on its own, and the slices the churn driver edits one per file, so
 * an update rewrites a few hundred bytes rather than a shard.
 */
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { EndpointSlice, KubeObject } from '../../server/proxy/kube-objects.ts';
import type { SyntheticCluster } from './cluster.ts';

const SHARD = 1000;

export interface ManifestDir {
  readonly dir: string;
  /** churn: service index -> the file holding its slice alone. */
  readonly churn: ReadonlyMap<number, string>;
  readonly bytes: number;
}

/** churnTargets picks k services spread evenly over the cluster (all kinds of services get churned). */
export function churnTargets(services: number, k: number): number[] {
  const n = Math.min(k, services);
  return Array.from({ length: n }, (_, i) => Math.floor((i * services) / n));
}

function list(items: KubeObject[]): string {
  return JSON.stringify({ apiVersion: 'v1', kind: 'List', items });
}

/** writeAtomically replaces a file by renaming a hidden temporary over it (the file source ignores dot files). */
export function writeAtomically(dir: string, name: string, text: string): void {
  const tmp = join(dir, `.${name}.tmp`);
  writeFileSync(tmp, text);
  renameSync(tmp, join(dir, name));
}

/** writeManifests writes the cluster to dir (emptied first). */
export function writeManifests(c: SyntheticCluster, dir: string, churnCount: number): ManifestDir {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const churn = new Map<number, string>();
  for (const i of churnTargets(c.services.length, churnCount)) churn.set(i, `churn-${String(i).padStart(6, '0')}.json`);
  let bytes = 0;
  const put = (name: string, text: string) => {
    writeFileSync(join(dir, name), text);
    bytes += text.length;
  };
  put('node.json', JSON.stringify(c.node));
  for (let start = 0, shard = 0; start < c.services.length; start += SHARD, shard++) {
    const items: KubeObject[] = [];
    for (let i = start; i < Math.min(start + SHARD, c.services.length); i++) {
      items.push(c.services[i]);
      if (!churn.has(i)) items.push(c.slices[i]);
      if (c.slices6[i]) items.push(c.slices6[i]);
    }
    put(`cluster-${String(shard).padStart(4, '0')}.json`, list(items));
  }
  for (const [i, name] of churn) put(name, JSON.stringify(c.slices[i]));
  return { dir, churn, bytes };
}

/** writeSlice rewrites one churn file with a new version of its slice. */
export function writeSlice(m: ManifestDir, index: number, slice: EndpointSlice): void {
  const name = m.churn.get(index);
  if (!name) throw new Error(`service ${index} is not a churn target`);
  writeAtomically(m.dir, name, JSON.stringify(slice));
}

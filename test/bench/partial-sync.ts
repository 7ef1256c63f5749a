/**
 * partial-sync measures partial syncs on a running daemon: one endpoint of a
 * service changed, one service added, one removed (each its own sync, spaced
 * beyond minSyncPeriod). For each: the daemon's own sync time split into
 * build and kernel, the lines written, CPU time, the end-to-end time from the
 * file write to the end of the sync (file source debounce included), and the
 * dashboard's delta message for that sync.
 */
import { unlinkSync } from 'node:fs';
import { join } from 'node:path';
import type { EndpointSlice, Service } from '../../server/proxy/kube-objects.ts';
import { ANNOTATION_TRIGGER, endpointIP, ipText, type SyntheticCluster } from './cluster.ts';
import type { RunContext } from './full-sync.ts';
import { METRICS } from './full-sync.ts';
import { writeAtomically, writeSlice, type ManifestDir } from './manifests.ts';
import { timeRestore, type Flavor } from './replay.ts';

export type PartialKind = 'endpoint' | 'add' | 'remove';

export interface PartialSample {
  readonly kind: PartialKind;
  readonly ms: number;
  readonly buildMs: number;
  readonly applyMs: number;
  readonly lines: number;
  /** endToEndMs: file written to sync finished (debounce and minSyncPeriod wait included). */
  readonly endToEndMs: number;
  readonly cpuSelfMs: number;
  readonly deltaBytes: number | null;
}

interface SyncRow {
  seq: number;
  startedAt: number;
  finishedAt: number;
  programmingMs: number | null;
  ok: boolean;
}

export async function syncRows(ctx: RunContext): Promise<SyncRow[]> {
  return (JSON.parse(await ctx.agent.get(`${METRICS}/api/v1/syncs`)) as { syncs: SyncRow[] }).syncs;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** generations counts the endpoint moves made per churn target, so every change is a real one. */
export const generations = new Map<number, number>();

/** movedSlice returns a churn target's slice with its first endpoint moved to a new IP, stamped now. */
export function movedSlice(c: SyntheticCluster, index: number, at: number): EndpointSlice {
  const gen = (generations.get(index) ?? 0) + 1;
  generations.set(index, gen);
  const s = structuredClone(c.slices[index]);
  s.endpoints![0].addresses = [endpointIP(index, 0, c.spec.endpointsPerService, gen)];
  s.metadata!.annotations = { [ANNOTATION_TRIGGER]: new Date(at).toISOString() };
  return s;
}

function extraService(k: number): { svc: Service; slice: EndpointSlice } {
  const name = `extra-${k}`;
  return {
    svc: {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name, namespace: 'bench-extra' },
      spec: { clusterIP: ipText(0x0a6f0000 + k), ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 8080 }] },
    },
    slice: {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: `${name}-a1b2c`, namespace: 'bench-extra', labels: { 'kubernetes.io/service-name': name } },
      addressType: 'IPv4',
      ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
      endpoints: Array.from({ length: 10 }, (_, e) => ({ addresses: [ipText(0x0a7f0000 + k * 16 + e)], conditions: { ready: true }, nodeName: `node-${e + 1}` })),
    },
  };
}

export async function measurePartial(ctx: RunContext, c: SyntheticCluster, m: ManifestDir, reps: number): Promise<PartialSample[]> {
  const out: PartialSample[] = [];
  const targets = [...m.churn.keys()];
  const ws = ctx.agent.wsMessages;
  let k = 0;
  for (let rep = 0; rep < reps; rep++) {
    for (const kind of ['endpoint', 'add', 'remove'] as const) {
      await sleep(1300); // beyond minSyncPeriod since the last sync: each change gets a sync of its own
      const after = ctx.daemon.lastSeq;
      const cpu0 = ctx.daemon.stats().cpuSelf;
      const at = Date.now();
      if (kind === 'endpoint') writeSlice(m, targets[(rep * 7) % targets.length], movedSlice(c, targets[(rep * 7) % targets.length], at));
      else if (kind === 'add') {
        const e = extraService(++k);
        writeAtomically(m.dir, `extra-${k}.json`, JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [e.svc, e.slice] }));
      } else unlinkSync(join(m.dir, `extra-${k}.json`));
      let sync = await ctx.daemon.nextSync(after, 60_000);
      // A periodic sync with nothing to do may come first.
      while (sync.ok && sync.servicesChanged === 0) sync = await ctx.daemon.nextSync(sync.seq, 60_000);
      if (!sync.ok) throw new Error(`partial sync (${kind}) failed: ${sync.error}`);
      if (sync.full) throw new Error(`the ${kind} change made a full sync`);
      const cpu1 = ctx.daemon.stats().cpuSelf;
      const row = (await syncRows(ctx)).find((r) => r.seq === sync.seq);
      await sleep(100); // the dashboard sends its delta on the next turn of the event loop
      const delta = ws.find((w) => w.type === 'sync' && w.syncSeq === sync.seq);
      out.push({
        kind,
        ms: sync.ms,
        buildMs: sync.buildMs,
        applyMs: sync.applyMs,
        lines: sync.lines,
        endToEndMs: row ? row.finishedAt - at : NaN,
        cpuSelfMs: (cpu1 - cpu0) * 1000,
        deltaBytes: delta?.bytes ?? null,
      });
    }
  }
  return out;
}

/**
 * kernelFloorMs is what the kernel charges for the smallest change at this
 * size: a restore that adds one chain with one rule (a chain kproxy does not
 * own), in the daemon's namespace, best of three. No partial sync that adds a
 * rule can be faster; with iptables-nft the time is the kernel validating the
 * jump graph reachable from the built-in chains, with legacy iptables the
 * whole table being copied out, changed and copied back.
 */
export function kernelFloorMs(ns: string, flavor: Flavor): number {
  const times: number[] = [];
  for (let i = 0; i < 3; i++) {
    times.push(timeRestore(ns, flavor, '*nat\n:KPT-BENCH-FLOOR - [0:0]\n-A KPT-BENCH-FLOOR -j RETURN\nCOMMIT\n'));
    timeRestore(ns, flavor, '*nat\n:KPT-BENCH-FLOOR - [0:0]\n-X KPT-BENCH-FLOOR\nCOMMIT\n');
  }
  return Math.min(...times);
}

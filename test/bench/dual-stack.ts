/**
 * dual-stack measures a dual-stack node: every Service has an IPv4 and an IPv6
 * cluster IP and a slice of each family, and kproxy runs one proxier per
 * family (iptables-restore and ip6tables-restore). It reports each family's
 * first full sync against a bare restore of exactly what that family wrote
 * (the headline: the sum of both families' syncs over the sum of both bare
 * restores), the wall time until both families were programmed, and a partial
 * sync per family (one Service of that family added).
 *
 * The two families sync side by side on the node's cores, so each family's
 * sync time includes the other's restore competing for them; a bare restore
 * alone in a namespace does not. The like-for-like headline is therefore the
 * wall time until both families were programmed over the wall time of both
 * bare restores run side by side (`ratio`); each family's own sync over its
 * bare restore alone, and their sum (`sumRatio`), are reported beside it.
 */
import { join } from 'node:path';
import type { EndpointSlice, Service } from '../../server/proxy/kube-objects.ts';
import { Agent, Daemon, type SyncLog } from './daemon.ts';
import { generateCluster, ip6Text, ipText, POD_CIDR, POD_CIDR6 } from './cluster.ts';
import { METRICS, NODE_NAME } from './full-sync.ts';
import { writeAtomically, writeManifests } from './manifests.ts';
import { createNetns, deleteNetns } from './netns.ts';
import { replayFresh, replayFreshSideBySide, type Flavor } from './replay.ts';

type Family = SyncLog['family'];

export interface FamilySync {
  readonly family: Family;
  readonly totalMs: number;
  readonly buildMs: number;
  readonly applyMs: number;
  readonly lines: number;
  readonly bareRestoreMs: number;
  /** ratio: totalMs / bareRestoreMs. */
  readonly ratio: number;
}

export interface FamilyPartial {
  readonly family: Family;
  readonly ms: number;
  readonly buildMs: number;
  readonly applyMs: number;
  readonly lines: number;
}

export interface DualStackRun {
  readonly services: number;
  readonly endpointsPerFamily: number;
  readonly flavor: Flavor;
  readonly families: readonly FamilySync[];
  /** ratio: wallMs over bareSideBySideMs, like for like (older results: sumRatio's meaning). */
  readonly ratio: number;
  /** sumRatio: both families' sync times summed over both bare restores alone summed. */
  readonly sumRatio?: number;
  /** wallMs: from the first family's sync starting to the last one ending (the loops run side by side). */
  readonly wallMs: number;
  /** bareSideBySideMs: both families' inputs restored at once by bare restores in two fresh namespaces, wall time. */
  readonly bareSideBySideMs?: number;
  readonly partial: readonly FamilyPartial[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** extraService is one more single-stack Service of a family with two endpoints (a partial sync's change). */
function extraService(family: Family, k: number): (Service | EndpointSlice)[] {
  const name = `extra-${family.toLowerCase()}-${k}`;
  const v6 = family === 'IPv6';
  const clusterIP = v6 ? ip6Text('fd00:97::', k) : ipText(0x0a6f0000 + k);
  return [
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name, namespace: 'bench-extra' },
      spec: { clusterIP, clusterIPs: [clusterIP], ipFamilies: [family], ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 8080 }] },
    },
    {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: `${name}-a1b2c`, namespace: 'bench-extra', labels: { 'kubernetes.io/service-name': name } },
      addressType: family,
      ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
      endpoints: [0, 1].map((e) => ({ addresses: [v6 ? ip6Text('fd00:65::', k * 16 + e) : ipText(0x0a7f0000 + k * 16 + e)], conditions: { ready: true }, nodeName: `node-${e + 1}` })),
    },
  ];
}

export async function dualStackRun(o: { services: number; endpoints: number; flavor: Flavor; workDir: string; partialReps: number }): Promise<DualStackRun> {
  const cluster = generateCluster({ services: o.services, endpointsPerService: o.endpoints, nodeName: NODE_NAME, nodeIP: '10.250.0.2', dualStack: true });
  const m = writeManifests(cluster, join(o.workDir, `dual-${o.services}x${o.endpoints}`), 0);
  const ns = createNetns('dual');
  let daemon: Daemon | null = null;
  let agent: Agent | null = null;
  try {
    daemon = new Daemon({ ns, manifests: m.dir, flavor: o.flavor, nodeName: NODE_NAME, clusterCIDR: `${POD_CIDR},${POD_CIDR6}` });
    const d = daemon;
    const first = { IPv4: await d.nextSync(0, 900_000, 'IPv4'), IPv6: await d.nextSync(0, 900_000, 'IPv6') };
    for (const s of Object.values(first)) if (!s.ok || !s.full) throw new Error(`first ${s.family} sync ${s.ok ? 'was not full' : `failed: ${s.error}`}`);
    agent = new Agent(ns);
    const families: FamilySync[] = [];
    const inputs: { input: string; family: Family }[] = [];
    for (const family of ['IPv4', 'IPv6'] as const) {
      const input = await agent.get(`${METRICS}/api/v1/restore-input/last?family=${family}`);
      inputs.push({ input, family });
      const bare = replayFresh(o.flavor, input, family);
      const s = first[family];
      families.push({ family, totalMs: s.ms, buildMs: s.buildMs, applyMs: s.applyMs, lines: s.lines, bareRestoreMs: bare, ratio: s.ms / bare });
    }
    const bareSideBySideMs = await replayFreshSideBySide(o.flavor, inputs);
    const start = Math.min(...Object.values(first).map((s) => s.at - s.ms));
    const end = Math.max(...Object.values(first).map((s) => s.at));
    const partial: FamilyPartial[] = [];
    let k = 0;
    for (let rep = 0; rep < o.partialReps; rep++) {
      for (const family of ['IPv4', 'IPv6'] as const) {
        await sleep(1300); // beyond minSyncPeriod: each change gets a sync of its own
        const after = d.lastSeq;
        writeAtomically(m.dir, `extra-${++k}.json`, JSON.stringify({ apiVersion: 'v1', kind: 'List', items: extraService(family, k) }));
        let sync = await d.nextSync(after, 60_000, family);
        while (sync.ok && sync.servicesChanged === 0) sync = await d.nextSync(sync.seq, 60_000, family);
        if (!sync.ok || sync.full) throw new Error(`the ${family} partial sync ${sync.ok ? 'was full' : `failed: ${sync.error}`}`);
        partial.push({ family, ms: sync.ms, buildMs: sync.buildMs, applyMs: sync.applyMs, lines: sync.lines });
      }
    }
    const sum = (f: (x: FamilySync) => number) => families.reduce((n, x) => n + f(x), 0);
    return {
      services: o.services,
      endpointsPerFamily: o.endpoints,
      flavor: o.flavor,
      families,
      ratio: (end - start) / bareSideBySideMs,
      sumRatio: sum((x) => x.totalMs) / sum((x) => x.bareRestoreMs),
      wallMs: end - start,
      bareSideBySideMs,
      partial,
    };
  } finally {
    agent?.stop();
    if (daemon) await daemon.stop();
    deleteNetns(ns);
  }
}

/** renderDualStack is the report's section for the dual-stack runs. */
export function renderDualStack(runs: readonly DualStackRun[]): string {
  const out = [
    '#### Dual-stack (one proxier per family)',
    '',
    "*full sync*: each family's first sync, as its proxier logs it (kproxy's own time in brackets). The families sync side by side, so each one's time includes the other's restore competing for the cores; *bare restore* is that family's input alone in a fresh namespace. The headline (bold) is like for like: from the first family's sync starting to both programmed, over both inputs restored by bare restores side by side in two fresh namespaces.",
    '',
    '| cluster | flavour | family | full sync | bare restore | ratio | lines |',
    '|---|---|---|---|---|---|---|',
  ];
  for (const r of runs) {
    for (const f of r.families) {
      out.push(
        `| ${r.services} × ${r.endpointsPerFamily} per family | ${r.flavor} | ${f.family} | ${f.totalMs.toFixed(0)} ms (kproxy ${f.buildMs.toFixed(0)} ms) | ${f.bareRestoreMs.toFixed(0)} ms | ${f.ratio.toFixed(2)} | ${f.lines} |`,
      );
    }
    const sumSync = r.families.reduce((n, f) => n + f.totalMs, 0);
    const sumBare = r.families.reduce((n, f) => n + f.bareRestoreMs, 0);
    if (r.bareSideBySideMs === undefined) {
      out.push(`| | | both | ${sumSync.toFixed(0)} ms (wall ${r.wallMs.toFixed(0)} ms) | ${sumBare.toFixed(0)} ms | **${r.ratio.toFixed(2)}** | |`);
    } else {
      out.push(`| | | both, summed | ${sumSync.toFixed(0)} ms | ${sumBare.toFixed(0)} ms (each alone) | ${(r.sumRatio ?? NaN).toFixed(2)} | |`);
      out.push(`| | | both, side by side (wall) | ${r.wallMs.toFixed(0)} ms | ${r.bareSideBySideMs.toFixed(0)} ms (both at once) | **${r.ratio.toFixed(2)}** | |`);
    }
  }
  out.push('', '| cluster | flavour | family | partial sync (one Service added), median | kernel | lines |', '|---|---|---|---|---|---|');
  for (const r of runs) {
    for (const family of ['IPv4', 'IPv6'] as const) {
      const ps = r.partial.filter((p) => p.family === family).sort((a, b) => a.ms - b.ms);
      if (ps.length === 0) continue;
      const med = ps[Math.floor(ps.length / 2)];
      out.push(`| ${r.services} × ${r.endpointsPerFamily} | ${r.flavor} | ${family} | ${med.ms.toFixed(0)} ms (kproxy ${med.buildMs.toFixed(1)} ms) | ${med.applyMs.toFixed(0)} ms | ${med.lines} |`);
    }
  }
  return out.join('\n') + '\n';
}

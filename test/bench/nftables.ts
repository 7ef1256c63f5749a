/**
 * nftables is a short bench of nftables mode on a synthetic cluster (the
 * generator of `npm run bench`), in private network namespaces (kpt-bench-*,
 * removed at the end and on interruption). Needs root and nft.
 *
 *   node test/bench/nftables.ts [--services 10000] [--endpoints 10] [--reps 3]
 *
 * It measures, as the daemon logs them (durationMs = buildMs, kproxy's own
 * time, + applyMs, the kernel's):
 * - the first full sync, and a bare `nft -f` of the same table in a fresh
 *   namespace (kproxy's --dry-run writes it: every command of that first
 *   transaction, in a loadable order), their ratio;
 * - partial syncs: one service added, one endpoint changed, one service removed;
 * - a restart over the table already right: from spawn to the first sync, and
 *   the lines it wrote (0).
 * Timings on a shared machine are noisy; the lines written are not.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { generateCluster, POD_CIDR } from './cluster.ts';
import { Daemon, killAll, type SyncLog } from './daemon.ts';
import { writeAtomically, writeManifests, writeSlice } from './manifests.ts';
import { createNetns, deleteNetns, removeAll } from './netns.ts';
import { movedSlice } from './partial-sync.ts';

const { values: opts } = parseArgs({
  options: {
    services: { type: 'string', default: '10000' },
    endpoints: { type: 'string', default: '10' },
    reps: { type: 'string', default: '3' },
  },
});
const ROOT = join(import.meta.dirname, '..', '..');
const NODE_NAME = 'bench-node';
const NFT = ['--proxy-mode=nftables', '--metrics-bind-address='];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function onSignal(): void {
  killAll();
  removeAll();
  process.exit(130);
}
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);

/** bareNft times `nft -f` of a transaction in a fresh namespace (best of 3). */
function bareNft(text: string): number {
  let best = Infinity;
  for (let i = 0; i < 3; i++) {
    const ns = createNetns('nft-bare');
    try {
      const t0 = performance.now();
      execFileSync('ip', ['netns', 'exec', ns, 'nft', '-f', '-'], { input: text, maxBuffer: 1 << 30 });
      best = Math.min(best, performance.now() - t0);
    } finally {
      deleteNetns(ns);
    }
  }
  return best;
}

async function firstSync(d: Daemon): Promise<SyncLog> {
  const s = await d.nextSync(0, 600_000);
  if (!s.ok) throw new Error(`first sync failed: ${s.error}`);
  return s;
}

async function nextChange(d: Daemon, after: number): Promise<SyncLog> {
  let s = await d.nextSync(after, 120_000);
  while (s.ok && s.servicesChanged === 0) s = await d.nextSync(s.seq, 120_000);
  if (!s.ok) throw new Error(`sync failed: ${s.error}`);
  return s;
}

const fmt = (s: SyncLog) => `${Math.round(s.ms)} ms (build ${Math.round(s.buildMs)}, kernel ${Math.round(s.applyMs)}), ${s.lines} lines, ${s.full ? 'full' : 'partial'}`;

async function main(): Promise<void> {
  const services = Number(opts.services);
  const endpoints = Number(opts.endpoints);
  const reps = Number(opts.reps);
  const cluster = generateCluster({ services, endpointsPerService: endpoints, nodeName: NODE_NAME, nodeIP: '10.250.0.2' });
  const dir = mkdtempSync(join(tmpdir(), 'kpt-bench-nft-'));
  const m = writeManifests(cluster, join(dir, 'cluster'), 20);
  const daemonOpts = { manifests: m.dir, flavor: 'auto' as const, nodeName: NODE_NAME, clusterCIDR: POD_CIDR, metrics: false, extraArgs: NFT };
  console.log(`nftables mode at ${services} services x ${endpoints} endpoints (manifests ${(m.bytes / 1048576).toFixed(1)} MiB)`);
  const ns = createNetns('nft');
  try {
    const d = new Daemon({ ns, ...daemonOpts });
    const first = await firstSync(d);
    console.log(`first full sync: ${fmt(first)}`);
    const table = execFileSync(
      process.execPath,
      [
        join(ROOT, 'server', 'cli.ts'),
        '--once',
        '--dry-run',
        `--source=file:${m.dir}`,
        `--hostname-override=${NODE_NAME}`,
        `--cluster-cidr=${POD_CIDR}`,
        '--proxy-mode=nftables',
        '--logging-format=json',
      ],
      { encoding: 'utf8', maxBuffer: 1 << 30, cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] },
    )
      .split('\n')
      .filter((l) => l.startsWith('add '))
      .join('\n');
    const bare = bareNft(table + '\n');
    console.log(
      `bare nft -f of the same ${table.split('\n').length} commands: ${Math.round(bare)} ms; kproxy / bare = ${(first.ms / bare).toFixed(2)} (build+kernel / bare = ${((first.buildMs + first.applyMs) / bare).toFixed(2)})`,
    );

    const targets = [...m.churn.keys()];
    for (let rep = 0; rep < reps; rep++) {
      await sleep(1300);
      let after = d.lastSeq;
      const name = `extra-${rep}.json`;
      const svc = {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: `extra-${rep}`, namespace: 'bench-extra' },
        spec: { clusterIP: `10.111.0.${rep + 1}`, ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 8080 }] },
      };
      const slice = {
        apiVersion: 'discovery.k8s.io/v1',
        kind: 'EndpointSlice',
        metadata: { name: `extra-${rep}-a1b2c`, namespace: 'bench-extra', labels: { 'kubernetes.io/service-name': `extra-${rep}` } },
        addressType: 'IPv4',
        ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
        endpoints: Array.from({ length: endpoints }, (_, e) => ({ addresses: [`10.127.${rep}.${e + 1}`], conditions: { ready: true }, nodeName: `node-${e + 1}` })),
      };
      writeAtomically(m.dir, name, JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [svc, slice] }));
      console.log(`one service added: ${fmt(await nextChange(d, after))}`);
      await sleep(1300);
      after = d.lastSeq;
      const t = targets[rep % targets.length];
      writeSlice(m, t, movedSlice(cluster, t, Date.now()));
      console.log(`one endpoint changed: ${fmt(await nextChange(d, after))}`);
      await sleep(1300);
      after = d.lastSeq;
      unlinkSync(join(m.dir, name));
      console.log(`one service removed: ${fmt(await nextChange(d, after))}`);
    }
    await sleep(1300);
    await d.stop();
    const t0 = Date.now();
    const again = new Daemon({ ns, ...daemonOpts });
    const restart = await firstSync(again);
    console.log(`restart over the right table: first sync ${Date.now() - t0} ms after spawn: ${fmt(restart)}`);
    await again.stop();
  } finally {
    killAll();
    deleteNetns(ns);
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  killAll();
  removeAll();
  process.exit(1);
});

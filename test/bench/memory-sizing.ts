/**
 * memory-sizing measures what the DaemonSet's memory request and limit must
 * cover (docs/deploy.md, "Memory"): the built daemon exactly as the image
 * starts it (node with SHIPPED_NODE_FLAGS, dist/server/cli.js, the shipped
 * ConfigMap's config.conf, the Kubernetes source) against the fake API server
 * holding a synthetic cluster, in a namespace of its own. Memory is read from
 * /proc/PID/status, outside the process: VmRSS idle (30 s after the first
 * sync, nothing asked of it), VmHWM (the peak so far) after the first sync,
 * and both again after a minute of EndpointSlice churn.
 *
 *   node_modules/.bin/node test/bench/memory-sizing.ts [--sizes 0x0,1000x10,10000x10] [--churn-seconds 60]
 *
 * Needs root and a built daemon (npm run build). Prints a Markdown table.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, release, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { parse as parseYaml } from 'yaml';
import { ApiChurnDriver } from './api-churn.ts';
import { SHIPPED_NODE_FLAGS, daemonEnv, procStats, track } from './daemon.ts';
import { NODE_NAME } from './full-sync.ts';
import { createNetns, deleteNetns, removeAll } from './netns.ts';
import { MiB } from './stats.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const CLI = join(ROOT, 'dist', 'server', 'cli.js');
const NODE_IP = '10.250.0.2';

const { values: opts } = parseArgs({
  options: {
    sizes: { type: 'string', default: '0x0,1000x10,5000x10,10000x10' },
    'churn-seconds': { type: 'string', default: '60' },
    'idle-seconds': { type: 'string', default: '30' },
    /** node-args: Node.js flags added to the shipped ones, e.g. --max-old-space-size=256 (the old generation V8 sizes itself under a 1 GiB memory limit). */
    'node-args': { type: 'string', default: '' },
  },
});
const sizes = opts.sizes!.split(',').map((s) => {
  const [services, endpoints] = s.split('x').map(Number);
  return { services, endpoints };
});
const churnSeconds = Number(opts['churn-seconds']);
const idleMs = Number(opts['idle-seconds']) * 1000;
const extraNodeArgs = opts['node-args']!.split(' ').filter(Boolean);

interface Row {
  services: number;
  endpoints: number;
  firstSyncMs: number;
  idleRssMiB: number;
  peakAtSyncMiB: number;
  afterChurnRssMiB: number;
  peakMiB: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (msg: string) => process.stderr.write(`[memory ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);

/** shippedConfig writes deploy/configmap.yaml's config.conf to dir. */
function shippedConfig(dir: string): string {
  const cm = parseYaml(readFileSync(join(ROOT, 'deploy', 'configmap.yaml'), 'utf8')) as { data: Record<string, string> };
  const path = join(dir, 'config.conf');
  writeFileSync(path, cm.data['config.conf']);
  return path;
}

/** startDaemon runs the built CLI as the image's ENTRYPOINT does, with the DaemonSet's arguments (file paths local). */
function startDaemon(ns: string, config: string, kubeconfig: string): { child: ChildProcess; firstSync: Promise<number> } {
  const args = [
    ...SHIPPED_NODE_FLAGS,
    ...extraNodeArgs,
    CLI,
    '--config',
    config,
    '--hostname-override',
    NODE_NAME,
    '--kubeconfig',
    kubeconfig,
    // nf_conntrack_max is global to the machine: never written from a benchmark.
    '--conntrack-max-per-core',
    '0',
  ];
  const child = track(spawn('ip', ['netns', 'exec', ns, process.execPath, ...args], { stdio: ['ignore', 'ignore', 'pipe'], env: daemonEnv(true) }));
  const firstSync = new Promise<number>((resolve, reject) => {
    createInterface({ input: child.stderr! }).on('line', (line) => {
      // The IPv4 family's first sync (the shipped config is dual-stack: the IPv6 family, with no Services here,
      // finishes first and takes seq 1; the line names the family first: family=IPv4 seq=2 …).
      const m = / synced fully family=IPv4 .*\bms=(\d+)/.exec(line);
      if (m) resolve(Number(m[1]));
      if (/ sync failed/.test(line)) reject(new Error(line));
    });
    child.on('exit', (code) => reject(new Error(`kproxy exited (${code}) before its first sync`)));
  });
  return { child, firstSync };
}

async function measure(size: { services: number; endpoints: number }): Promise<Row> {
  const ns = createNetns('mem');
  const dir = mkdtempSync(join(tmpdir(), 'kproxy-memory-'));
  const driver = new ApiChurnDriver(ns, size, NODE_IP, Math.min(100, size.services));
  let daemon: ChildProcess | null = null;
  try {
    const ready = await driver.ready;
    const started = startDaemon(ns, shippedConfig(dir), ready.kubeconfig);
    daemon = started.child;
    const firstSyncMs = await started.firstSync;
    const pid = daemon.pid!;
    const peakAtSync = procStats(pid).peakRss;
    await sleep(idleMs);
    const idle = procStats(pid).rss;
    if (size.services > 0 && churnSeconds > 0) await driver.churn(50, churnSeconds);
    await sleep(10_000);
    const after = procStats(pid);
    return {
      ...size,
      firstSyncMs,
      idleRssMiB: idle / MiB,
      peakAtSyncMiB: peakAtSync / MiB,
      afterChurnRssMiB: after.rss / MiB,
      peakMiB: after.peakRss / MiB,
    };
  } finally {
    if (daemon && daemon.exitCode === null) {
      const exited = new Promise((r) => daemon!.once('exit', r));
      daemon.kill('SIGTERM');
      await exited;
    }
    await driver.stop();
    deleteNetns(ns);
    rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('memory-sizing needs root (network namespaces)');
  log(`${cpus().length} cores (${cpus()[0]?.model ?? 'unknown'}), kernel ${release()}, node ${process.version}`);
  const rows: Row[] = [];
  for (const size of sizes) {
    log(`${size.services} × ${size.endpoints}: starting`);
    const row = await measure(size);
    log(JSON.stringify(row));
    rows.push(row);
  }
  const f = (n: number) => Math.round(n).toLocaleString('en-US');
  process.stdout.write(
    [
      '| Services × endpoints | first sync | RSS idle | peak to first sync | RSS after churn | peak overall |',
      '|---|---|---|---|---|---|',
      ...rows.map((r) => `| ${f(r.services)} × ${r.endpoints} | ${f(r.firstSyncMs)} ms | ${f(r.idleRssMiB)} MiB | ${f(r.peakAtSyncMiB)} MiB | ${f(r.afterChurnRssMiB)} MiB | ${f(r.peakMiB)} MiB |`),
    ].join('\n') + '\n',
  );
}

const cleanup = () => removeAll();
process.on('SIGINT', () => {
  cleanup();
  process.exit(130);
});
main()
  .catch((err: unknown) => {
    process.stderr.write(`memory-sizing failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  })
  .finally(cleanup);

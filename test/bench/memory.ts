/**
 * memory holds the memory part's measurements beyond a full sync's own
 * samples (full-sync.ts): the example cluster idle in each mode (what a
 * laptop demo or a small node holds), and a daemon at scale while a dashboard
 * client stays connected. Memory comes from /proc/PID (outside the process),
 * the live heap from the daemon's /metrics after a full GC (GC_ON_SIGUSR2).
 */
import { join } from 'node:path';
import type { PROXY_MODES } from '../../server/config/proxy-mode.ts';
import { Agent, Daemon } from './daemon.ts';
import { memorySample, METRICS, type RunContext } from './full-sync.ts';
import { createNetns, deleteNetns, sh } from './netns.ts';
import { MiB, quantile } from './stats.ts';

const ROOT = join(import.meta.dirname, '..', '..');
/** EXAMPLES: the example cluster (`deploy/examples/`), what `kproxy --dry-run` reads by default. */
export const EXAMPLES = join(ROOT, 'deploy', 'examples');
/** EXAMPLE_NODE: the example cluster's node kproxy runs as without --hostname-override. */
const EXAMPLE_NODE = 'node-a';

export type Mode = (typeof PROXY_MODES)[number];

/** ExampleIdle is a daemon on the example cluster, idle after its first sync. */
export interface ExampleIdle {
  readonly mode: Mode;
  /** rssMiB: RSS idleMs after the first sync; peakRssMiB: VmHWM then. */
  readonly rssMiB: number;
  readonly peakRssMiB: number;
  readonly afterGcRssMiB: number;
  /** heapMiB: the live heap after a full GC. */
  readonly heapMiB: number;
}

/**
 * exampleIdle runs `kproxy --dry-run --proxy-mode MODE` on the example cluster
 * (the simulated kernel: what the demo runs, and the smallest daemon there
 * is), waits idleMs after its first sync and reads its memory.
 */
export async function exampleIdle(mode: Mode, idleMs: number): Promise<ExampleIdle> {
  const ns = createNetns('example');
  // The example node's address on a link of its own (a veth pair inside the namespace: kernels without the
  // dummy link type have veth): userspace mode sends the node's own service traffic to it.
  sh('ip', ['-n', ns, 'link', 'add', 'kpt-node', 'type', 'veth', 'peer', 'name', 'kpt-peer']);
  sh('ip', ['-n', ns, 'addr', 'add', '10.0.0.10/24', 'dev', 'kpt-node']);
  for (const link of ['kpt-node', 'kpt-peer']) sh('ip', ['-n', ns, 'link', 'set', link, 'up']);
  const d = new Daemon({ ns, manifests: EXAMPLES, flavor: 'auto', nodeName: EXAMPLE_NODE, extraArgs: ['--dry-run', `--proxy-mode=${mode}`] });
  const agent = new Agent(ns);
  try {
    const first = await d.nextSync(0, 120_000);
    if (!first.ok) throw new Error(`the example cluster's first sync failed (${mode}): ${first.error}`);
    const s = await memorySample(d, idleMs, agent);
    return { mode, rssMiB: s.before.rss / MiB, peakRssMiB: s.afterGc.peakRss / MiB, afterGcRssMiB: s.afterGc.rss / MiB, heapMiB: s.heapAfterGc };
  } finally {
    agent.stop();
    await d.stop();
    deleteNetns(ns);
  }
}

/** ClientConnected is a daemon's memory while one dashboard client stays connected. */
export interface ClientConnected {
  /** snapshotMs: WebSocket open to the snapshot received. */
  readonly snapshotMs: number;
  /** kernelReadMs: WebSocket open to the dashboard's first read of the kernel done, drift included (what a client makes it hold). */
  readonly kernelReadMs?: number;
  /**
   * rssMiB: the RSS it holds with the client connected: the median of the last
   * third of the samples taken once a second for settleMs after that read.
   * maxRssMiB: the highest of those samples (garbage of the read not yet
   * collected); peakRssMiB: VmHWM then (the whole life so far).
   */
  readonly rssMiB: number;
  readonly maxRssMiB?: number;
  readonly peakRssMiB: number;
  readonly afterGcRssMiB: number;
  readonly heapMiB: number;
}

/**
 * clientConnected opens the dashboard's WebSocket as a browser does, waits for
 * the snapshot and for the dashboard's read of the kernel to be done, drift
 * included (a connected client makes it read and parse the kernel's rules,
 * and what kproxy wrote, and hold both while someone looks), then samples the
 * daemon's RSS once a second for settleMs with the client still connected,
 * then closes it. The next read comes 10 × a read's time later (the reader's
 * rate limit), after the samples at 10,000 × 10.
 */
export async function clientConnected(ctx: Pick<RunContext, 'daemon' | 'agent'>, settleMs: number): Promise<ClientConnected> {
  const before = ctx.agent.wsMessages.length;
  const t0 = Date.now();
  await ctx.agent.call({ op: 'ws', url: `${METRICS.replace('http', 'ws')}/ws` });
  while (!ctx.agent.wsMessages.slice(before).some((m) => m.type === 'snapshot')) {
    if (Date.now() - t0 > 120_000) throw new Error('no dashboard snapshot within 120 s');
    await new Promise((r) => setTimeout(r, 20));
  }
  const snap = ctx.agent.wsMessages.slice(before).find((m) => m.type === 'snapshot')!;
  try {
    let kernelReadMs = NaN;
    for (;;) {
      const status = JSON.parse(await ctx.agent.get(`${METRICS}/api/v1/status`)) as { overview: { kernel: { readAt: number | null; readMs: number | null } } };
      const k = status.overview.kernel;
      // readMs is set when the whole read is done (parse, what kproxy wrote, drift); readAt when the listing was read.
      if (k.readAt !== null && k.readAt >= t0 && k.readMs !== null) {
        kernelReadMs = Date.now() - t0;
        break;
      }
      if (Date.now() - t0 > 300_000) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    const samples: number[] = [];
    for (let waited = 0; waited < settleMs; waited += 1000) {
      await new Promise((r) => setTimeout(r, 1000));
      samples.push(ctx.daemon.stats().rss / MiB);
    }
    const last = samples.slice(-Math.max(1, Math.floor(samples.length / 3)));
    const s = await memorySample(ctx.daemon, 0, ctx.agent);
    return {
      snapshotMs: snap.connectMs ?? NaN,
      kernelReadMs,
      rssMiB: quantile(last, 0.5),
      maxRssMiB: Math.max(...samples),
      peakRssMiB: s.afterGc.peakRss / MiB,
      afterGcRssMiB: s.afterGc.rss / MiB,
      heapMiB: s.heapAfterGc,
    };
  } finally {
    await ctx.agent.call({ op: 'ws-close' });
  }
}

/**
 * machine describes where the benchmark ran: cores, memory, kernel, the
 * iptables binaries and which flavour kproxy's --iptables-flavor auto picks
 * in a fresh namespace, Node.js, and the kproxy commit measured.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { cpus, release, totalmem, loadavg } from 'node:os';
import { join } from 'node:path';
import { Daemon } from './daemon.ts';
import { writeProbe } from './dataplane.ts';
import { NODE_NAME } from './full-sync.ts';
import { createNetns, deleteNetns } from './netns.ts';

export interface Machine {
  readonly cores: number;
  readonly cpu: string;
  readonly memoryGiB: number;
  readonly kernel: string;
  readonly iptables: { legacy: string; nft: string; system: string };
  /** autoFlavor: what --iptables-flavor auto chose in a fresh namespace, and why. */
  readonly autoFlavor: { flavor: string; why: string };
  readonly node: string;
  readonly commit: string;
  readonly dirty: boolean;
  /** loadAverage: 1, 5 and 15 minute load averages when the run started (a shared machine is rarely idle; older results: absent). */
  readonly loadAverage?: readonly number[];
}

function version(bin: string): string {
  try {
    return execFileSync(bin, ['--version'], { encoding: 'utf8' }).trim();
  } catch {
    return 'not installed';
  }
}

function git(args: string[]): string {
  try {
    return execFileSync('git', args, { encoding: 'utf8', cwd: join(import.meta.dirname, '..', '..') }).trim();
  } catch {
    return '';
  }
}

/** autoFlavor starts kproxy with --iptables-flavor auto on a one-service manifest in a fresh namespace. */
async function autoFlavor(dir: string): Promise<{ flavor: string; why: string }> {
  mkdirSync(dir, { recursive: true });
  writeProbe(dir);
  const ns = createNetns('auto');
  const d = new Daemon({ ns, manifests: dir, flavor: 'auto', nodeName: NODE_NAME, clusterCIDR: '10.64.0.0/10', metrics: false });
  try {
    const l = await d.waitFor((x) => x.msg === 'using iptables', 30_000, 'the flavour decision');
    return { flavor: String(l.flavor), why: String(l.why) };
  } finally {
    await d.stop();
    deleteNetns(ns);
  }
}

export async function describeMachine(scratch: string): Promise<Machine> {
  return {
    cores: cpus().length,
    cpu: cpus()[0]?.model ?? 'unknown',
    memoryGiB: Math.round((totalmem() / 1024 ** 3) * 10) / 10,
    kernel: release(),
    iptables: { legacy: version('iptables-legacy'), nft: version('iptables-nft'), system: version('iptables') },
    autoFlavor: await autoFlavor(scratch),
    node: process.version,
    commit: git(['rev-parse', '--short', 'HEAD']),
    dirty: git(['status', '--porcelain', '--', 'server']) !== '',
    loadAverage: loadavg().map((x) => Math.round(x * 100) / 100),
  };
}

/**
 * replay feeds a restore input to a bare iptables-restore in a fresh
 * namespace: the kernel's own time for exactly what kproxy wrote, with the
 * same flags kproxy passes. That is the denominator of the headline ratio.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createNetns, deleteNetns } from './netns.ts';

export type Flavor = 'nft' | 'legacy';

/** restoreFlags: kproxy's (server/kernel/iptables.ts WAIT_FLAGS + --noflush --counters). */
export const RESTORE_FLAGS = ['-w', '5', '-W', '100000', '--noflush', '--counters'];

/** timeRestore runs iptables-<flavor>-restore (ip6tables-… for IPv6) on input inside ns and returns wall ms (throws on failure). */
export function timeRestore(ns: string, flavor: Flavor, input: string, timeoutMs = 600_000, family: 'IPv4' | 'IPv6' = 'IPv4'): number {
  const bin = `${family === 'IPv6' ? 'ip6tables' : 'iptables'}-${flavor}-restore`;
  const t0 = performance.now();
  const r = spawnSync('ip', ['netns', 'exec', ns, bin, ...RESTORE_FLAGS], { input, encoding: 'utf8', timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 });
  const ms = performance.now() - t0;
  if (r.error) throw new Error(`${bin}: ${r.error.message}${r.stderr ? `: ${r.stderr.slice(0, 500)}` : ''}`);
  if (r.status !== 0) throw new Error(`${bin} failed (exit ${r.status}): ${r.stderr.slice(0, 500)}`);
  return ms;
}

/**
 * nfacctObjects: the nfacct counters an input's rules name (`-m nfacct --nfacct-name X`). kproxy makes them
 * (nfacct add) before its first restore; they are per namespace, so a fresh one needs them too, untimed.
 */
export function nfacctObjects(input: string): string[] {
  return [...new Set([...input.matchAll(/--nfacct-name (\S+)/g)].map((m) => m[1]))];
}

/** replayFresh restores input into a namespace made for it (with the nfacct objects it names), then removes the namespace. */
export function replayFresh(flavor: Flavor, input: string, family: 'IPv4' | 'IPv6' = 'IPv4'): number {
  const ns = createNetns('replay');
  try {
    for (const name of nfacctObjects(input)) execFileSync('ip', ['netns', 'exec', ns, 'nfacct', 'add', name], { stdio: 'ignore' });
    return timeRestore(ns, flavor, input, 600_000, family);
  } finally {
    deleteNetns(ns);
  }
}

/**
 * replayFreshSideBySide restores several inputs at once, each with its own bare restore in a namespace made for
 * it, and returns the wall ms until the last one finished: the kernel's time for what a dual-stack node's two
 * proxiers write side by side (they share the machine's cores as the bare restores do here).
 */
export async function replayFreshSideBySide(flavor: Flavor, inputs: readonly { input: string; family: 'IPv4' | 'IPv6' }[]): Promise<number> {
  const spaces = inputs.map(() => createNetns('replay'));
  try {
    spaces.forEach((ns, i) => {
      for (const name of nfacctObjects(inputs[i].input)) execFileSync('ip', ['netns', 'exec', ns, 'nfacct', 'add', name], { stdio: 'ignore' });
    });
    const t0 = performance.now();
    await Promise.all(
      inputs.map(
        ({ input, family }, i) =>
          new Promise<void>((resolve, reject) => {
            const bin = `${family === 'IPv6' ? 'ip6tables' : 'iptables'}-${flavor}-restore`;
            const child = spawn('ip', ['netns', 'exec', spaces[i], bin, ...RESTORE_FLAGS], { stdio: ['pipe', 'ignore', 'pipe'] });
            let stderr = '';
            child.stderr.on('data', (b: Buffer) => (stderr += b.toString('utf8')));
            child.on('error', reject);
            child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${bin} failed (exit ${code}): ${stderr.slice(0, 500)}`))));
            child.stdin.end(input);
          }),
      ),
    );
    return performance.now() - t0;
  } finally {
    for (const ns of spaces) deleteNetns(ns);
  }
}

import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { execFile } from '../../server/kernel/exec.ts';
import { tiers } from '../tiers.ts';
import { waitFor } from '../wait.ts';
import { CLI, ROOT, sh } from './conntrack-net.ts';

/**
 * The conntrack sysctls on the real kernel, from a daemon started in a
 * network namespace of its own. The timeouts and tcp_be_liberal are per
 * namespace and writable there: they are set, and the root namespace's stay
 * as they were. nf_conntrack_max (and the hash size that follows it) belong to
 * the initial namespace: the write is refused, the daemon says which sysctl
 * and why, and runs on.
 */

const NF = '/proc/sys/net/netfilter/';
const TIMEOUTS = {
  nf_conntrack_tcp_timeout_established: '7200',
  nf_conntrack_tcp_timeout_close_wait: '1800',
  nf_conntrack_tcp_be_liberal: '1',
  nf_conntrack_udp_timeout: '45',
  nf_conntrack_udp_timeout_stream: '150',
};
const FLAGS = [
  '--conntrack-tcp-timeout-established',
  '2h',
  '--conntrack-tcp-timeout-close-wait',
  '30m',
  '--conntrack-tcp-be-liberal',
  '--conntrack-udp-timeout',
  '45s',
  '--conntrack-udp-timeout-stream',
  '150s',
];

const ns = `kpt-ct-${process.pid}-sysctl`;
let pid: number | null = null;
afterEach(async () => {
  if (pid !== null) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Already exited.
    }
    pid = null;
  }
  await execFile('ip', ['netns', 'del', ns], { timeoutMs: 30_000 });
});

async function rootValues(): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const name of [...Object.keys(TIMEOUTS), 'nf_conntrack_max']) out[name] = (await readFile(NF + name, 'utf8')).trim();
  out.hashsize = (await readFile('/sys/module/nf_conntrack/parameters/hashsize', 'utf8')).trim();
  return out;
}

describe.skipIf(!tiers().kernel.ok)('conntrack sysctls in a network namespace', () => {
  it('sets the per-namespace timeouts, reports the refused nf_conntrack_max by name and reason, and keeps running', async () => {
    await sh('ip', ['netns', 'add', ns]);
    await sh('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
    const inNs = (file: string) => sh('ip', ['netns', 'exec', ns, 'cat', file]).then((s) => s.trim());
    const maxMode = (await sh('ip', ['netns', 'exec', ns, 'stat', '-c', '%a', NF + 'nf_conntrack_max'])).trim();
    const maxReadOnly = maxMode === '444';
    const nsMax = Number(await inNs(NF + 'nf_conntrack_max'));
    const before = await rootValues();

    // Ask for more than the namespace shows, so the daemon must try to raise it. Where this kernel
    // lets a namespace write nf_conntrack_max, the max is left alone: the test must not change the host.
    const maxFlags = maxReadOnly ? ['--conntrack-max-per-core', '1', '--conntrack-min', String(nsMax + 4096)] : ['--conntrack-max-per-core', '0'];
    const child = spawn('ip', ['netns', 'exec', ns, process.execPath, CLI, '--source', 'file:deploy/examples/', '--hostname-override', 'node-a', ...FLAGS, ...maxFlags], {
      cwd: ROOT,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    pid = child.pid ?? null;
    let log = '';
    child.stderr!.setEncoding('utf8').on('data', (c: string) => (log += c));
    await waitFor(() => /synced fully/.test(log), { timeoutMs: 60_000, what: `the first sync\n${log}` });

    for (const [name, value] of Object.entries(TIMEOUTS)) expect(await inNs(NF + name), name).toBe(value);
    if (maxReadOnly) {
      const warning = log.split('\n').filter((l) => l.includes('cannot set net/netfilter/nf_conntrack_max'));
      expect(warning).toHaveLength(1);
      expect(warning[0]).toContain(`to ${nsMax + 4096}: permission denied: the kernel lets only the initial network namespace change it`);
      expect(log).not.toContain('hashsize');
    }
    // Nothing of the root namespace changed.
    expect(await rootValues()).toEqual(before);
    // Still serving: the refusal was not fatal.
    expect(child.exitCode).toBeNull();
    const healthz = await sh('ip', ['netns', 'exec', ns, 'curl', '-s', '-o', '/dev/null', '-w', '%{http_code}', 'http://127.0.0.1:10256/healthz']);
    expect(healthz).toBe('200');
  });
});

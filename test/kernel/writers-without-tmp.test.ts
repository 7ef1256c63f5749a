import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIpsetRunner } from '../../server/kernel/ipset.ts';
import { generateCluster } from '../bench/cluster.ts';
import { writeManifests } from '../bench/manifests.ts';
import { tiers } from '../tiers.ts';
import { CLI } from './harness/kproxy.ts';
import { addNamespace, deleteNamespace, HARNESS_PREFIX, ipBatch, nsExec, nsRun } from './harness/netns.ts';
import { nsExecFn } from './harness/nft.ts';

/**
 * The writers without a usable temporary directory. kproxy hands a restore
 * input of 4 MiB or more to its process as an unlinked temporary file, and
 * reads iptables-save's output back from one (server/kernel/exec.ts): with
 * TMPDIR naming a directory that does not exist, or a temporary file system
 * that is full, both must go through pipes instead, and a full sync of
 * 10,000 Services must land as it does with a temporary directory. A full
 * one is a tmpfs of 64 KiB mounted, filled, in a mount namespace of the
 * daemon's own (`unshare --mount`), so the machine's /tmp is never touched.
 */
const SERVICES = 10_000;
const MISSING = `/nonexistent-${HARNESS_PREFIX}tmp`;
let manifests: string;
let seq = 0;
const made: string[] = [];

async function node(): Promise<string> {
  const ns = `${HARNESS_PREFIX}notmp-${seq++}`;
  await addNamespace(ns);
  made.push(ns);
  await ipBatch(ns, ['link set lo up']);
  return ns;
}

/** once: `kproxy --once` over the 10,000 Services in ns, its exit code and output (env: what `env` sets before it). */
async function once(ns: string, env: readonly string[], args: readonly string[], wrap: (argv: string[]) => string[] = (a) => a) {
  const argv = [process.execPath, CLI, '--once', '--source', `file:${manifests}`, '--hostname-override', 'node-a', '--cluster-cidr', '10.64.0.0/10', '--conntrack-max-per-core', '0', ...args];
  return nsExec(ns, wrap(['env', ...env, ...argv]), { timeoutMs: 290_000 });
}

const kubeJumps = (nat: string) => nat.split('\n').filter((l) => /^-A (PREROUTING|OUTPUT) .*-j KUBE-SERVICES$/.test(l));

describe.skipIf(!tiers().kernel.ok)('restores without a usable temporary directory', () => {
  beforeAll(() => {
    manifests = mkdtempSync(join(tmpdir(), `${HARNESS_PREFIX}notmp-manifests-`));
    writeManifests(generateCluster({ services: SERVICES, endpointsPerService: 1, nodeName: 'node-a', nodeIP: '10.0.0.10' }), manifests, 0);
  });
  afterAll(async () => {
    for (const ns of made.splice(0)) await deleteNamespace(ns);
    rmSync(manifests, { recursive: true, force: true });
  });

  it(`iptables-restore (nft) programs ${SERVICES} Services with TMPDIR naming a missing directory`, { timeout: 180_000 }, async () => {
    const ns = await node();
    const r = await once(ns, [`TMPDIR=${MISSING}`], ['--iptables-flavor', 'nft']);
    expect(r.code, r.stderr.slice(-2000)).toBe(0);
    const nat = await nsRun(ns, ['iptables-nft-save', '-t', 'nat']);
    expect(nat.split('\n').filter((l) => l.startsWith(':KUBE-SVC-'))).toHaveLength(SERVICES);
    expect(kubeJumps(nat)).toHaveLength(2);
  });

  // nft 1.0.6 takes one to two minutes for this table on a busy 2-core machine.
  it(`nft -f programs ${SERVICES} Services with TMPDIR naming a missing directory`, { timeout: 300_000 }, async () => {
    const ns = await node();
    const r = await once(ns, [`TMPDIR=${MISSING}`], ['--proxy-mode', 'nftables', '--nftables-backend', 'nft']);
    expect(r.code, r.stderr.slice(-2000)).toBe(0);
    const table = await nsRun(ns, ['nft', 'list', 'table', 'ip', 'kube-proxy'], { timeoutMs: 60_000 });
    // One service chain per Service port, beside the fixed service-endpoints-check.
    expect(table.split('\n').filter((l) => /^\tchain service-/.test(l) && !l.includes('service-endpoints-check'))).toHaveLength(SERVICES);
  });

  it('ipset restore takes a 5 MB input through a pipe with TMPDIR naming a missing directory', async () => {
    const ns = await node();
    const lines = ['create kpt-big hash:ip family inet hashsize 65536 maxelem 262144'];
    for (let i = 0; i < 200_000; i++) lines.push(`add kpt-big 10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
    const input = lines.join('\n') + '\n';
    expect(input.length).toBeGreaterThan(4 << 20);
    const saved = process.env.TMPDIR;
    process.env.TMPDIR = MISSING;
    try {
      await createIpsetRunner({ exec: nsExecFn(ns), timeoutMs: 120_000 }).restore(input);
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
    }
    const header = await nsRun(ns, ['ipset', 'list', '-t', 'kpt-big']);
    expect(header).toMatch(/^Number of entries: 200000$/m);
  });

  it('a full sync over a full temporary file system reads the whole table and writes it once (no jump added twice)', { timeout: 180_000 }, async () => {
    const ns = await node();
    const first = await once(ns, [], ['--iptables-flavor', 'nft']);
    expect(first.code, first.stderr.slice(-2000)).toBe(0);
    const before = await nsRun(ns, ['iptables-nft-save', '-t', 'nat']);
    const full = `${tmpdir()}/${HARNESS_PREFIX}fulltmp-${seq++}`;
    mkdirSync(full);
    try {
      // iptables-save into a full temporary file loses its output and exits 0: a read that shows no
      // jump rules made the full sync insert them again.
      const fill = (argv: string[]) => [
        'unshare',
        '--mount',
        '--propagation',
        'private',
        'sh',
        '-c',
        `mount -t tmpfs -o size=64k kpt-full "$0" && { head -c 1048576 /dev/zero > "$0/fill" 2>/dev/null; exec "$@"; }`,
        full,
        ...argv,
      ];
      const second = await once(ns, [`TMPDIR=${full}`], ['--iptables-flavor', 'nft'], fill);
      expect(second.code, second.stderr.slice(-2000)).toBe(0);
      expect(second.stderr).toMatch(/synced fully family=IPv4 .*servicesChanged=10000/);
    } finally {
      rmSync(full, { recursive: true, force: true });
    }
    const after = await nsRun(ns, ['iptables-nft-save', '-t', 'nat']);
    expect(kubeJumps(after)).toEqual(kubeJumps(before));
    expect(kubeJumps(after)).toHaveLength(2);
    expect(after.split('\n').filter((l) => l.startsWith('-A ')).length).toBe(before.split('\n').filter((l) => l.startsWith('-A ')).length);
  });
});

import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { SyncVerification } from '../../server/proxy/sync-verify.ts';
import { tiers } from '../tiers.ts';
import { CLI } from './harness/kproxy.ts';
import { addNamespace, deleteNamespace, HARNESS_PREFIX, ipBatch } from './harness/netns.ts';

/**
 * Verified programming on the real kernel (issue 30). For the iptables mode,
 * IPVS mode's sets and glue chains and the userspace portals, in both iptables
 * flavours: a full sync verifies clean with another program's rules in the
 * namespace (in the built-in chains, and a chain of its own jumping into one
 * of kproxy's); the simulated kernel counts exactly what the real one
 * counts (chain use counts over netlink for nft, rules per chain from
 * iptables-legacy-save; entries per set from `ipset list -t`); and a kernel
 * changed behind kproxy's back between the write and the verification is
 * reported, the objects named. IPVS itself is simulated in the child: this
 * kernel has no ip_vs. Then the daemon: `--once` says what it verified, per
 * family.
 */
const ROOT = join(import.meta.dirname, '../..');
const CHILD = join(import.meta.dirname, 'verify-programming.child.ts');

type Brief = Pick<SyncVerification, 'objects' | 'mismatchCount' | 'mismatches'> & { skipped: string | null };
interface Counts {
  kind: string;
  source: string;
  tables: Record<string, Record<string, number>>;
}
interface Report {
  errors: (string | null)[];
  clean: Brief;
  counts: { real: Counts; simulated: Counts };
  sets: { real: Record<string, number>; simulated: Record<string, number> } | null;
  tampered: string[];
  after: Brief;
}

const namespaces: string[] = [];
afterEach(async () => {
  for (const ns of namespaces.splice(0)) await deleteNamespace(ns);
});
async function netns(tag: string): Promise<string> {
  const ns = `${HARNESS_PREFIX}verify-${tag}`;
  await addNamespace(ns);
  namespaces.push(ns);
  return ns;
}

function child(ns: string, mode: string, flavor: string): Report {
  const res = spawnSync('ip', ['netns', 'exec', ns, process.execPath, CHILD, mode, flavor], { encoding: 'utf8', cwd: ROOT, timeout: 120_000, maxBuffer: 16 * 1024 * 1024 });
  expect(res.status, res.stderr).toBe(0);
  return JSON.parse(res.stdout) as Report;
}

const what = (flavor: string) => (flavor === 'nft' ? 'rules and jumps to it' : 'rules');

describe.skipIf(!tiers().kernel.ok)('verified programming on the real kernel', () => {
  for (const flavor of ['nft', 'legacy'] as const) {
    // legacy: the tables counted in the netlink helper from the kernel's getsockopt copy (iptables-legacy-save only without the helper).
    const source = flavor === 'nft' ? 'netlink' : 'getsockopt';

    it(`iptables-${flavor}: verifies clean beside another program's rules, counts as the simulation does, and names what was changed before the verification`, async () => {
      const r = child(await netns(`ipt-${flavor}`), 'iptables', flavor);
      expect(r.errors).toEqual([null, null, null]);
      expect(r.clean).toMatchObject({ mismatchCount: 0, skipped: null });
      // 30 services' chains, the fixed chains, the canaries and the 14 jumps from built-in chains.
      expect(r.clean.objects).toBeGreaterThan(130);
      expect(r.counts.real).toMatchObject({ kind: flavor === 'nft' ? 'use' : 'rules', source });
      expect(r.counts.real.tables).toEqual(r.counts.simulated.tables);
      const sep = r.tampered[0];
      expect(r.after.mismatches).toEqual(
        expect.arrayContaining([
          { object: `chain nat ${sep}`, what: what(flavor), want: flavor === 'nft' ? 3 : 2, got: flavor === 'nft' ? 2 : 1, servicePort: expect.stringMatching(/^shop\/s\d+:http\/(TCP|UDP)$/) },
          { object: 'chain nat PREROUTING', what: 'rules jumping to KUBE-SERVICES', want: 1, got: 0 },
          { object: 'chain nat KUBE-SVC-TAMPEREDAAAAAAAAA', what: 'chain', want: 0, got: 1 },
        ]),
      );
      // With use counts, KUBE-MARK-MASQ lost the jump of the deleted rule too.
      expect(r.after.mismatchCount).toBe(flavor === 'nft' ? 4 : 3);
    }, 120_000);

    it(`IPVS mode, iptables-${flavor} and the real ipset: sets and glue chains verify clean and count as simulated; a set entry, a flushed chain and a lost real server are named`, async () => {
      const r = child(await netns(`ipvs-${flavor}`), 'ipvs', flavor);
      expect(r.errors).toEqual([null, null, null]);
      expect(r.clean).toMatchObject({ mismatchCount: 0, skipped: null });
      expect(r.counts.real.tables).toEqual(r.counts.simulated.tables);
      expect(r.sets!.real).toEqual(r.sets!.simulated);
      expect(r.sets!.real['KUBE-CLUSTER-IP']).toBe(30);
      expect(r.after.mismatches).toEqual([
        { object: 'virtual server 10.96.1.2:80/TCP', what: 'real servers', want: 3, got: 2, servicePort: 'shop/s2:http/TCP' },
        { object: 'ipset KUBE-CLUSTER-IP', what: 'entries', want: 30, got: 29 },
        // With use counts the chain also holds the jump from INPUT.
        { object: 'chain filter KUBE-IPVS-FILTER', what: what(flavor), want: flavor === 'nft' ? 7 : 6, got: flavor === 'nft' ? 1 : 0 },
      ]);
    }, 120_000);

    it(`userspace portals, iptables-${flavor}: verify clean and count as simulated; a flushed portal chain and a lost jump are named`, async () => {
      const r = child(await netns(`us-${flavor}`), 'userspace', flavor);
      expect(r.errors).toEqual([null, null, null]);
      expect(r.clean).toMatchObject({ objects: 10, mismatchCount: 0, skipped: null });
      expect(r.counts.real.tables).toEqual(r.counts.simulated.tables);
      expect(r.after.mismatches).toEqual([
        // 30 portal rules; with use counts the jumps from PREROUTING and from the other program's chain too.
        { object: 'chain nat KUBE-PORTALS-CONTAINER', what: what(flavor), want: flavor === 'nft' ? 32 : 30, got: flavor === 'nft' ? 2 : 0 },
        { object: 'chain filter INPUT', what: 'rules jumping to KUBE-NODEPORT-NON-LOCAL', want: 1, got: 0 },
      ]);
    }, 120_000);
  }

  it('--once says what it verified, per family, in each mode that runs on this kernel', async () => {
    const ns = await netns('once');
    // node-a's addresses (deploy/examples/nodes.yaml), on a veth pair inside the namespace.
    await ipBatch(ns, ['link set lo up', 'link add v0 type veth peer name v1', 'addr add 10.0.0.10/24 dev v0', 'addr add fd00:10::10/64 dev v0 nodad', 'link set v0 up', 'link set v1 up']);
    const once = (...args: string[]) => {
      const res = spawnSync(
        'ip',
        [
          'netns',
          'exec',
          ns,
          process.execPath,
          CLI,
          '--once',
          '--source',
          'file:deploy/examples',
          '--hostname-override',
          'node-a',
          '--cluster-cidr',
          '10.244.0.0/16',
          '--conntrack-max-per-core',
          '0',
          '--metrics-bind-address=',
          '--healthz-bind-address=',
          ...args,
        ],
        { encoding: 'utf8', cwd: ROOT, timeout: 60_000 },
      );
      expect(res.status, res.stderr).toBe(0);
      return res.stdout.trim().split('\n').at(-1)!;
    };
    const verified = /, verified \((\d+) objects in \d+ ms\)/.source;
    for (const flavor of ['nft', 'legacy']) {
      const line = once('--iptables-flavor', flavor);
      expect(line).toMatch(new RegExp(`^kproxy: synced iptables \\(${flavor}, dual-stack IPv4\\+IPv6\\) .*IPv4: 11 services .*\\)${verified}; IPv6: 2 services .*\\)${verified}$`));
    }
    expect(once('--proxy-mode', 'userspace', '--iptables-flavor', 'nft')).toMatch(new RegExp(`^kproxy: synced userspace .*IPv4: 11 services .*\\)${verified.replace('(\\d+)', '10')}$`));
  }, 180_000);
});

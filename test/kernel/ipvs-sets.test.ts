import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseIpsetSave, type IpsetSet } from '../../server/kernel/ipset.ts';
import { tiers } from '../tiers.ts';

/**
 * IPVS mode's ipsets and iptables rules on the real kernel, in private network
 * namespaces: the sets kproxy generates are created and filled by the real
 * `ipset restore` and `ipset save` lists them exactly as the simulated kernel
 * does; the iptables rules that match them are accepted; partial syncs and
 * cleanup work there too. Then the command line: --proxy-mode ipvs without
 * ip_vs exits 1 naming the module and touches nothing, --dry-run prints the
 * virtual servers, and --cleanup removes kube-proxy's sets after the rules.
 */
const ROOT = join(import.meta.dirname, '../..');
const CHILD = join(import.meta.dirname, 'ipvs-sets.child.ts');
const CLI = join(ROOT, 'dist/server/cli.js');

const namespaces: string[] = [];
function netns(tag: string): string {
  const ns = `kpt-ipvs-${tag}-${process.pid}`;
  execFileSync('ip', ['netns', 'add', ns]);
  namespaces.push(ns);
  return ns;
}
afterEach(() => {
  for (const ns of namespaces.splice(0)) {
    try {
      execFileSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
    } catch {
      // Already gone: nothing left to remove.
    }
  }
});

const inNs = (ns: string, cmd: string, args: string[], input?: string) =>
  spawnSync('ip', ['netns', 'exec', ns, cmd, ...args], { encoding: 'utf8', input, cwd: ROOT, timeout: 90_000, maxBuffer: 64 * 1024 * 1024 });

/** sets reduces ipset save output to name -> type and sorted entries (hash seeds and order do not matter). */
function sets(text: string): Record<string, { type: string; entries: string[] }> {
  const out: Record<string, { type: string; entries: string[] }> = {};
  for (const [name, s] of parseIpsetSave(text) as Map<string, IpsetSet>) out[name] = { type: s.type, entries: [...s.entries].sort() };
  return out;
}

interface Report {
  full: { full: boolean; error: string | null; twinError: string | null; batch: string; sets: string; twinSets: string; rules: string };
  partial: { full: boolean; error: string | null; batch: string; sets: string; twinSets: string; rules: string };
  iptablesCleanup: { removed: Record<string, number>; errors: string[] };
  ipvsCleanup: { removed: Record<string, number>; errors: string[] };
  again: { removed: Record<string, number>; errors: string[] };
  afterCleanup: { sets: string; rules: string };
  ipvsMatch: string | null;
  hasIpvs: boolean;
}

describe.skipIf(!tiers().kernel.ok)('IPVS mode sets and rules on the real kernel', () => {
  for (const flavor of ['nft', 'legacy'] as const) {
    it(`ipset restore and iptables-${flavor}-restore take what kproxy generates; ipset save shows the simulated kernel's sets`, () => {
      const ns = netns(`sets-${flavor}`);
      const res = inNs(ns, process.execPath, [CHILD, flavor]);
      expect(res.status, res.stderr).toBe(0);
      const r = JSON.parse(res.stdout) as Report;

      expect(r.full.error).toBeNull();
      expect(r.full.twinError).toBeNull();
      expect(r.full.full).toBe(true);
      const full = sets(r.full.sets);
      expect(full).toEqual(sets(r.full.twinSets));
      expect(Object.keys(full)).toHaveLength(17);
      expect(full['KUBE-CLUSTER-IP'].entries).toContain('10.96.10.10,tcp:80');
      expect(full['KUBE-NODE-PORT-TCP']).toMatchObject({ type: 'bitmap:port' });
      expect(full['KUBE-NODE-PORT-TCP'].entries).toContain('30080');
      expect(full['KUBE-LOAD-BALANCER-SOURCE-CIDR'].entries).toContain('192.0.2.10,tcp:443,203.0.113.0/24');
      expect(full['KUBE-LOAD-BALANCER-SOURCE-IP'].entries).toEqual(['192.0.2.10,tcp:443,192.0.2.10']);
      expect(full['KUBE-IPVS-IPS'].entries).toContain('10.96.0.10');
      // The kernel holds the rules that match the sets, and the jumps into them.
      expect(r.full.rules).toContain('-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT');
      // iptables-save prints the address match first: "-A KUBE-SERVICES ! -s 10.244.0.0/16 -m comment ...".
      const masq = r.full.rules.split('\n').find((l) => l.includes('--match-set KUBE-CLUSTER-IP dst,dst') && l.endsWith('-j KUBE-MARK-MASQ'));
      expect(masq).toContain('! -s 10.244.0.0/16');
      expect(masq).toContain('--comment "Kubernetes service cluster ip + port for masquerade purpose"');
      expect(r.full.rules).toMatch(/-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER/);

      expect(r.partial.error).toBeNull();
      expect(r.partial.full).toBe(false);
      expect(sets(r.partial.sets)).toEqual(sets(r.partial.twinSets));
      expect(sets(r.partial.sets)['KUBE-CLUSTER-IP'].entries).not.toContain('10.96.10.60,tcp:11211');
      expect(r.partial.batch).toContain('del KUBE-CLUSTER-IP 10.96.10.60,tcp:11211 -exist');

      expect(r.iptablesCleanup.errors).toEqual([]);
      expect(r.ipvsCleanup.errors).toEqual([]);
      expect(r.ipvsCleanup.removed.ipsets).toBe(17);
      expect(r.afterCleanup.sets).toBe('');
      expect(r.afterCleanup.rules).not.toMatch(/KUBE-/);
      expect(r.again).toEqual({ removed: {}, errors: [] });

      // Without ip_vs there is no ipvs match: KUBE-IPVS-OUT-FILTER's rule needs IPVS itself.
      if (r.hasIpvs) expect(r.ipvsMatch).toBeNull();
      else expect(r.ipvsMatch).toMatch(/Extension ipvs revision 0 not supported|No chain\/target\/match by that name/);
    });
  }
});

describe.skipIf(!tiers().kernel.ok)('--proxy-mode ipvs on the command line', () => {
  it('exits 1 on a kernel without ip_vs, naming the module, and programs nothing', () => {
    const ns = netns('cli');
    const hasIpvs = inNs(ns, 'test', ['-e', '/proc/net/ip_vs']).status === 0;
    const res = inNs(ns, process.execPath, [CLI, '--once', '--proxy-mode', 'ipvs', '--source', 'file:deploy/examples/', '--hostname-override', 'node-a', '--cluster-cidr', '10.244.0.0/16']);
    if (hasIpvs) {
      // A kernel with IPVS runs the mode for real (in this namespace only).
      expect(res.status, res.stderr).toBe(0);
      return;
    }
    expect(res.status).toBe(1);
    expect(res.stderr).toContain('--proxy-mode ipvs needs the ip_vs kernel module');
    expect(res.stderr).toContain('modprobe -a ip_vs ip_vs_rr nf_conntrack dummy');
    expect(res.stderr).toContain('KPROXY_ERR_KERNEL_MODULE_MISSING');
    expect(inNs(ns, 'ipset', ['list', '-n']).stdout).toBe('');
    expect(inNs(ns, 'ip', ['link', 'show', 'kube-ipvs0']).status).not.toBe(0);
    expect(inNs(ns, 'iptables-nft-save', []).stdout).not.toMatch(/KUBE-/);
  });

  it('--dry-run --once prints the virtual servers it would program and the one-line summary', () => {
    const ns = netns('dry');
    const res = inNs(ns, process.execPath, [CLI, '--dry-run', '--once', '--proxy-mode', 'ipvs', '--source', 'file:deploy/examples/', '--hostname-override', 'node-a']);
    expect(res.status, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/^# ipvsadm -Sn\n-A -t 10\.96\.0\.10:53 -s rr\n/m);
    expect(res.stdout).toContain('-a -t 10.96.10.10:80 -r 10.244.0.11:8080 -m -w 1');
    // ipset save lists the sets by name: the IPv6 family's KUBE-6-… ones come first.
    expect(res.stdout).toMatch(/# ipset save\ncreate KUBE-6-CLUSTER-IP hash:ip,port family inet6 hashsize 1024 maxelem 65536\n/);
    expect(res.stdout).toContain('\ncreate KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\n');
    expect(res.stdout).toContain('inet 10.96.10.10/32 scope global kube-ipvs0');
    // The IPv6 proxier's objects: virtual servers at [addr]:port, KUBE-6- sets of family inet6, inet6 addresses on kube-ipvs0.
    expect(res.stdout).toContain('-a -t [fd00:10:96::80]:80 -r [fd00:10:244::80]:8080 -m -w 1');
    expect(res.stdout).toContain('create KUBE-6-CLUSTER-IP hash:ip,port family inet6 hashsize 1024 maxelem 65536\nadd KUBE-6-CLUSTER-IP fd00:10:96::80,tcp:80\n');
    expect(res.stdout).toContain('inet6 fd00:10:96::80/128 scope global kube-ipvs0');
    expect(res.stdout).toMatch(
      /kproxy: synced ipvs \(scheduler rr, iptables \w+, dual-stack IPv4\+IPv6, simulated kernel\) on node node-a in \d+ ms: IPv4: 11 services \(14 ports\), 29 endpoints, \d+ rules \(virtual-servers \d+, real-servers \d+, ipset-entries \d+, nat \d+, filter \d+\), verified \(\d+ objects in \d+ ms\); IPv6: 2 services \(2 ports\), 4 endpoints, \d+ rules \(virtual-servers \d+, real-servers \d+, ipset-entries \d+, nat \d+, filter \d+\), verified \(\d+ objects in \d+ ms\)\n$/,
    );
    // A dry run reads the host but never changes it.
    expect(inNs(ns, 'ipset', ['list', '-n']).stdout).toBe('');
    expect(inNs(ns, 'ip', ['link', 'show', 'kube-ipvs0']).status).not.toBe(0);
  });

  it('--cleanup removes kube-proxy sets after the rules that match them, keeps other sets, and exits 0 without ip_vs', () => {
    const ns = netns('cleanup');
    const restore = inNs(
      ns,
      'ipset',
      ['restore'],
      'create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\nadd KUBE-CLUSTER-IP 10.96.0.1,tcp:443\ncreate KUBE-NODE-PORT-TCP bitmap:port range 0-65535\ncreate KUBE-6-LOOP-BACK hash:ip,port,ip family inet6 hashsize 1024 maxelem 65536\ncreate other-software hash:ip family inet hashsize 1024 maxelem 65536\n',
    );
    expect(restore.status, restore.stderr).toBe(0);
    const rules = inNs(
      ns,
      'iptables-nft-restore',
      ['--noflush'],
      '*nat\n:KUBE-SERVICES - [0:0]\n-A OUTPUT -j KUBE-SERVICES\n-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\nCOMMIT\n',
    );
    expect(rules.status, rules.stderr).toBe(0);
    const res = inNs(ns, process.execPath, [CLI, '--cleanup']);
    expect(res.status, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/ipsets 3/);
    expect(inNs(ns, 'ipset', ['list', '-n']).stdout.trim()).toBe('other-software');
    expect(inNs(ns, 'iptables-nft-save', []).stdout).not.toMatch(/KUBE-/);
    const hasIpvs = inNs(ns, 'test', ['-e', '/proc/net/ip_vs']).status === 0;
    if (!hasIpvs) expect(res.stderr).toContain('IPVS virtual servers skipped: this kernel has no IPVS');
  });
});

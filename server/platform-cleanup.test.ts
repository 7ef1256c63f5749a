import { describe, expect, it } from 'vitest';
import { testConfig } from './config/testing.ts';
import { CommandNotFoundError } from './errors.ts';
import type { ExecFn, ExecResult } from './kernel/exec.ts';
import { MemoryLog } from './log.ts';
import { cleanupAllModes, otherModesCleanup } from './platform-cleanup.ts';

const ok = (stdout = ''): ExecResult => ({ code: 0, stdout, stderr: '' });
const NO_IPVS: ExecResult = { code: 2, stdout: '', stderr: "Can't initialize ipvs: Protocol not available\nAre you sure that IP Virtual Server is built in the kernel or as module?\n" };
const NO_TABLE: ExecResult = { code: 1, stdout: '', stderr: 'Error: Could not process rule: No such file or directory\n' };

/**
 * leftoverHost answers like a node that another mode left behind: iptables-nft
 * with one KUBE- chain and the rule jumping to it (no ip6tables, no legacy
 * tables), kube-proxy's nftables table of IPv4 (not IPv6), no IPVS in the
 * kernel, one of IPVS mode's ipsets beside someone else's, and kube-ipvs0.
 * It records every command, and what went to the restore programs.
 */
function leftoverHost() {
  const calls: string[] = [];
  const stdin: Record<string, string[]> = {};
  const exec: ExecFn = async (file, args, opts) => {
    const cmd = [file, ...args].join(' ');
    calls.push(cmd);
    if (opts?.stdin !== undefined) (stdin[file] ??= []).push(String(opts.stdin));
    if (file.startsWith('ip6tables')) throw new CommandNotFoundError(`${file} is not installed`);
    if (args[0] === '--version') return ok(`${file} v1.8.9 (nf_tables)`);
    if (file === 'iptables-nft-save') return ok('*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n');
    if (file === 'iptables-nft-restore') return ok();
    // kube-proxy's tables by name only, so someone else's stays.
    if (cmd === 'nft delete table ip kube-proxy') return ok();
    if (cmd === 'nft delete table ip6 kube-proxy') return NO_TABLE;
    if (cmd.startsWith('ipvsadm -L -n')) return NO_IPVS;
    if (cmd === 'ipset save') return ok('create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\ncreate cali40all-hosts hash:ip family inet hashsize 1024 maxelem 65536\n');
    if (cmd === 'ipset restore') return ok();
    if (cmd.startsWith('ip -j addr show')) return ok(JSON.stringify([{ ifname: 'kube-ipvs0', addr_info: [] }]));
    if (cmd === 'ip -batch -') return ok();
    throw new Error(`unexpected command: ${cmd}`);
  };
  const at = (prefix: string) => calls.findIndex((c) => c.startsWith(prefix));
  return { exec, calls, stdin, at };
}

const REMOVE_CHAIN = '*nat\n:KUBE-SERVICES - [0:0]\n-D PREROUTING -j KUBE-SERVICES\n-X KUBE-SERVICES\nCOMMIT\n';

describe('--cleanup (cleanupAllModes)', () => {
  it("removes every mode's leftovers: the iptables chains of every flavour and family there, kube-proxy's nftables tables, then IPVS mode's objects", async () => {
    const host = leftoverHost();
    const result = await cleanupAllModes({ config: testConfig(), logger: new MemoryLog().logger, exec: host.exec, exists: () => false });
    expect(result.errors).toEqual([]);
    // One chain and the one rule jumping to it; one table; IPVS mode's set (not Calico's) and its link.
    expect(result.removed).toEqual({ nat: 2, nftables: 1, ipsets: 1, links: 1 });
    expect(host.stdin['iptables-nft-restore']).toEqual([REMOVE_CHAIN]);
    expect(host.calls.filter((c) => c.startsWith('nft '))).toEqual(['nft delete table ip kube-proxy', 'nft delete table ip6 kube-proxy']);
    expect(host.stdin.ipset).toEqual(['destroy KUBE-CLUSTER-IP\n']);
    // iptables first: IPVS mode's ipsets cannot be destroyed while its rules still match them.
    expect(host.at('iptables-nft-restore')).toBeLessThan(host.at('ipset restore'));
    expect(host.at('nft delete')).toBeLessThan(host.at('ipset restore'));
  });

  it('reports what it could not remove and carries on with the rest', async () => {
    const host = leftoverHost();
    const exec: ExecFn = async (file, args, opts) =>
      file === 'iptables-nft-restore' ? { code: 4, stdout: '', stderr: 'Another app is currently holding the xtables lock.\n' } : host.exec(file, args, opts);
    const result = await cleanupAllModes({ config: testConfig(), logger: new MemoryLog().logger, exec, exists: () => false });
    expect(result.errors.map((e) => e.message)).toEqual([expect.stringMatching(/iptables-nft: removing chains from table nat failed: .*xtables lock/)]);
    expect(result.removed).toEqual({ nftables: 1, ipsets: 1, links: 1 });
  });
});

describe("each mode's removal of the other modes' leftovers after its first sync (otherModesCleanup)", () => {
  const run = async (mode: 'iptables' | 'ipvs' | 'nftables' | 'userspace', family: 'IPv4' | 'IPv6', proxied: ('IPv4' | 'IPv6')[]) => {
    const host = leftoverHost();
    const log = new MemoryLog();
    const result = await otherModesCleanup(mode, { config: testConfig({ mode }), logger: log.logger, exec: host.exec, exists: () => false })(family, proxied);
    return { host, result, log: log.lines().join('\n') };
  };

  it("iptables and IPVS modes remove nftables mode's tables only: on a dual-stack node each family its own", async () => {
    for (const mode of ['iptables', 'ipvs'] as const) {
      const dual = await run(mode, 'IPv6', ['IPv4', 'IPv6']);
      expect(dual.host.calls).toEqual(['nft delete table ip6 kube-proxy']);
      expect(dual.result).toEqual({ removed: {}, errors: [] });
      const single = await run(mode, 'IPv4', ['IPv4']);
      expect(single.host.calls).toEqual(['nft delete table ip kube-proxy', 'nft delete table ip6 kube-proxy']);
      expect(single.result).toEqual({ removed: { nftables: 1 }, errors: [] });
      expect(single.log).toMatch(new RegExp(`kproxy/${mode}\\] removed nftables table table="ip kube-proxy"`));
    }
  });

  it("nftables mode removes the iptables chains of every flavour and family, then IPVS mode's objects, and says what went", async () => {
    const { host, result, log } = await run('nftables', 'IPv4', ['IPv4', 'IPv6']);
    expect(result).toEqual({ removed: { nat: 2, ipsets: 1, links: 1 }, errors: [] });
    expect(host.stdin['iptables-nft-restore']).toEqual([REMOVE_CHAIN]);
    expect(host.calls.filter((c) => c.startsWith('nft '))).toEqual([]);
    expect(host.at('iptables-nft-restore')).toBeLessThan(host.at('ipset restore'));
    expect(log).toMatch(/removed what the iptables and IPVS modes left on this node summary="removed nat 2, ipsets 1, links 1"/);
  });

  it("userspace mode removes nftables mode's tables of both families and IPVS mode's objects (its full sync removes the chains), and says what went", async () => {
    const { host, result, log } = await run('userspace', 'IPv4', ['IPv4']);
    expect(result).toEqual({ removed: { nftables: 1, ipsets: 1, links: 1 }, errors: [] });
    expect(host.calls.filter((c) => c.startsWith('iptables'))).toEqual([]);
    expect(host.calls.filter((c) => c.startsWith('nft '))).toEqual(['nft delete table ip kube-proxy', 'nft delete table ip6 kube-proxy']);
    expect(log).toMatch(/removed what the nftables and IPVS modes left on this node summary="removed nftables 1, ipsets 1, links 1"/);
  });

  it('logs what could not be removed as a warning, and never throws', async () => {
    const host = leftoverHost();
    const log = new MemoryLog();
    const exec: ExecFn = async (file, args, opts) =>
      file === 'ipset' && args[0] === 'restore' ? { code: 1, stdout: '', stderr: 'ipset v7.17: Set cannot be destroyed: it is in use by a kernel component\n' } : host.exec(file, args, opts);
    const result = await otherModesCleanup('userspace', { config: testConfig({ mode: 'userspace' }), logger: log.logger, exec, exists: () => false })('IPv4', ['IPv4']);
    expect(result.errors).toHaveLength(1);
    expect(log.lines('warn').join('\n')).toMatch(/leftovers of another mode could not be removed: removing IPVS mode's ipsets failed: .*it is in use/);
  });
});

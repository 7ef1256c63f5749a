import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../clock-fake.ts';
import { KernelModuleMissingError } from '../../errors.ts';
import type { ExecFn, ExecResult } from '../../kernel/exec.ts';
import { silentLogger } from '../../log.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { cleanupIpvsHost, createHostIpvsBackends } from './host.ts';
import { ipvsConfig } from './testing.ts';

const NO_IPVS: ExecResult = { code: 2, stdout: '', stderr: "Can't initialize ipvs: Protocol not available\nAre you sure that IP Virtual Server is built in the kernel or as module?\n" };
const LINKS = JSON.stringify([
  { ifname: 'lo', addr_info: [{ family: 'inet', local: '127.0.0.1', prefixlen: 8 }] },
  { ifname: 'ens3', addr_info: [{ family: 'inet', local: '192.168.1.20', prefixlen: 24 }] },
]);
const ok = (stdout = ''): ExecResult => ({ code: 0, stdout, stderr: '' });

/** scripted answers commands by "program arg arg" prefix and records every call. */
function scripted(answers: [string, ExecResult | ((stdin?: string) => ExecResult)][]) {
  const calls: string[] = [];
  const exec: ExecFn = async (file, args, opts) => {
    const cmd = [file, ...args].join(' ');
    calls.push(cmd);
    const a = answers.find(([prefix]) => cmd.startsWith(prefix));
    if (!a) throw new Error(`unexpected command: ${cmd}`);
    return typeof a[1] === 'function' ? a[1](opts?.stdin?.toString()) : a[1];
  };
  return { exec, calls };
}

const base = { families: ['IPv4'] as const, nodeName: 'node-a', flavor: 'auto' as const, clock: new FakeClock(), logger: silentLogger };

describe('IPVS mode on the host', () => {
  it('refuses a kernel without ip_vs before touching anything, naming the module and how to load it', async () => {
    const { exec, calls } = scripted([['ipvsadm -L -n', NO_IPVS]]);
    const err = (await createHostIpvsBackends({ ...base, config: ipvsConfig(), dryRun: false, exec, exists: () => false }).catch((e: Error) => e)) as Error;
    expect(err).toBeInstanceOf(KernelModuleMissingError);
    expect(err.message).toContain('--proxy-mode ipvs needs the ip_vs kernel module');
    expect(err.message).toContain('modprobe -a ip_vs ip_vs_rr nf_conntrack dummy');
    expect(calls).toEqual(['ipvsadm -L -n']);
  });

  /** IPTABLES answers the flavour and version checks of an iptables-nft host. */
  const IPTABLES: [string, ExecResult][] = [['iptables-nft', ok('iptables v1.8.9 (nf_tables)')]];

  it('changes nothing on the host until the first init: kube-ipvs0 and the scheduler probe come with it, once for both families', async () => {
    const made: string[] = [];
    const { exec, calls } = scripted([
      ['ipvsadm -L -n', ok()],
      ...IPTABLES,
      ['ip6tables-nft', ok('ip6tables v1.8.9 (nf_tables)')],
      ['ip -j addr show', ok(LINKS)],
      ['ip -batch -', (stdin) => (made.push(`ip ${stdin}`), ok())],
      ['ipvsadm -S -n', ok()],
      ['ipvsadm -R', (stdin) => (made.push(`ipvsadm ${stdin}`), ok())],
    ]);
    const host = await createHostIpvsBackends({ ...base, families: ['IPv4', 'IPv6'], config: ipvsConfig(), flavor: 'nft', dryRun: false, exec, exists: () => true });
    expect(host.backends).toHaveLength(2);
    // Only checks so far (ip_vs, the iptables versions, ip6tables' nat table): what --once may do before its source synced.
    expect(calls.filter((c) => !/^ipvsadm -L -n$|^ip6?tables-nft .*(--version|-S POSTROUTING -t nat)$/.test(c))).toEqual([]);
    expect(made).toEqual([]);
  });

  it('refuses a kernel without the dummy link type for kube-ipvs0 at init, before any sysctl or object of the mode', async () => {
    const { exec, calls } = scripted([
      ['ipvsadm -L -n', ok()],
      ...IPTABLES,
      ['ip -j addr show', ok(LINKS)],
      ['ip -batch -', { code: 2, stdout: '', stderr: 'Error: Unknown device type.\nCommand failed -:1\n' }],
    ]);
    const host = await createHostIpvsBackends({ ...base, config: ipvsConfig(), flavor: 'nft', dryRun: false, exec, exists: () => true });
    const err = (await host.backends[0].init!().catch((e: Error) => e)) as Error;
    expect(err).toBeInstanceOf(KernelModuleMissingError);
    expect(err.message).toContain('dummy link type for kube-ipvs0');
    expect(calls.slice(-2)).toEqual(['ip -j addr show', 'ip -batch -']);
  });

  it("probes the scheduler's module like kube-proxy, with a TEST-NET-2 virtual server, at init", async () => {
    let probe = '';
    const { exec } = scripted([
      ['ipvsadm -L -n', ok()],
      ...IPTABLES,
      ['ip -j addr show', ok(JSON.stringify([{ ifname: 'kube-ipvs0', addr_info: [] }]))],
      ['ipvsadm -S -n', ok()],
      [
        'ipvsadm -R',
        (stdin) => {
          probe = stdin ?? '';
          return { code: 1, stdout: '', stderr: 'Scheduler or persistence engine not found\nNo such service\n' };
        },
      ],
    ]);
    const host = await createHostIpvsBackends({ ...base, config: ipvsConfig({ ipvs: { scheduler: 'lc' } }), flavor: 'nft', dryRun: false, exec, exists: () => true });
    expect(probe).toBe('');
    const err = (await host.backends[0].init!().catch((e: Error) => e)) as Error;
    expect(probe).toBe('-A -t 198.51.100.0:20000 -s lc\n-D -t 198.51.100.0:20000\n');
    expect(err).toBeInstanceOf(KernelModuleMissingError);
    expect(err.message).toContain('no ip_vs_lc module');
  });

  it('runs a dry run on simulated kernels, showing node ports on the host addresses it read', async () => {
    const { exec, calls } = scripted([['ip -j addr show', ok(LINKS)]]);
    const cleanedUp: string[] = [];
    const host = await createHostIpvsBackends({ ...base, config: ipvsConfig(), dryRun: true, exec, afterFirstSync: async (family) => cleanedUp.push(family) });
    expect(host.kernel).not.toBeNull();
    await host.backends[0].init!();
    const state = stateFromObjects('node-a', [
      makeService('ns1', 'a', { type: 'NodePort', clusterIP: '10.96.0.1', ports: [{ name: 'http', port: 80, protocol: 'TCP', nodePort: 30080 }] }),
      makeSlice('ns1', 'a', 'a-1', [ep('10.244.0.1', { nodeName: 'node-a' })], [{ name: 'http', port: 8080, protocol: 'TCP' }]),
    ]);
    const r = await host.backends[0].sync({ state: state.checkout(), forceFull: true });
    expect(r.error).toBeUndefined();
    const text = await host.kernel!.describe();
    expect(text).toContain('# ipvsadm -Sn\n-A -t 10.96.0.1:80 -s rr\n-a -t 10.96.0.1:80 -r 10.244.0.1:8080 -m -w 1\n-A -t 192.168.1.20:30080 -s rr\n');
    expect(text).toContain('# ipset save\ncreate KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\nadd KUBE-CLUSTER-IP 10.96.0.1,tcp:80\n');
    expect(text).toContain('# ip addr show kube-ipvs0\ninet 10.96.0.1/32 scope global kube-ipvs0\n');
    expect(text).toContain('-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT');
    // The dry run only read the host: no other mode's leftovers were removed after its first sync either.
    await host.backends[0].afterSync?.();
    expect(cleanedUp).toEqual([]);
    expect(calls).toEqual(['ip -j addr show']);
  });
});

describe('--cleanup for IPVS mode', () => {
  it('skips virtual servers without IPVS and still destroys sets and kube-ipvs0', async () => {
    const restores: string[] = [];
    const { exec, calls } = scripted([
      ['ipvsadm -L -n', NO_IPVS],
      ['ipset save', ok('create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\ncreate cali40all-hosts hash:ip family inet hashsize 1024 maxelem 65536\n')],
      [
        'ipset restore',
        (stdin) => {
          restores.push(stdin ?? '');
          return ok();
        },
      ],
      ['ip -j addr show', ok(JSON.stringify([{ ifname: 'kube-ipvs0', addr_info: [] }]))],
      ['ip -batch -', ok()],
    ]);
    const r = await cleanupIpvsHost({ config: ipvsConfig(), logger: silentLogger, exec, exists: () => false });
    expect(r).toEqual({ removed: { ipsets: 1, links: 1 }, errors: [] });
    expect(restores).toEqual(['destroy KUBE-CLUSTER-IP\n']);
    expect(calls).not.toContain('ipvsadm -S -n');
  });
});

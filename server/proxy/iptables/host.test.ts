import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../clock-fake.ts';
import { CommandNotFoundError } from '../../errors.ts';
import type { ExecFn } from '../../kernel/exec.ts';
import { silentLogger } from '../../log.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { FakeNfacct } from '../../kernel/nfacct-fake.ts';
import { SimulatedSysctl } from '../../kernel/sysctl-simulated.ts';
import { createHostIptablesBackend, createHostIptablesBackends } from './host.ts';
import { testConfig } from './testing.ts';

describe('host wiring', () => {
  it('--dry-run programs the simulated kernel and runs no iptables binary', async () => {
    const ran: string[] = [];
    const exec: ExecFn = async (file, args) => {
      ran.push([file, ...args].join(' '));
      return { code: 0, stdout: '[]', stderr: '' };
    };
    const { backend, kernel, decision } = await createHostIptablesBackend({
      config: testConfig(),
      nodeName: 'node-a',
      flavor: 'auto',
      dryRun: true,
      clock: new FakeClock(),
      logger: silentLogger,
      exec,
    });
    expect(decision.reason).toMatch(/dry-run/);
    await backend.init!();
    const state = stateFromObjects('node-a', [makeService('ns', 'a', { clusterIP: '10.96.0.1' }), makeSlice('ns', 'a', 'a-1', [ep('10.244.0.1')])]);
    const r = await backend.sync({ state: state.checkout(), forceFull: true });
    expect(r.error).toBeUndefined();
    expect(await kernel!.save({ table: 'nat' })).toContain('-A KUBE-SERVICES -m comment --comment "ns/a:p80 cluster IP"');
    expect(ran.filter((c) => c.includes('iptables'))).toEqual([]);
  });

  /** hostExec answers like a host with iptables-nft, and with or without working ip6tables. */
  const hostExec = (ip6: boolean): { exec: ExecFn; ran: string[] } => {
    const ran: string[] = [];
    const exec: ExecFn = async (file, args) => {
      ran.push([file, ...args].join(' '));
      if (file.startsWith('ip6tables') && !ip6) throw new CommandNotFoundError(`${file} is not installed`);
      if (args[0] === '--version') return { code: 0, stdout: `${file} v1.8.9 (nf_tables)`, stderr: '' };
      if (args.includes('-S')) return { code: 0, stdout: '-P POSTROUTING ACCEPT\n', stderr: '' };
      return { code: 0, stdout: '', stderr: '' };
    };
    return { exec, ran };
  };
  const opts = { nodeName: 'node-a', flavor: 'nft' as const, dryRun: false, clock: new FakeClock(), logger: silentLogger };

  it('runs a proxier per family when ip6tables works, the primary first, in the same flavour', async () => {
    const { exec, ran } = hostExec(true);
    const host = await createHostIptablesBackends({ ...opts, config: testConfig(), families: ['IPv4', 'IPv6'], exec });
    expect(host.unsupported).toBeNull();
    expect(host.hosts.map((h) => `${h.family} ${h.backend.runner.family} ${h.backend.runner.flavor}`)).toEqual(['IPv4 IPv4 nft', 'IPv6 IPv6 nft']);
    // As kube-proxy's Present(): ip6tables must list the nat table's POSTROUTING.
    expect(ran).toContain('ip6tables-nft -w 5 -W 100000 -S POSTROUTING -t nat');
  });

  it("changes nothing on the host until a backend's init: the nfacct counters come with the first init, once for both families", async () => {
    const { exec, ran } = hostExec(true);
    const nfacct = new FakeNfacct();
    const sysctl = new SimulatedSysctl({ 'net/ipv4/conf/all/route_localnet': '0', 'net/netfilter/nf_conntrack_tcp_be_liberal': '0' });
    const host = await createHostIptablesBackends({ ...opts, config: testConfig(), families: ['IPv4', 'IPv6'], exec, nfacct, sysctl });
    // Only reads so far (versions, the nat table's POSTROUTING): what --once may do before its source synced.
    expect(nfacct.calls).toEqual([]);
    expect(ran.filter((c) => !/ --version$| -S POSTROUTING -t nat$/.test(c))).toEqual([]);
    expect(host.hosts[0].packetCounters()).toBeNull();
    expect(sysctl.writes).toEqual([]);
    await host.hosts[0].backend.init!();
    await host.hosts[1].backend.init!();
    expect(nfacct.calls).toEqual(['ensure ct_state_invalid_dropped_pkts', 'ensure localhost_nps_accepted_pkts']);
    expect(host.hosts[0].packetCounters()).not.toBeNull();
    expect(sysctl.writes).toEqual([{ name: 'net/ipv4/conf/all/route_localnet', value: '1' }]);
  });

  it("hands each family's backend the other modes' cleanup, run after its first successful sync with every family proxied, and none with --dry-run", async () => {
    const { exec } = hostExec(true);
    const ran: string[] = [];
    const afterFirstSync = async (family: string, proxied: readonly string[]) => ran.push(`${family} of ${proxied.join('+')}`);
    const sysctl = new SimulatedSysctl({ 'net/ipv4/conf/all/route_localnet': '0', 'net/netfilter/nf_conntrack_tcp_be_liberal': '0' });
    const host = await createHostIptablesBackends({ ...opts, config: testConfig(), families: ['IPv4', 'IPv6'], exec, nfacct: new FakeNfacct(), sysctl, afterFirstSync });
    for (const h of host.hosts) {
      const state = stateFromObjects('node-a', [], new FakeClock(), h.family);
      expect((await h.backend.sync({ state: state.checkout(), forceFull: true })).error).toBeUndefined();
      await h.backend.afterSync!();
      await h.backend.afterSync!();
    }
    expect(ran).toEqual(['IPv4 of IPv4+IPv6', 'IPv6 of IPv4+IPv6']);

    ran.length = 0;
    const dry = await createHostIptablesBackends({ ...opts, dryRun: true, config: testConfig(), families: ['IPv4', 'IPv6'], exec, afterFirstSync });
    for (const h of dry.hosts) {
      expect((await h.backend.sync({ state: stateFromObjects('node-a', [], new FakeClock(), h.family).checkout(), forceFull: true })).error).toBeUndefined();
      await h.backend.afterSync?.();
    }
    expect(ran).toEqual([]);
  });

  it('runs single-stack, saying why, when the host has no ip6tables', async () => {
    const { exec } = hostExec(false);
    const host = await createHostIptablesBackends({ ...opts, config: testConfig(), families: ['IPv4', 'IPv6'], exec });
    expect(host.hosts.map((h) => h.family)).toEqual(['IPv4']);
    expect(host.unsupported).toMatch(/cannot run ip6tables-nft --version/);
  });

  it('refuses an IPv6 primary family (bindAddress ::) on a host that cannot proxy IPv6, naming bindAddress', async () => {
    const { exec } = hostExec(false);
    await expect(createHostIptablesBackends({ ...opts, config: testConfig({ bindAddress: '::' }), families: ['IPv6', 'IPv4'], exec })).rejects.toMatchObject({
      code: 'KPROXY_ERR_CONFIG_INVALID',
      message: expect.stringMatching(/^bindAddress: Invalid value: "::": makes IPv6 the primary IP family, but this host cannot proxy IPv6 \(cannot run ip6tables-nft --version/),
    });
  });
});

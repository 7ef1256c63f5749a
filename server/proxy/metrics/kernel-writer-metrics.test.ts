import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import type { IptablesRunner } from '../../kernel/iptables.ts';
import { registerNetlinkHelperMetrics, registerXtablesLockMetrics } from './kernel-writer-metrics.ts';

/** series: the sample lines of one family in the registry's text. */
async function series(registry: Registry, name: string): Promise<string[]> {
  return (await registry.metrics()).split('\n').filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
}

describe("kproxy's writer metrics", () => {
  it('counts restores that met the xtables lock, per family and outcome, from 0', async () => {
    const waits = { acquired: 0, timedOut: 0 };
    const runner = { lockWaits: () => waits } as unknown as IptablesRunner;
    const registry = new Registry();
    registerXtablesLockMetrics(registry, [
      { family: 'IPv4', runner },
      { family: 'IPv6', runner: {} as IptablesRunner },
    ]);
    expect(await series(registry, 'kproxy_iptables_xtables_lock_waits_total')).toEqual([
      'kproxy_iptables_xtables_lock_waits_total{ip_family="IPv4",result="acquired"} 0',
      'kproxy_iptables_xtables_lock_waits_total{ip_family="IPv4",result="timed_out"} 0',
    ]);
    waits.acquired = 2;
    waits.timedOut = 1;
    expect(await series(registry, 'kproxy_iptables_xtables_lock_waits_total')).toEqual([
      'kproxy_iptables_xtables_lock_waits_total{ip_family="IPv4",result="acquired"} 2',
      'kproxy_iptables_xtables_lock_waits_total{ip_family="IPv4",result="timed_out"} 1',
    ]);
  });

  it("reads the netlink helper's failures, restarts and dropped datagrams at each scrape", async () => {
    const stats = { failures: 0, restarts: 0, restartFailures: 0, foreignDatagrams: 0 };
    const registry = new Registry();
    registerNetlinkHelperMetrics(registry, () => stats);
    Object.assign(stats, { failures: 2, restarts: 1, restartFailures: 1, foreignDatagrams: 5 });
    expect(await series(registry, 'kproxy_nftables_netlink_helper_failures_total')).toEqual(['kproxy_nftables_netlink_helper_failures_total 2']);
    expect(await series(registry, 'kproxy_nftables_netlink_helper_restarts_total')).toEqual([
      'kproxy_nftables_netlink_helper_restarts_total{result="success"} 1',
      'kproxy_nftables_netlink_helper_restarts_total{result="failure"} 1',
    ]);
    expect(await series(registry, 'kproxy_nftables_netlink_foreign_datagrams_total')).toEqual(['kproxy_nftables_netlink_foreign_datagrams_total 5']);
  });
});

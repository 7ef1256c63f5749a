import { Counter, type Registry } from 'prom-client';
import type { IptablesRunner } from '../../kernel/iptables.ts';
import type { NetlinkHelperStats } from '../../kernel/nft-netlink.ts';
import type { IPFamily } from '../../net/ip.ts';

/**
 * kproxy's metrics about how its writers reach the kernel (none has a
 * kube-proxy name): restores that met the xtables lock held, and nftables
 * mode's netlink helper program (its failures, restarts and the datagrams it
 * dropped as not the kernel's). Every value is read from the runners at
 * scrape time.
 */

/** IptablesOfFamily: one family's iptables runner. */
export interface IptablesOfFamily {
  readonly family: IPFamily;
  readonly runner: IptablesRunner;
}

/**
 * registerXtablesLockMetrics publishes kproxy_iptables_xtables_lock_waits_total:
 * restores that found the xtables lock held and waited (result "acquired")
 * or gave up after kube-proxy's 5 s (result "timed_out"; that sync failed and
 * is retried). Series start at 0 for each family whose runner counts them.
 */
export function registerXtablesLockMetrics(registry: Registry, runners: readonly IptablesOfFamily[]): void {
  const counted = runners.filter((r) => r.runner.lockWaits);
  if (counted.length === 0 || registry.getSingleMetric('kproxy_iptables_xtables_lock_waits_total')) return;
  new Counter({
    name: 'kproxy_iptables_xtables_lock_waits_total',
    help: 'iptables restores that found the xtables lock held by another program, by IP family and how the wait ended (acquired, or timed_out after 5 s: the sync failed and is retried)',
    labelNames: ['ip_family', 'result'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const { family, runner } of counted) {
        const w = runner.lockWaits!();
        this.inc({ ip_family: family, result: 'acquired' }, w.acquired);
        this.inc({ ip_family: family, result: 'timed_out' }, w.timedOut);
      }
    },
  });
}

/**
 * registerNetlinkHelperMetrics publishes the netlink helper's life
 * (server/kernel/native/nfnl-pipe.c, nftables mode's writer): helpers lost,
 * starts after a loss by result, and datagrams dropped because the kernel did
 * not send them (another process wrote to the helper's socket).
 */
export function registerNetlinkHelperMetrics(registry: Registry, stats: () => NetlinkHelperStats): void {
  if (registry.getSingleMetric('kproxy_nftables_netlink_helper_failures_total')) return;
  const registers = [registry];
  new Counter({
    name: 'kproxy_nftables_netlink_helper_failures_total',
    help: 'Times the netlink helper program was lost (it exited, was killed, or broke its protocol and was stopped); the transaction in flight failed, if any',
    registers,
    collect() {
      this.reset();
      this.inc(stats().failures);
    },
  });
  new Counter({
    name: 'kproxy_nftables_netlink_helper_restarts_total',
    help: 'Starts of the netlink helper program after one was lost, by result (success, or failure: nft -f writes until the next attempt)',
    labelNames: ['result'] as const,
    registers,
    collect() {
      const s = stats();
      this.reset();
      this.inc({ result: 'success' }, s.restarts);
      this.inc({ result: 'failure' }, s.restartFailures);
    },
  });
  new Counter({
    name: 'kproxy_nftables_netlink_foreign_datagrams_total',
    help: "Datagrams the netlink helper dropped because the kernel did not send them (another process wrote to its socket's port id)",
    registers,
    collect() {
      this.reset();
      this.inc(stats().foreignDatagrams);
    },
  });
}

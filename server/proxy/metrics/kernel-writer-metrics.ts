import { Counter, type Registry } from 'prom-client';
import type { IptablesRunner } from '../../kernel/iptables.ts';
import type { IPFamily } from '../../net/ip.ts';

/**
 * kproxy's metrics about how its writers reach the kernel (none has a
 * kube-proxy name): restores that met the xtables lock held. Every value is
 * read from the runners at scrape time.
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

import type { Clock } from '../../clock.ts';
import type { ProxyConfig } from '../../config/types.ts';
import { nodeReference, type EventRecorder } from '../../events/event-recorder.ts';
import { Conntrack, execConntrack, type ConntrackRunner } from '../../kernel/conntrack.ts';
import { SimulatedConntrack } from '../../kernel/conntrack-simulated.ts';
import { procSysctl, type Sysctl } from '../../kernel/sysctl.ts';
import { SimulatedSysctl } from '../../kernel/sysctl-simulated.ts';
import type { Logger } from '../../log.ts';
import type { IPFamily } from '../../net/ip.ts';
import type { ConntrackView } from '../metrics/kproxy-metrics.ts';
import { ConntrackCleaner, type CleanupRun, type ConntrackCleanerOptions } from './cleaner.ts';
import { ConntrackCounts } from './counts.ts';
import { applyConntrackSysctls, HASHSIZE, type ConntrackSysctlsReport } from './sysctls.ts';

/** ConntrackMetricsSink is the part of ProxyMetrics the conntrack parts feed (server/proxy/metrics/metrics.ts). */
export interface ConntrackMetricsSink {
  conntrackReconciled(seconds: number, deleted: number, family: IPFamily): void;
  attachConntrack(view: () => Promise<ConntrackView | null>): void;
}

export interface ConntrackSetupOptions {
  config: ProxyConfig;
  /** families: one stale-entry cleaner per proxied family (conntrack -f ipv4 / -f ipv6). */
  families: readonly IPFamily[];
  nodeName: string;
  /** dryRun: a simulated table and /proc (nothing on the host is read for cleanup or written). */
  dryRun: boolean;
  clock: Clock;
  logger: Logger;
  /** events: where the read-only /sys Warning goes (kube-proxy records it on the Node). */
  events?: EventRecorder;
  /** Test seams: the runner and /proc, /sys (defaults: the host's, or simulated ones in a dry run). */
  runner?: ConntrackRunner;
  sysctl?: Sysctl;
  sysfs?: Sysctl;
  cpuCount?: number;
  cleaner?: Partial<Omit<ConntrackCleanerOptions, 'conntrack' | 'family' | 'clock' | 'logger' | 'onRun'>>;
}

/** The sysctls a dry run copies from the host, so its log shows what a real start would change. */
const SEEDED = [
  'net/netfilter/nf_conntrack_max',
  'net/netfilter/nf_conntrack_count',
  'net/netfilter/nf_conntrack_tcp_timeout_established',
  'net/netfilter/nf_conntrack_tcp_timeout_close_wait',
  'net/netfilter/nf_conntrack_tcp_be_liberal',
  'net/netfilter/nf_conntrack_udp_timeout',
  'net/netfilter/nf_conntrack_udp_timeout_stream',
];

/**
 * ConntrackSetup is everything conntrack for one daemon: the start-up
 * sysctls, the stale-entry cleaner (a SyncObserver to add to the sync loop)
 * and the counts for the metrics and the dashboard.
 */
export class ConntrackSetup {
  readonly counts: ConntrackCounts;
  /** simulated: a dry run's in-memory table and /proc. */
  readonly simulated: boolean;
  readonly #o: ConntrackSetupOptions;
  readonly #sysctl: Sysctl;
  readonly #sysfs: Sysctl;
  readonly #runListeners: ((r: CleanupRun, family: IPFamily) => void)[] = [];
  /** cleaners: the stale-entry cleaner of each family, a sync observer of that family's loop. */
  readonly cleaners: ReadonlyMap<IPFamily, ConntrackCleaner>;

  constructor(o: ConntrackSetupOptions) {
    this.#o = o;
    this.simulated = o.dryRun;
    this.#sysctl = o.sysctl ?? (o.dryRun ? new SimulatedSysctl() : procSysctl());
    this.#sysfs = o.sysfs ?? (o.dryRun ? new SimulatedSysctl() : procSysctl('/sys'));
    const conntrack = new Conntrack(o.runner ?? (o.dryRun ? new SimulatedConntrack() : execConntrack()));
    const logger = o.logger;
    this.cleaners = new Map(
      o.families.map((family) => [
        family,
        new ConntrackCleaner({
          ...o.cleaner,
          conntrack,
          family,
          clock: o.clock,
          logger: o.families.length > 1 ? logger.child(family) : logger,
          onRun: (r) => {
            for (const l of this.#runListeners) l(r, family);
          },
        }),
      ]),
    );
    this.counts = new ConntrackCounts({ conntrack, sysctl: this.#sysctl, clock: o.clock });
  }

  /**
   * applySysctls sets the configured conntrack sysctls (kube-proxy does it
   * before its proxier starts); never throws. A dry run first copies the
   * host's values into its simulated /proc and changes only those.
   */
  async applySysctls(): Promise<ConntrackSysctlsReport> {
    if (this.simulated && !this.#o.sysctl) await seed(this.#sysctl as SimulatedSysctl, this.#sysfs as SimulatedSysctl);
    const report = await applyConntrackSysctls({
      config: this.#o.config.conntrack,
      sysctl: this.#sysctl,
      sysfs: this.#sysfs,
      cpuCount: this.#o.cpuCount,
      logger: this.#o.logger.child(this.simulated ? 'sysctl (simulated)' : 'sysctl'),
    });
    if (report.readOnlySysFS) {
      // kube-proxy's own wording: the administrator decides whether to drain the node and fix the runtime.
      this.#o.events?.record(
        nodeReference(this.#o.nodeName),
        'Warning',
        'readOnlySysFS',
        'StartKubeProxy',
        'CRI error: /sys is read-only: cannot modify conntrack limits, problems may arise later (If running Docker, see docker issue #24000)',
      );
    }
    return report;
  }

  /** view is what the conntrack gauges and the dashboard read. */
  async view(): Promise<ConntrackView> {
    const node = await this.counts.node();
    const all = [...this.cleaners.values()].map((c) => c.status());
    return {
      entries: node.entries,
      max: node.max,
      cleanupEnabled: all.every((s) => s.enabled),
      cleanupPending: all.reduce((n, s) => n + s.pending, 0),
      cleanupErrorsTotal: all.reduce((n, s) => n + s.errorsTotal, 0),
      countErrorsTotal: this.counts.listingErrorsTotal,
    };
  }

  /** attachMetrics feeds kube-proxy's reconciler metrics from every cleanup pass and publishes the conntrack gauges. */
  attachMetrics(metrics: ConntrackMetricsSink): void {
    this.#runListeners.push((r, family) => metrics.conntrackReconciled(r.seconds, r.deleted, family));
    metrics.attachConntrack(() => this.view());
  }

  /** cleaner is the primary family's cleaner. */
  get cleaner(): ConntrackCleaner {
    return this.cleaners.values().next().value!;
  }

  async stop(): Promise<void> {
    await Promise.all([...this.cleaners.values()].map((c) => c.stop()));
  }
}

async function seed(sysctl: SimulatedSysctl, sysfs: SimulatedSysctl): Promise<void> {
  const host = procSysctl();
  for (const name of SEEDED) {
    try {
      sysctl.values.set(name, await host.read(name));
    } catch {
      // Not on this host (no nf_conntrack): the simulated /proc lacks it too, as the real one would.
    }
  }
  try {
    sysfs.values.set(HASHSIZE, await procSysctl('/sys').read(HASHSIZE));
  } catch {
    // Same: no module parameter to show.
  }
}

import { collectDefaultMetrics, Registry } from 'prom-client';
import type { Clock } from '../../clock.ts';
import { errorMessage } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import type { SourceStatus } from '../source.ts';
import { KPROXY_VERSION } from '../../version.ts';
import type { ProxyMode } from '../../config/proxy-mode.ts';
import type { IPFamily } from '../../net/ip.ts';
import type { SyncObserver } from '../sync-loop.ts';
import { KproxyMetrics, type ConntrackView, type DashboardView, type KproxyMetricsState, type ServiceHealthView } from './kproxy-metrics.ts';
import { KubeProxyMetrics, type KubeProxyMetricsState, type NftablesCleanupReport, type PacketCounters, type RulesWrittenReport } from './kube-proxy-metrics.ts';
import { countNoLocalEndpoints } from './no-local-endpoints.ts';

/**
 * MetricsState is the part of the proxy state the metrics read: the meta
 * proxier (change counts summed over the families) satisfies it, as does one
 * family's ProxyState. The family of a sync comes with its record.
 */
export interface MetricsState extends KubeProxyMetricsState, KproxyMetricsState {
  /** ready: the sources have listed; kube-proxy queues nothing before that. */
  readonly ready: boolean;
  /** families: the IP families proxied (their failure counters start at 0). */
  readonly families: readonly IPFamily[];
}

export interface ProxyMetricsOptions {
  mode: ProxyMode;
  state: MetricsState;
  clock: Clock;
  logger: Logger;
  /** source: the object source's status (kproxy_source_*). */
  source?: () => SourceStatus;
  /** processMetrics: the process_* and nodejs_* defaults (default true; tests turn them off). */
  processMetrics?: boolean;
}

/**
 * ProxyMetrics is the one Prometheus registry of a daemon instance: kube-proxy's
 * kubeproxy_* metrics for the proxy mode, kproxy's own kproxy_* metrics, and
 * process/Node.js defaults. It hears syncs through `observer`; values owned by
 * other parts (pending changes, source counters) are read at scrape time.
 */
export class ProxyMetrics {
  readonly registry = new Registry();
  readonly kubeProxy: KubeProxyMetrics;
  readonly kproxy: KproxyMetrics;
  readonly #o: ProxyMetricsOptions;
  #serviceHealth: (() => ServiceHealthView | null) | null = null;
  #ready: (() => boolean) | null = null;
  #packetErrorLogged = false;

  constructor(opts: ProxyMetricsOptions) {
    this.#o = opts;
    this.kubeProxy = new KubeProxyMetrics(this.registry, opts.mode, opts.state, opts.state.families);
    this.kproxy = new KproxyMetrics({
      registry: this.registry,
      state: opts.state,
      version: KPROXY_VERSION,
      mode: opts.mode,
      families: opts.state.families,
      source: opts.source,
      serviceHealth: () => this.#serviceHealth?.() ?? null,
      ready: () => this.#ready?.() ?? null,
    });
    if (opts.processMetrics !== false) collectDefaultMetrics({ register: this.registry });
  }

  /** contentType is the Prometheus text format version kube-proxy's handler answers with by default. */
  get contentType(): string {
    return this.registry.contentType;
  }

  /** observer feeds the metrics from the sync loop. */
  readonly observer: SyncObserver = {
    // kube-proxy's SyncLoop stamps the last-queued time when it starts, while the informers sync.
    onStart: (at, family) => this.kubeProxy.syncQueued(family, at),
    onQueued: (at, family) => {
      // kube-proxy only queues (and stamps) changes once its informers have synced.
      if (this.#o.state.ready) this.kubeProxy.syncQueued(family, at);
    },
    onSync: (record, checkout, result) => {
      const noLocal = record.ok ? countNoLocalEndpoints(checkout) : null;
      this.kubeProxy.syncDone(record.family, record, result as typeof result & RulesWrittenReport & NftablesCleanupReport, noLocal);
      this.kproxy.syncDone(record, checkout, result.skippedServicePorts);
    },
  };

  /** probeServed counts a /healthz or /livez answer (kube-proxy's counters) or a /readyz one (kproxy's) by code. */
  probeServed(probe: 'healthz' | 'livez' | 'readyz', code: number): void {
    if (probe === 'readyz') this.kproxy.readyzServed(code);
    else this.kubeProxy.probeServed(probe, code);
  }

  /** attachReadiness publishes whether /readyz is ready (kproxy_ready). */
  attachReadiness(ready: () => boolean): void {
    this.#ready = ready;
  }

  /** conntrackReconciled is the conntrack cleaner's hook: one pass, its duration and the flows it deleted. */
  conntrackReconciled(seconds: number, deleted: number, family: IPFamily): void {
    this.kubeProxy.conntrackReconciled(family, seconds, deleted);
  }

  /** enablePacketCounters publishes the iptables backend's nfacct packet counters. */
  enablePacketCounters(read: PacketCounters): void {
    this.kubeProxy.enablePacketCounters(read, (err) => {
      if (this.#packetErrorLogged) return;
      this.#packetErrorLogged = true;
      this.#o.logger.error('reading the nfacct packet counters failed; their metrics keep their last values', { err: errorMessage(err) });
    });
  }

  /** attachServiceHealth publishes the health check node port listeners' state. */
  attachServiceHealth(view: () => ServiceHealthView | null): void {
    this.#serviceHealth = view;
  }

  /** attachDashboard publishes what the dashboard refused (sign-ins, budgets, certificate reloads). */
  attachDashboard(view: () => DashboardView | null): void {
    this.kproxy.attachDashboard(this.registry, view);
  }

  /** attachConntrack publishes the conntrack table's fill and the stale-entry cleaner's state. */
  attachConntrack(view: () => Promise<ConntrackView | null>): void {
    this.kproxy.attachConntrack(this.registry, view);
  }

  /**
   * render writes the Prometheus text exposition the way client_golang does:
   * families sorted by name, one after the other, and families without a
   * sample left out (a labelled metric nobody has touched yet).
   */
  async render(): Promise<string> {
    const names = this.registry
      .getMetricsAsArray()
      .map((m) => m.name)
      .sort();
    const out: string[] = [];
    for (const name of names) {
      const text = await this.registry.getSingleMetricAsString(name);
      if (text.split('\n').length <= 2) continue;
      out.push(text.includes('_bucket{le="') ? text.replace(BUCKET_LE_FIRST, '$1{$3,le="$2"}') : text);
    }
    return out.join('\n') + '\n';
  }
}

/**
 * BUCKET_LE_FIRST matches a histogram bucket line where prom-client wrote "le"
 * before the other labels; client_golang writes it last, and dashboards that
 * match series by their text (or diff scrapes) expect that order.
 */
const BUCKET_LE_FIRST = /^(\S+_bucket)\{le="([^"]*)",(.*)\}(?= )/gm;

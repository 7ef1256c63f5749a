import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { RestoreFailedError } from '../../errors.ts';
import type { ProxyMode } from '../../config/proxy-mode.ts';
import type { BackendSyncResult } from '../backend.ts';
import type { IPFamily } from '../../net/ip.ts';
import type { SyncRecord } from '../sync-loop.ts';
import type { NoLocalEndpoints } from './no-local-endpoints.ts';

/**
 * kube-proxy's metrics (pkg/proxy/metrics/metrics.go, Kubernetes 1.33+ with the
 * ip_family dimension), with its names, help text, label names and buckets.
 * Every kube-proxy metric is ALPHA; component-base prefixes the help text with
 * the stability level, so scrapes read "[ALPHA] ...".
 */
const ALPHA = '[ALPHA] ';

/** exponentialBuckets is client_golang's ExponentialBuckets (start, start×factor, ...). */
export function exponentialBuckets(start: number, factor: number, count: number): number[] {
  const out: number[] = [];
  for (let i = 0, v = start; i < count; i++, v *= factor) out.push(v);
  return out;
}

/** linearBuckets is client_golang's LinearBuckets (start, start+width, ...). */
export function linearBuckets(start: number, width: number, count: number): number[] {
  const out: number[] = [];
  for (let i = 0, v = start; i < count; i++, v += width) out.push(v);
  return out;
}

/** SYNC_BUCKETS: ExponentialBuckets(0.001, 2, 15), 1 ms to 16.384 s. */
export const SYNC_BUCKETS = exponentialBuckets(0.001, 2, 15);

/**
 * NETWORK_PROGRAMMING_BUCKETS: component-base MergeBuckets of 0.25 s steps to
 * 0.5 s, 1 s steps to 59 s, 5 s steps to 115 s, 30 s steps to 5 min. MergeBuckets
 * starts from a zero bucket, so the first bound is le="0".
 */
export const NETWORK_PROGRAMMING_BUCKETS = [0, ...linearBuckets(0.25, 0.25, 2), ...linearBuckets(1, 1, 59), ...linearBuckets(60, 5, 12), ...linearBuckets(120, 30, 7)];

/** MetricsState is what kube-proxy's point-in-time metrics are read from (ProxyState satisfies it). */
export interface KubeProxyMetricsState {
  readonly servicesPending: number;
  readonly endpointsPending: number;
  readonly serviceChangesTotal: number;
  readonly endpointChangesTotal: number;
}

/**
 * RulesWrittenReport is an optional extension of BackendSyncResult: the rules
 * written per table in this sync (kubeproxy_sync_proxy_rules_iptables_last).
 * Without it the metric is only updated by full syncs, which write every rule.
 */
export interface RulesWrittenReport {
  readonly rulesWrittenByTable?: Readonly<Record<string, number>>;
}

/**
 * NftablesCleanupReport is an optional extension of BackendSyncResult: stale
 * chain deletions nft refused during the sync (nftables mode deletes them in a
 * transaction of its own, so the sync itself may still succeed).
 */
export interface NftablesCleanupReport {
  readonly nftablesCleanupFailures?: number;
}

/** PacketCounters reads kube-proxy's nfacct packet counters (iptables mode) at a scrape; undefined when unavailable. */
export type PacketCounters = () => Promise<{ ctStateInvalidDropped?: number; localhostNodePortsAccepted?: number }>;

/**
 * KubeProxyMetrics registers the families kube-proxy registers for a proxy
 * mode (RegisterMetrics) and updates them where kube-proxy's proxiers do.
 */
export class KubeProxyMetrics {
  readonly mode: ProxyMode;
  readonly #registry: Registry;
  readonly syncDuration: Histogram<'ip_family'>;
  readonly syncFullDuration: Histogram<'ip_family'> | null = null;
  readonly syncPartialDuration: Histogram<'ip_family'> | null = null;
  readonly lastTimestamp: Gauge<'ip_family'>;
  readonly lastQueuedTimestamp: Gauge<'ip_family'>;
  readonly networkProgramming: Histogram<'ip_family'>;
  readonly noLocalEndpoints: Gauge<'ip_family' | 'traffic_policy'>;
  readonly healthzTotal: Counter<'code'>;
  readonly livezTotal: Counter<'code'>;
  readonly conntrackSyncDuration: Histogram<'ip_family'>;
  readonly conntrackDeleted: Counter<'ip_family'>;
  readonly restoreFailures: Counter<'ip_family'> | null = null;
  readonly partialRestoreFailures: Counter<'ip_family'> | null = null;
  readonly iptablesTotal: Gauge<'ip_family' | 'table'> | null = null;
  readonly iptablesLast: Gauge<'ip_family' | 'table'> | null = null;
  readonly nftablesSyncFailures: Counter<'ip_family'> | null = null;
  readonly nftablesCleanupFailures: Counter<'ip_family'> | null = null;

  /**
   * The failure counters start at 0 for each of the node's families (beyond
   * kube-proxy, which creates a series at its first failure), so rate() and
   * increase() alerts see the series from the first scrape instead of missing
   * the first failure (Prometheus' "avoid missing metrics").
   */
  constructor(registry: Registry, mode: ProxyMode, state: KubeProxyMetricsState, families: readonly IPFamily[]) {
    this.mode = mode;
    this.#registry = registry;
    const registers = [registry];
    const histogram = (name: string, help: string, buckets: number[]) => new Histogram({ name, help: ALPHA + help, labelNames: ['ip_family'] as const, buckets, registers });
    const familyCounter = (name: string, help: string) => new Counter({ name, help: ALPHA + help, labelNames: ['ip_family'] as const, registers });

    // Registered in every mode.
    this.syncDuration = histogram('kubeproxy_sync_proxy_rules_duration_seconds', 'SyncProxyRules latency in seconds', SYNC_BUCKETS);
    this.lastQueuedTimestamp = new Gauge({
      name: 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds',
      help: ALPHA + 'The last time a sync of proxy rules was queued',
      labelNames: ['ip_family'] as const,
      registers,
    });
    this.lastTimestamp = new Gauge({
      name: 'kubeproxy_sync_proxy_rules_last_timestamp_seconds',
      help: ALPHA + 'The last time proxy rules were successfully synced',
      labelNames: ['ip_family'] as const,
      registers,
    });
    new Gauge({
      name: 'kubeproxy_sync_proxy_rules_endpoint_changes_pending',
      help: ALPHA + 'Pending proxy rules Endpoint changes',
      registers,
      collect() {
        this.set(state.endpointsPending);
      },
    });
    new Counter({
      name: 'kubeproxy_sync_proxy_rules_endpoint_changes_total',
      help: ALPHA + 'Cumulative proxy rules Endpoint changes',
      registers,
      collect() {
        this.reset();
        this.inc(state.endpointChangesTotal);
      },
    });
    new Gauge({
      name: 'kubeproxy_sync_proxy_rules_service_changes_pending',
      help: ALPHA + 'Pending proxy rules Service changes',
      registers,
      collect() {
        this.set(state.servicesPending);
      },
    });
    new Counter({
      name: 'kubeproxy_sync_proxy_rules_service_changes_total',
      help: ALPHA + 'Cumulative proxy rules Service changes',
      registers,
      collect() {
        this.reset();
        this.inc(state.serviceChangesTotal);
      },
    });
    this.healthzTotal = new Counter({ name: 'kubeproxy_proxy_healthz_total', help: ALPHA + 'Cumulative proxy healthz HTTP status', labelNames: ['code'] as const, registers });
    this.livezTotal = new Counter({ name: 'kubeproxy_proxy_livez_total', help: ALPHA + 'Cumulative proxy livez HTTP status', labelNames: ['code'] as const, registers });
    this.networkProgramming = histogram('kubeproxy_network_programming_duration_seconds', 'In Cluster Network Programming Latency in seconds', NETWORK_PROGRAMMING_BUCKETS);
    this.noLocalEndpoints = new Gauge({
      name: 'kubeproxy_sync_proxy_rules_no_local_endpoints_total',
      help: ALPHA + 'Number of services with a Local traffic policy and no endpoints',
      labelNames: ['ip_family', 'traffic_policy'] as const,
      registers,
    });
    this.conntrackSyncDuration = histogram('kubeproxy_conntrack_reconciler_sync_duration_seconds', 'ReconcileConntrackFlowsLatency latency in seconds', SYNC_BUCKETS);
    this.conntrackDeleted = familyCounter('kubeproxy_conntrack_reconciler_deleted_entries_total', 'Cumulative conntrack flows deleted by conntrack reconciler');

    if (mode === 'iptables' || mode === 'nftables') {
      this.syncFullDuration = histogram('kubeproxy_sync_full_proxy_rules_duration_seconds', 'SyncProxyRules latency in seconds for full resyncs', SYNC_BUCKETS);
      this.syncPartialDuration = histogram('kubeproxy_sync_partial_proxy_rules_duration_seconds', 'SyncProxyRules latency in seconds for partial resyncs', SYNC_BUCKETS);
    }
    if (mode === 'iptables' || mode === 'ipvs') {
      this.restoreFailures = familyCounter('kubeproxy_sync_proxy_rules_iptables_restore_failures_total', 'Cumulative proxy iptables restore failures');
    }
    if (mode === 'iptables') {
      this.partialRestoreFailures = familyCounter('kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total', 'Cumulative proxy iptables partial restore failures');
      const tableGauge = (name: string, help: string) => new Gauge({ name, help: ALPHA + help, labelNames: ['ip_family', 'table'] as const, registers });
      this.iptablesTotal = tableGauge('kubeproxy_sync_proxy_rules_iptables_total', 'Total number of iptables rules owned by kube-proxy');
      this.iptablesLast = tableGauge('kubeproxy_sync_proxy_rules_iptables_last', 'Number of iptables rules written by kube-proxy in last sync');
    }
    if (mode === 'nftables') {
      this.nftablesSyncFailures = familyCounter('kubeproxy_sync_proxy_rules_nftables_sync_failures_total', 'Cumulative proxy nftables sync failures');
      this.nftablesCleanupFailures = familyCounter('kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total', 'Cumulative proxy nftables cleanup failures');
    }
    for (const counter of [this.restoreFailures, this.partialRestoreFailures, this.nftablesSyncFailures, this.nftablesCleanupFailures]) {
      for (const family of families) counter?.inc({ ip_family: family }, 0);
    }
  }

  /** syncQueued: a change was queued for a sync (kube-proxy's Sync(), and the sync loop's start). */
  syncQueued(family: IPFamily, at: number): void {
    this.lastQueuedTimestamp.set({ ip_family: family }, at / 1000);
  }

  /**
   * syncDone records one sync as kube-proxy's syncProxyRules does: durations
   * always (full or partial by what was attempted), rule counts once built,
   * failure counters on failure, and latency, no-local-endpoints and the
   * last-sync timestamp only on success.
   */
  syncDone(family: IPFamily, record: SyncRecord, result: BackendSyncResult & RulesWrittenReport & NftablesCleanupReport, noLocal: NoLocalEndpoints | null): void {
    const labels = { ip_family: family };
    if (result.nftablesCleanupFailures) this.nftablesCleanupFailures?.inc(labels, result.nftablesCleanupFailures);
    const seconds = record.durationMs / 1000;
    this.syncDuration.observe(labels, seconds);
    (record.full ? this.syncFullDuration : this.syncPartialDuration)?.observe(labels, seconds);

    if (this.iptablesTotal && this.iptablesLast && Object.keys(result.rulesByTable).length > 0) {
      for (const [table, n] of Object.entries(result.rulesByTable)) this.iptablesTotal.set({ ip_family: family, table }, n);
      // A full sync writes every rule it owns; a partial one reports what it wrote.
      const written = result.rulesWrittenByTable ?? (record.full ? result.rulesByTable : null);
      for (const [table, n] of Object.entries(written ?? {})) this.iptablesLast.set({ ip_family: family, table }, n);
    }

    if (!record.ok) {
      // kube-proxy counts a restore failure when iptables-restore itself fails,
      // and a partial failure for any failed partial sync (the next one is full).
      if (record.error?.code === RestoreFailedError.code) this.restoreFailures?.inc(labels);
      if (!record.full) this.partialRestoreFailures?.inc(labels);
      this.nftablesSyncFailures?.inc(labels);
      return;
    }
    for (const ms of record.networkProgrammingMs) this.networkProgramming.observe(labels, ms / 1000);
    if (noLocal) {
      this.noLocalEndpoints.set({ ip_family: family, traffic_policy: 'internal' }, noLocal.internal);
      this.noLocalEndpoints.set({ ip_family: family, traffic_policy: 'external' }, noLocal.external);
    }
    this.lastTimestamp.set(labels, record.finishedAt / 1000);
  }

  /** probeServed counts a /healthz or /livez answer. */
  probeServed(probe: 'healthz' | 'livez', code: number): void {
    (probe === 'healthz' ? this.healthzTotal : this.livezTotal).inc({ code: String(code) });
  }

  /** conntrackReconciled records one stale-flow cleanup pass (the conntrack reconciler calls it). */
  conntrackReconciled(family: IPFamily, seconds: number, deleted: number): void {
    this.conntrackSyncDuration.observe({ ip_family: family }, seconds);
    this.conntrackDeleted.inc({ ip_family: family }, deleted);
  }

  /**
   * enablePacketCounters publishes kube-proxy's nfacct packet counters (iptables
   * mode only), read at each scrape. kube-proxy registers them only when its
   * nfacct client works, so kproxy registers them only when a reader is given.
   */
  enablePacketCounters(read: PacketCounters, onError: (err: unknown) => void): void {
    if (this.mode !== 'iptables') return;
    const counter = (name: string, help: string, pick: (v: Awaited<ReturnType<PacketCounters>>) => number | undefined) =>
      new Counter({
        name,
        help: ALPHA + help,
        registers: [this.#registry],
        async collect() {
          try {
            const v = pick(await read());
            if (v !== undefined) {
              this.reset();
              this.inc(v);
            }
          } catch (err) {
            // The scrape keeps the last value; the reader's failure is logged by the caller.
            onError(err);
          }
        },
      });
    counter('kubeproxy_iptables_ct_state_invalid_dropped_packets_total', 'packets dropped by iptables to work around conntrack problems', (v) => v.ctStateInvalidDropped);
    counter('kubeproxy_iptables_localhost_nodeports_accepted_packets_total', 'Number of packets accepted on nodeports of loopback interface', (v) => v.localhostNodePortsAccepted);
  }
}

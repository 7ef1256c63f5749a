import { Counter, Gauge, type Registry } from 'prom-client';
import type { SourceStatus } from '../source.ts';
import type { ObjectKind, StateCheckout } from '../proxy-state.ts';
import type { IPFamily } from '../../net/ip.ts';
import { SYNC_TRIGGERS, type SyncRecord } from '../sync-loop.ts';

/** KproxyMetricsState is what kproxy's own point-in-time metrics read (ProxyState satisfies it). */
export interface KproxyMetricsState {
  readonly invalidTotal: Readonly<Record<ObjectKind, number>>;
  /** invalid: current refusals keyed "Kind ns/name". */
  readonly invalid: ReadonlyMap<string, string>;
}

/** ServiceHealthView is what the health check node port metrics read. */
export interface ServiceHealthView {
  readonly size: number;
  readonly portErrorsTotal: number;
}

/** DashboardView is what the dashboard's metrics read (Dashboard.counters() provides it). */
export interface DashboardView {
  readonly authFailures: Readonly<Record<string, number>>;
  readonly refused: Readonly<Record<string, number>>;
  readonly tlsReloadErrors: number;
}

/** ConntrackView is what the conntrack gauges read (server/proxy/conntrack/ provides it); null counts are unknown. */
export interface ConntrackView {
  /** entries/max: nf_conntrack_count and nf_conntrack_max (null: unreadable, e.g. nf_conntrack not loaded). */
  readonly entries: number | null;
  readonly max: number | null;
  readonly cleanupEnabled: boolean;
  readonly cleanupPending: number;
  readonly cleanupErrorsTotal: number;
  /** countErrorsTotal: per-frontend counts (the dashboard's "Count conntrack entries") whose listing failed. */
  readonly countErrorsTotal: number;
}

export interface KproxyMetricsOptions {
  registry: Registry;
  state: KproxyMetricsState;
  version: string;
  mode: string;
  /** families: the IP families proxied (their failed syncs are counted from 0). */
  families: readonly IPFamily[];
  source?: () => SourceStatus;
  serviceHealth?: () => ServiceHealthView | null;
  /** ready: /readyz's answer now (null: no readiness in this daemon). */
  ready?: () => boolean | null;
}

const KINDS: readonly ObjectKind[] = ['Service', 'EndpointSlice', 'Node'];

/** snakeCase turns a source counter key ("parseErrors") into a label value ("parse_errors"). */
export function snakeCase(key: string): string {
  return key.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase();
}

/** SourceCounter is one source counter as a labelled series. */
export interface SourceCounter {
  readonly event: string;
  /** resource: the kind the counter is about ("Service"), or "" for the source as a whole. */
  readonly resource: string;
  readonly value: number;
}

/**
 * sourceCounters turns a source's counters into series. Keys "Kind.counter"
 * (the Kubernetes source's per-informer counters) give resource=Kind; a plain
 * "counter" that is only their sum is left out so sum() over the series does
 * not count twice; other plain keys (the file source's) have resource="".
 */
export function sourceCounters(counters: Readonly<Record<string, number>>): SourceCounter[] {
  const perKind: SourceCounter[] = [];
  const broken = new Set<string>();
  const plain: [string, number][] = [];
  for (const [key, value] of Object.entries(counters)) {
    const dot = key.indexOf('.');
    if (dot < 0) {
      plain.push([key, value]);
      continue;
    }
    const event = snakeCase(key.slice(dot + 1));
    broken.add(event);
    perKind.push({ event, resource: key.slice(0, dot), value });
  }
  const whole = plain.map(([k, value]) => ({ event: snakeCase(k), resource: '', value })).filter((c) => !broken.has(c.event));
  return [...whole, ...perKind];
}

/**
 * KproxyMetrics are kproxy's own kproxy_* metrics: what kube-proxy has no name
 * for but an operator of kproxy needs (objects refused as invalid, the source's
 * reconnects and relists, syncs by trigger, health check ports that could not
 * be opened). Values owned elsewhere are read at scrape time.
 */
export class KproxyMetrics {
  readonly syncs: Counter<'ip_family' | 'trigger' | 'result'>;
  readonly #consecutiveFailures: Gauge<'ip_family'>;
  readonly #withoutNodeIP: Gauge<'ip_family'>;
  readonly #skippedPorts: Gauge<'ip_family'>;
  readonly #readyzTotal: Counter<'code'>;
  readonly #verifyMismatches: Counter<'ip_family'>;
  readonly #verifications: Counter<'ip_family' | 'result'>;

  constructor(o: KproxyMetricsOptions) {
    const registers = [o.registry];
    new Gauge({
      name: 'kproxy_build_info',
      help: "A metric with a constant '1' value labeled by the kproxy version, the Node.js version and the proxy mode",
      labelNames: ['mode', 'node_version', 'version'] as const,
      registers,
    }).set({ mode: o.mode, node_version: process.version, version: o.version }, 1);
    this.syncs = new Counter({
      name: 'kproxy_syncs_total',
      help: 'Syncs of the proxy rules, by IP family, what triggered them and whether they succeeded',
      labelNames: ['ip_family', 'result', 'trigger'] as const,
      registers,
    });
    // Failed syncs start at 0 for each family and trigger, as the kube-proxy failure counters do:
    // rate() and increase() alerts then see the first failure instead of a series that appears with it.
    for (const ip_family of o.families) for (const trigger of SYNC_TRIGGERS) this.syncs.inc({ ip_family, result: 'failure', trigger }, 0);
    this.#consecutiveFailures = new Gauge({
      name: 'kproxy_sync_consecutive_failures',
      help: 'Syncs of an IP family that failed in a row since its last successful one',
      labelNames: ['ip_family'] as const,
      registers,
    });
    this.#withoutNodeIP = new Gauge({
      name: 'kproxy_service_ports_skipped_no_node_ip',
      help: 'Service ports of an IP family left unprogrammed because the Node lists no IP of that family',
      labelNames: ['ip_family'] as const,
      registers,
    });
    this.#skippedPorts = new Gauge({
      name: 'kproxy_service_ports_skipped',
      help: 'Service ports of an IP family the last successful sync left unprogrammed because their kernel objects could not be written (values kproxy cannot write safely, a kernel limit such as a full ipset); the log, a Warning Event on the Service and the dashboard say why',
      labelNames: ['ip_family'] as const,
      registers,
    });
    for (const ip_family of o.families) this.#skippedPorts.set({ ip_family }, 0);
    this.#verifyMismatches = new Counter({
      name: 'kproxy_sync_verify_mismatches_total',
      help: 'Kernel objects found, after a full sync, not to hold what the sync wrote (rules per chain, elements per set...), by IP family',
      labelNames: ['ip_family'] as const,
      registers,
    });
    this.#verifications = new Counter({
      name: 'kproxy_sync_verifications_total',
      help: 'Checks after a full sync that the kernel holds what it wrote, by IP family and result (ok, mismatch, skipped: the kernel could not be read)',
      labelNames: ['ip_family', 'result'] as const,
      registers,
    });
    for (const ip_family of o.families) {
      this.#verifyMismatches.inc({ ip_family }, 0);
      for (const result of ['ok', 'mismatch', 'skipped']) this.#verifications.inc({ ip_family, result }, 0);
    }
    this.#readyzTotal = new Counter({ name: 'kproxy_proxy_readyz_total', help: 'Cumulative proxy readyz HTTP status', labelNames: ['code'] as const, registers });
    const ready = o.ready;
    if (ready) {
      new Gauge({
        name: 'kproxy_ready',
        help: 'Whether /readyz answers ready (1): the first full sync succeeded and /healthz is healthy; 0 before the first sync, and while not healthy',
        registers,
        collect() {
          const r = ready();
          if (r !== null) this.set(r ? 1 : 0);
        },
      });
    }
    new Counter({
      name: 'kproxy_invalid_objects_total',
      help: 'Objects refused as invalid (skipped; the last valid version stays programmed), by kind',
      labelNames: ['kind'] as const,
      registers,
      collect() {
        this.reset();
        for (const kind of KINDS) this.inc({ kind }, o.state.invalidTotal[kind]);
      },
    });
    new Gauge({
      name: 'kproxy_invalid_objects',
      help: 'Objects currently refused as invalid, by kind',
      labelNames: ['kind'] as const,
      registers,
      collect() {
        const counts: Record<string, number> = { Service: 0, EndpointSlice: 0, Node: 0 };
        for (const ref of o.state.invalid.keys()) {
          const kind = ref.slice(0, ref.indexOf(' '));
          if (kind in counts) counts[kind]++;
        }
        for (const kind of KINDS) this.set({ kind }, counts[kind]);
      },
    });
    if (o.source) this.#sourceMetrics(registers, o.source);
    if (o.serviceHealth) this.#serviceHealthMetrics(registers, o.serviceHealth);
  }

  /** readyzServed counts a /readyz answer. */
  readyzServed(code: number): void {
    this.#readyzTotal.inc({ code: String(code) });
  }

  /** syncDone counts a sync by family, trigger and result; skipped: the service ports a successful sync left out. */
  syncDone(record: SyncRecord, checkout?: Pick<StateCheckout, 'withoutNodeIP'>, skipped?: ReadonlyMap<string, string>): void {
    const ip_family = record.family;
    this.syncs.inc({ ip_family, result: record.ok ? 'success' : 'failure', trigger: record.trigger });
    this.#consecutiveFailures.set({ ip_family }, record.consecutiveFailures);
    if (checkout) this.#withoutNodeIP.set({ ip_family }, checkout.withoutNodeIP);
    // A failed sync changed nothing in the kernel: the last successful one's count stands.
    if (record.ok && skipped) this.#skippedPorts.set({ ip_family }, skipped.size);
    const v = record.verify;
    if (v) {
      this.#verifications.inc({ ip_family, result: v.skipped !== undefined ? 'skipped' : v.mismatchCount ? 'mismatch' : 'ok' });
      if (v.mismatchCount) this.#verifyMismatches.inc({ ip_family }, v.mismatchCount);
    }
  }

  #sourceMetrics(registers: Registry[], source: () => SourceStatus): void {
    new Counter({
      name: 'kproxy_source_events_total',
      help: 'Events of the object source (lists, relists, watch reconnects, errors, file reloads...), by source kind, resource and event',
      labelNames: ['event', 'resource', 'source'] as const,
      registers,
      collect() {
        const s = source();
        this.reset();
        for (const c of sourceCounters(s.counters)) this.inc({ event: c.event, resource: c.resource, source: s.kind }, c.value);
      },
    });
    new Gauge({
      name: 'kproxy_source_synced',
      help: 'Whether the object source has delivered its initial lists (1) or not yet (0)',
      labelNames: ['source'] as const,
      registers,
      collect() {
        const s = source();
        this.reset();
        this.set({ source: s.kind }, s.synced ? 1 : 0);
      },
    });
    new Gauge({
      name: 'kproxy_source_objects',
      help: 'Objects the object source currently holds',
      labelNames: ['source'] as const,
      registers,
      collect() {
        const s = source();
        this.reset();
        this.set({ source: s.kind }, s.objects);
      },
    });
  }

  #serviceHealthMetrics(registers: Registry[], view: () => ServiceHealthView | null): void {
    new Gauge({
      name: 'kproxy_service_healthchecks',
      help: 'Health check node ports listening (LoadBalancer services with externalTrafficPolicy Local)',
      registers,
      collect() {
        this.set(view()?.size ?? 0);
      },
    });
    new Counter({
      name: 'kproxy_healthcheck_port_errors_total',
      help: 'Attempts to open a health check node port that failed',
      registers,
      collect() {
        this.reset();
        this.inc(view()?.portErrorsTotal ?? 0);
      },
    });
  }

  /**
   * attachDashboard registers the dashboard's counters (once): refused
   * sign-ins by reason, work its budgets turned away, certificate pairs that
   * did not load. Every refusal is also logged; these are what alerts read.
   */
  attachDashboard(registry: Registry, view: () => DashboardView | null): void {
    if (registry.getSingleMetric('kproxy_dashboard_auth_failures_total')) return;
    const registers = [registry];
    const labelled = (name: string, help: string, label: string, pick: (v: DashboardView) => Readonly<Record<string, number>>) =>
      new Counter({
        name,
        help,
        labelNames: [label],
        registers,
        collect() {
          const v = view();
          this.reset();
          for (const [key, n] of Object.entries(v ? pick(v) : {})) this.inc({ [label]: key }, n);
        },
      });
    labelled('kproxy_dashboard_auth_failures_total', 'Dashboard credentials refused, by reason (missing, invalid, forbidden, unavailable, throttled)', 'reason', (v) => v.authFailures);
    labelled('kproxy_dashboard_refused_total', "Work the dashboard's budgets turned away, by reason (messages, reads, connections, slow-clients)", 'reason', (v) => v.refused);
    new Counter({
      name: 'kproxy_dashboard_tls_reload_errors_total',
      help: 'Changed dashboard certificate or key files that did not load (the previous pair stays in service)',
      registers,
      collect() {
        this.reset();
        this.inc(view()?.tlsReloadErrors ?? 0);
      },
    });
  }

  /**
   * attachConntrack registers the conntrack gauges (once): kube-proxy has no
   * metric for the table's fill. Counts that cannot be read are NaN.
   */
  attachConntrack(registry: Registry, view: () => Promise<ConntrackView | null>): void {
    if (registry.getSingleMetric('kproxy_conntrack_entries')) return;
    const registers = [registry];
    const gauge = (name: string, help: string, pick: (v: ConntrackView) => number | null) =>
      new Gauge({
        name,
        help,
        registers,
        async collect() {
          const v = await view();
          this.set(v ? (pick(v) ?? Number.NaN) : Number.NaN);
        },
      });
    gauge('kproxy_conntrack_entries', 'Connections the kernel tracks in this network namespace (nf_conntrack_count)', (v) => v.entries);
    gauge('kproxy_conntrack_max', 'Limit of tracked connections (nf_conntrack_max)', (v) => v.max);
    gauge('kproxy_conntrack_cleanup_enabled', 'Whether stale UDP conntrack entries are cleaned (0: the conntrack binary is missing)', (v) => (v.cleanupEnabled ? 1 : 0));
    gauge('kproxy_conntrack_cleanup_pending', 'Stale-entry deletions waiting for the next cleanup pass', (v) => v.cleanupPending);
    const counter = (name: string, help: string, pick: (v: ConntrackView) => number) =>
      new Counter({
        name,
        help,
        registers,
        async collect() {
          const v = await view();
          this.reset();
          this.inc(v ? pick(v) : 0);
        },
      });
    counter('kproxy_conntrack_cleanup_errors_total', 'Failed conntrack deletions and listings of the stale-entry cleanup', (v) => v.cleanupErrorsTotal);
    counter('kproxy_conntrack_count_errors_total', 'Failed conntrack listings that count the flows of one service frontend (dashboard and API, on request)', (v) => v.countErrorsTotal);
  }
}

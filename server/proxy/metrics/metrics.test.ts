import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../clock-fake.ts';
import { RestoreFailedError, SyncFailedError } from '../../errors.ts';
import { buildMetricsApp } from '../../http/app.ts';
import { testProxyConfig } from '../../http/testing.ts';
import { silentLogger } from '../../log.ts';
import type { ProxyMode } from '../../config/proxy-mode.ts';
import type { IPFamily } from '../../net/ip.ts';
import type { BackendSyncResult } from '../backend.ts';
import { unknownNode } from '../node-info.ts';
import { ProxyState, type ObjectKind, type StateCheckout } from '../proxy-state.ts';
import type { SyncRecord } from '../sync-loop.ts';
import { ep, makeService, makeSlice } from '../testing.ts';
import { sourceCounters } from './kproxy-metrics.ts';
import { ProxyMetrics } from './metrics.ts';

const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);

// The bucket bounds kube-proxy publishes, written out from its source:
// ExponentialBuckets(0.001, 2, 15) and MergeBuckets(0.25..0.5, 1..59, 60..115, 120..300).
const SYNC_LE = ['0.001', '0.002', '0.004', '0.008', '0.016', '0.032', '0.064', '0.128', '0.256', '0.512', '1.024', '2.048', '4.096', '8.192', '16.384', '+Inf'];
const NETPROG_LE = [
  '0',
  '0.25',
  '0.5',
  ...Array.from({ length: 59 }, (_, i) => String(i + 1)),
  '60',
  '65',
  '70',
  '75',
  '80',
  '85',
  '90',
  '95',
  '100',
  '105',
  '110',
  '115',
  '120',
  '150',
  '180',
  '210',
  '240',
  '270',
  '300',
  '+Inf',
];

interface FakeState {
  families: IPFamily[];
  ready: boolean;
  servicesPending: number;
  endpointsPending: number;
  serviceChangesTotal: number;
  endpointChangesTotal: number;
  invalidTotal: Record<ObjectKind, number>;
  invalid: Map<string, string>;
}

function fakeState(): FakeState {
  return {
    families: ['IPv4'],
    ready: true,
    servicesPending: 0,
    endpointsPending: 0,
    serviceChangesTotal: 0,
    endpointChangesTotal: 0,
    invalidTotal: { Service: 0, EndpointSlice: 0, Node: 0 },
    invalid: new Map(),
  };
}

const EMPTY_CHECKOUT: StateCheckout = {
  services: new Map(),
  endpoints: new Map(),
  node: unknownNode('node-a'),
  changedServices: new Set(),
  topologyChanged: false,
  deletedUDPClusterIPs: new Set(),
  staleEndpoints: [],
  newlyActiveUDPServices: new Set(),
  triggerTimes: [],
  withoutNodeIP: 0,
};

let seq = 0;
function record(over: Partial<SyncRecord> = {}): SyncRecord {
  const startedAt = over.startedAt ?? T0;
  const durationMs = over.durationMs ?? 4;
  return {
    family: 'IPv4',
    seq: ++seq,
    trigger: 'change',
    startedAt,
    finishedAt: startedAt + durationMs,
    full: true,
    ok: true,
    durationMs,
    buildMs: 1,
    applyMs: 3,
    linesWritten: 10,
    bytesWritten: 100,
    servicesWritten: 1,
    servicesChanged: [],
    servicesChangedCount: 0,
    servicePorts: 0,
    endpoints: 0,
    rulesByTable: {},
    networkProgrammingMs: [],
    consecutiveFailures: 0,
    ...over,
  };
}

function result(rec: SyncRecord, extra: Record<string, unknown> = {}): BackendSyncResult {
  return { full: rec.full, buildMs: 1, applyMs: 3, linesWritten: 10, bytesWritten: 100, servicesWritten: 1, rulesByTable: rec.rulesByTable, ...extra };
}

function setup(mode: ProxyMode = 'iptables', state: FakeState | ProxyState = fakeState(), processMetrics = false) {
  const clock = new FakeClock(T0);
  const metrics = new ProxyMetrics({
    mode,
    state,
    clock,
    logger: silentLogger,
    processMetrics,
    source: () => ({
      kind: 'file',
      description: 'file:deploy/examples/',
      synced: true,
      objects: 7,
      counters: { reloads: 3, parseErrors: 1 },
    }),
  });
  const app = buildMetricsApp({ metrics, config: testProxyConfig({ mode }) });
  const sync = (rec: SyncRecord, checkout: StateCheckout = EMPTY_CHECKOUT, extra: Record<string, unknown> = {}) => metrics.observer.onSync!(rec, checkout, result(rec, extra));
  const scrape = async () => {
    const res = await app.inject({ method: 'GET', url: '/metrics' });
    expect(res.statusCode).toBe(200);
    return { text: res.body, families: parse(res.body), headers: res.headers };
  };
  return { clock, metrics, app, sync, scrape, state };
}

interface Family {
  help: string;
  type: string;
  lines: string[];
}

/** parse splits an exposition into families, checking HELP/TYPE come first. */
function parse(text: string): Map<string, Family> {
  const out = new Map<string, Family>();
  let cur: Family | null = null;
  for (const line of text.trimEnd().split('\n')) {
    const help = /^# HELP (\S+) (.*)$/.exec(line);
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (help) out.set(help[1], (cur = { help: help[2], type: '', lines: [line] }));
    else if (type) {
      cur!.type = type[2];
      cur!.lines.push(line);
    } else cur!.lines.push(line);
  }
  return out;
}

function block(families: Map<string, Family>, name: string): string {
  const f = families.get(name);
  if (!f) throw new Error(`family ${name} is not exposed`);
  return f.lines.join('\n');
}

function histogram(name: string, help: string, les: string[], counts: number[], sum: string, labels = 'ip_family="IPv4"'): string {
  return [
    `# HELP ${name} ${help}`,
    `# TYPE ${name} histogram`,
    ...les.map((le, i) => `${name}_bucket{${labels},le="${le}"} ${counts[i]}`),
    `${name}_sum{${labels}} ${sum}`,
    `${name}_count{${labels}} ${counts[counts.length - 1]}`,
  ].join('\n');
}

/** cumulative turns "observations per bucket index" into cumulative bucket counts. */
function cumulative(n: number, hits: number[]): number[] {
  const counts = new Array<number>(n).fill(0);
  for (const h of hits) for (let i = h; i < n; i++) counts[i]++;
  return counts;
}

describe('kube-proxy metrics on /metrics', () => {
  it('answers with the Prometheus text content type and no families nobody has touched, but the failure counters at 0', async () => {
    const { scrape } = setup();
    const { families, headers } = await scrape();
    expect(headers['content-type']).toBe('text/plain; version=0.0.4; charset=utf-8');
    expect([...families.keys()].filter((n) => n.startsWith('kubeproxy_'))).toEqual([
      'kubeproxy_sync_proxy_rules_endpoint_changes_pending',
      'kubeproxy_sync_proxy_rules_endpoint_changes_total',
      'kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total',
      'kubeproxy_sync_proxy_rules_iptables_restore_failures_total',
      'kubeproxy_sync_proxy_rules_service_changes_pending',
      'kubeproxy_sync_proxy_rules_service_changes_total',
    ]);
  });

  it.each([
    ['iptables', ['kubeproxy_sync_proxy_rules_iptables_restore_failures_total', 'kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total']],
    ['ipvs', ['kubeproxy_sync_proxy_rules_iptables_restore_failures_total']],
    ['nftables', ['kubeproxy_sync_proxy_rules_nftables_sync_failures_total', 'kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total']],
  ] as const)('starts the %s failure counters at 0 for the node family, so rate() sees the first failure', async (mode, names) => {
    const { scrape } = setup(mode);
    const { families } = await scrape();
    for (const name of names) expect(block(families, name).split('\n').at(-1)).toBe(`${name}{ip_family="IPv4"} 0`);
  });

  it('declares every iptables-mode family with kube-proxy names, types, help and labels', async () => {
    const { sync, scrape, metrics } = setup('iptables');
    metrics.observer.onStart!(T0, 'IPv4');
    sync(record({ full: true, rulesByTable: { filter: 4, nat: 20 } }));
    sync(record({ full: false, ok: false, error: { code: RestoreFailedError.code, message: 'x' } }));
    metrics.probeServed('healthz', 200);
    metrics.probeServed('livez', 200);
    metrics.conntrackReconciled(0.01, 2, 'IPv4');
    const { families } = await scrape();
    const declared = [...families.entries()].filter(([n]) => n.startsWith('kubeproxy_')).map(([name, f]) => [name, f.type, f.help, labelNames(f)]);
    expect(declared).toEqual([
      ['kubeproxy_conntrack_reconciler_deleted_entries_total', 'counter', '[ALPHA] Cumulative conntrack flows deleted by conntrack reconciler', 'ip_family'],
      ['kubeproxy_conntrack_reconciler_sync_duration_seconds', 'histogram', '[ALPHA] ReconcileConntrackFlowsLatency latency in seconds', 'ip_family,le'],
      ['kubeproxy_proxy_healthz_total', 'counter', '[ALPHA] Cumulative proxy healthz HTTP status', 'code'],
      ['kubeproxy_proxy_livez_total', 'counter', '[ALPHA] Cumulative proxy livez HTTP status', 'code'],
      ['kubeproxy_sync_full_proxy_rules_duration_seconds', 'histogram', '[ALPHA] SyncProxyRules latency in seconds for full resyncs', 'ip_family,le'],
      ['kubeproxy_sync_partial_proxy_rules_duration_seconds', 'histogram', '[ALPHA] SyncProxyRules latency in seconds for partial resyncs', 'ip_family,le'],
      ['kubeproxy_sync_proxy_rules_duration_seconds', 'histogram', '[ALPHA] SyncProxyRules latency in seconds', 'ip_family,le'],
      ['kubeproxy_sync_proxy_rules_endpoint_changes_pending', 'gauge', '[ALPHA] Pending proxy rules Endpoint changes', ''],
      ['kubeproxy_sync_proxy_rules_endpoint_changes_total', 'counter', '[ALPHA] Cumulative proxy rules Endpoint changes', ''],
      ['kubeproxy_sync_proxy_rules_iptables_last', 'gauge', '[ALPHA] Number of iptables rules written by kube-proxy in last sync', 'ip_family,table'],
      ['kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total', 'counter', '[ALPHA] Cumulative proxy iptables partial restore failures', 'ip_family'],
      ['kubeproxy_sync_proxy_rules_iptables_restore_failures_total', 'counter', '[ALPHA] Cumulative proxy iptables restore failures', 'ip_family'],
      ['kubeproxy_sync_proxy_rules_iptables_total', 'gauge', '[ALPHA] Total number of iptables rules owned by kube-proxy', 'ip_family,table'],
      ['kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds', 'gauge', '[ALPHA] The last time a sync of proxy rules was queued', 'ip_family'],
      ['kubeproxy_sync_proxy_rules_last_timestamp_seconds', 'gauge', '[ALPHA] The last time proxy rules were successfully synced', 'ip_family'],
      ['kubeproxy_sync_proxy_rules_no_local_endpoints_total', 'gauge', '[ALPHA] Number of services with a Local traffic policy and no endpoints', 'ip_family,traffic_policy'],
      ['kubeproxy_sync_proxy_rules_service_changes_pending', 'gauge', '[ALPHA] Pending proxy rules Service changes', ''],
      ['kubeproxy_sync_proxy_rules_service_changes_total', 'counter', '[ALPHA] Cumulative proxy rules Service changes', ''],
    ]);
    // The network programming histogram appears with its first observation.
    expect(families.has('kubeproxy_network_programming_duration_seconds')).toBe(false);
  });

  it('registers the nftables and ipvs families kube-proxy registers for those modes', async () => {
    for (const [mode, only, absent] of [
      [
        'nftables',
        ['kubeproxy_sync_proxy_rules_nftables_sync_failures_total', 'kubeproxy_sync_full_proxy_rules_duration_seconds', 'kubeproxy_sync_partial_proxy_rules_duration_seconds'],
        ['kubeproxy_sync_proxy_rules_iptables_restore_failures_total', 'kubeproxy_sync_proxy_rules_iptables_total'],
      ],
      [
        'ipvs',
        ['kubeproxy_sync_proxy_rules_iptables_restore_failures_total'],
        ['kubeproxy_sync_full_proxy_rules_duration_seconds', 'kubeproxy_sync_proxy_rules_nftables_sync_failures_total', 'kubeproxy_sync_proxy_rules_iptables_total'],
      ],
    ] as const) {
      const { sync, scrape } = setup(mode);
      sync(record({ full: true, rulesByTable: { nat: 3 } }));
      sync(record({ full: false }), EMPTY_CHECKOUT, { nftablesCleanupFailures: 1 });
      sync(record({ ok: false, full: true, error: { code: RestoreFailedError.code, message: 'x' } }));
      const { families, text } = await scrape();
      for (const name of only) expect(families.has(name), `${mode}: ${name}`).toBe(true);
      for (const name of absent) expect(families.has(name), `${mode}: ${name}`).toBe(false);
      if (mode === 'nftables') {
        expect(text).toContain('kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family="IPv4"} 1\n');
        expect(text).toContain('kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total{ip_family="IPv4"} 1\n');
        expect(families.get('kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total')!.help).toBe('[ALPHA] Cumulative proxy nftables cleanup failures');
      } else {
        expect(text).toContain('kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family="IPv4"} 1\n');
      }
    }
  });

  it('counts the stale-chain deletions nftables mode reports with a sync, failed or not', async () => {
    const { sync, scrape } = setup('nftables');
    sync(record({ full: false }), EMPTY_CHECKOUT, { nftablesCleanupFailures: 1 });
    sync(record({ ok: false, full: true, error: { code: 'KPROXY_ERR_NFT_TRANSACTION', message: 'x' } }), EMPTY_CHECKOUT, { nftablesCleanupFailures: 1 });
    sync(record({ full: true }));
    const { text } = await scrape();
    expect(text).toContain('kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total{ip_family="IPv4"} 2\n');
    expect(text).toContain('kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family="IPv4"} 1\n');
  });

  it('observes every sync in the sync duration histogram and each in its full or partial one, with kube-proxy buckets', async () => {
    const { sync, scrape } = setup();
    sync(record({ full: true, durationMs: 4 }));
    sync(record({ full: false, durationMs: 250 }));
    const { families } = await scrape();
    // 4 ms falls in le=0.004 (index 2), 250 ms in le=0.256 (index 8).
    expect(block(families, 'kubeproxy_sync_proxy_rules_duration_seconds')).toBe(
      histogram('kubeproxy_sync_proxy_rules_duration_seconds', '[ALPHA] SyncProxyRules latency in seconds', SYNC_LE, cumulative(16, [2, 8]), '0.254'),
    );
    expect(block(families, 'kubeproxy_sync_full_proxy_rules_duration_seconds')).toBe(
      histogram('kubeproxy_sync_full_proxy_rules_duration_seconds', '[ALPHA] SyncProxyRules latency in seconds for full resyncs', SYNC_LE, cumulative(16, [2]), '0.004'),
    );
    expect(block(families, 'kubeproxy_sync_partial_proxy_rules_duration_seconds')).toBe(
      histogram('kubeproxy_sync_partial_proxy_rules_duration_seconds', '[ALPHA] SyncProxyRules latency in seconds for partial resyncs', SYNC_LE, cumulative(16, [8]), '0.25'),
    );
  });

  it('observes network programming latency of successful syncs only, with kube-proxy buckets from le="0"', async () => {
    const { sync, scrape } = setup();
    sync(record({ ok: false, error: { code: 'KPROXY_ERR_SYNC_FAILED', message: 'x' }, networkProgrammingMs: [] }));
    sync(record({ networkProgrammingMs: [250, 1500, 400_000] }));
    const { families } = await scrape();
    // 0.25 s -> le=0.25 (index 1); 1.5 s -> le=2 (index 4); 400 s -> +Inf (index 81).
    expect(block(families, 'kubeproxy_network_programming_duration_seconds')).toBe(
      histogram('kubeproxy_network_programming_duration_seconds', '[ALPHA] In Cluster Network Programming Latency in seconds', NETPROG_LE, cumulative(82, [1, 4, 81]), '401.75'),
    );
  });

  it('counts restore failures and partial restore failures as kube-proxy does', async () => {
    const { sync, scrape } = setup();
    // A partial sync whose iptables-restore failed: both counters.
    sync(record({ full: false, ok: false, error: { code: RestoreFailedError.code, message: 'line 3' } }));
    // A full sync failing before the restore (another error): neither.
    sync(record({ full: true, ok: false, error: { code: SyncFailedError.code, message: 'bug' } }));
    // A full restore failure: only the restore counter.
    sync(record({ full: true, ok: false, error: { code: RestoreFailedError.code, message: 'line 9' } }));
    const { families } = await scrape();
    expect(block(families, 'kubeproxy_sync_proxy_rules_iptables_restore_failures_total')).toBe(
      '# HELP kubeproxy_sync_proxy_rules_iptables_restore_failures_total [ALPHA] Cumulative proxy iptables restore failures\n' +
        '# TYPE kubeproxy_sync_proxy_rules_iptables_restore_failures_total counter\n' +
        'kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family="IPv4"} 2',
    );
    expect(block(families, 'kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total')).toBe(
      '# HELP kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total [ALPHA] Cumulative proxy iptables partial restore failures\n' +
        '# TYPE kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total counter\n' +
        'kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total{ip_family="IPv4"} 1',
    );
    // No success yet: no last-sync timestamp.
    expect(families.has('kubeproxy_sync_proxy_rules_last_timestamp_seconds')).toBe(false);
  });

  it('publishes rules per table: totals every sync, written rules from full syncs or the backend report', async () => {
    const { sync, scrape } = setup();
    sync(record({ full: true, rulesByTable: { filter: 7, nat: 120 } }));
    sync(record({ full: false, rulesByTable: { filter: 7, nat: 126 } }), EMPTY_CHECKOUT, { rulesWrittenByTable: { filter: 7, nat: 12 } });
    const { families } = await scrape();
    expect(block(families, 'kubeproxy_sync_proxy_rules_iptables_total')).toBe(
      '# HELP kubeproxy_sync_proxy_rules_iptables_total [ALPHA] Total number of iptables rules owned by kube-proxy\n' +
        '# TYPE kubeproxy_sync_proxy_rules_iptables_total gauge\n' +
        'kubeproxy_sync_proxy_rules_iptables_total{ip_family="IPv4",table="filter"} 7\n' +
        'kubeproxy_sync_proxy_rules_iptables_total{ip_family="IPv4",table="nat"} 126',
    );
    expect(block(families, 'kubeproxy_sync_proxy_rules_iptables_last')).toBe(
      '# HELP kubeproxy_sync_proxy_rules_iptables_last [ALPHA] Number of iptables rules written by kube-proxy in last sync\n' +
        '# TYPE kubeproxy_sync_proxy_rules_iptables_last gauge\n' +
        'kubeproxy_sync_proxy_rules_iptables_last{ip_family="IPv4",table="filter"} 7\n' +
        'kubeproxy_sync_proxy_rules_iptables_last{ip_family="IPv4",table="nat"} 12',
    );
  });

  it('stamps the last queued time when changes are queued after the sources listed, and the last sync time on success', async () => {
    const state = fakeState();
    state.ready = false;
    const { sync, scrape, metrics } = setup('iptables', state);
    metrics.observer.onQueued!(T0 - 5_000, 'IPv4');
    expect((await scrape()).families.has('kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds')).toBe(false);
    metrics.observer.onStart!(T0, 'IPv4');
    state.ready = true;
    metrics.observer.onQueued!(T0 + 1_500, 'IPv4');
    sync(record({ startedAt: T0 + 2_000, durationMs: 250 }));
    const { families } = await scrape();
    expect(block(families, 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds')).toBe(
      '# HELP kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds [ALPHA] The last time a sync of proxy rules was queued\n' +
        '# TYPE kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds gauge\n' +
        `kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"} ${(T0 + 1_500) / 1000}`,
    );
    expect(block(families, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds')).toBe(
      '# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds [ALPHA] The last time proxy rules were successfully synced\n' +
        '# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge\n' +
        `kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} ${(T0 + 2_250) / 1000}`,
    );
  });

  it('reads pending and total changes from the state at scrape time', async () => {
    const state = fakeState();
    const { scrape } = setup('iptables', state);
    Object.assign(state, { servicesPending: 2, endpointsPending: 5, serviceChangesTotal: 40, endpointChangesTotal: 410 });
    const { families } = await scrape();
    expect(block(families, 'kubeproxy_sync_proxy_rules_endpoint_changes_pending')).toBe(
      '# HELP kubeproxy_sync_proxy_rules_endpoint_changes_pending [ALPHA] Pending proxy rules Endpoint changes\n' +
        '# TYPE kubeproxy_sync_proxy_rules_endpoint_changes_pending gauge\n' +
        'kubeproxy_sync_proxy_rules_endpoint_changes_pending 5',
    );
    expect(block(families, 'kubeproxy_sync_proxy_rules_endpoint_changes_total')).toBe(
      '# HELP kubeproxy_sync_proxy_rules_endpoint_changes_total [ALPHA] Cumulative proxy rules Endpoint changes\n' +
        '# TYPE kubeproxy_sync_proxy_rules_endpoint_changes_total counter\n' +
        'kubeproxy_sync_proxy_rules_endpoint_changes_total 410',
    );
    expect(block(families, 'kubeproxy_sync_proxy_rules_service_changes_pending')).toContain('kubeproxy_sync_proxy_rules_service_changes_pending 2');
    expect(block(families, 'kubeproxy_sync_proxy_rules_service_changes_total')).toBe(
      '# HELP kubeproxy_sync_proxy_rules_service_changes_total [ALPHA] Cumulative proxy rules Service changes\n' +
        '# TYPE kubeproxy_sync_proxy_rules_service_changes_total counter\n' +
        'kubeproxy_sync_proxy_rules_service_changes_total 40',
    );
    state.serviceChangesTotal = 41;
    expect((await scrape()).text).toContain('kubeproxy_sync_proxy_rules_service_changes_total 41\n');
  });

  it('computes the no-local-endpoints gauges from the synced state, by traffic policy', async () => {
    const state = new ProxyState({ family: 'IPv4', nodeName: 'node-a', clock: new FakeClock(T0) });
    state.onSynced('Service');
    state.onSynced('EndpointSlice');
    const remote = (svc: string) => makeSlice('shop', svc, `${svc}-1`, [ep('10.1.0.9', { nodeName: 'node-b' })]);
    // internalTrafficPolicy Local, endpoints only elsewhere: counts as "internal".
    state.onService(null, makeService('shop', 'itp', { clusterIP: '10.96.0.11', internalTrafficPolicy: 'Local' }));
    state.onEndpointSlice(null, remote('itp'));
    // externalTrafficPolicy Local LoadBalancer, endpoints only elsewhere: "external".
    state.onService(
      null,
      makeService('shop', 'etp', {
        type: 'LoadBalancer',
        clusterIP: '10.96.0.12',
        externalTrafficPolicy: 'Local',
        healthCheckNodePort: 32000,
        ports: [{ name: 'p80', port: 80, protocol: 'TCP', nodePort: 30080 }],
      }),
    );
    state.onEndpointSlice(null, remote('etp'));
    // Local policy but no endpoints anywhere: rejected, not counted.
    state.onService(null, makeService('shop', 'none', { clusterIP: '10.96.0.13', internalTrafficPolicy: 'Local' }));
    // Local policy with a local endpoint: fine.
    state.onService(null, makeService('shop', 'here', { clusterIP: '10.96.0.14', internalTrafficPolicy: 'Local' }));
    state.onEndpointSlice(null, makeSlice('shop', 'here', 'here-1', [ep('10.1.0.1', { nodeName: 'node-a' })]));
    const { sync, scrape } = setup('iptables', state);
    const checkout = state.checkout();
    sync(record(), checkout);
    expect(block((await scrape()).families, 'kubeproxy_sync_proxy_rules_no_local_endpoints_total')).toBe(
      '# HELP kubeproxy_sync_proxy_rules_no_local_endpoints_total [ALPHA] Number of services with a Local traffic policy and no endpoints\n' +
        '# TYPE kubeproxy_sync_proxy_rules_no_local_endpoints_total gauge\n' +
        'kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="internal"} 1\n' +
        'kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="external"} 1',
    );
    // A local endpoint appears for the ETP service: the next successful sync clears it.
    state.onEndpointSlice(remote('etp'), makeSlice('shop', 'etp', 'etp-1', [ep('10.1.0.2', { nodeName: 'node-a' })]));
    sync(record(), state.checkout());
    expect((await scrape()).text).toContain('kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="external"} 0\n');
  });

  it('counts /healthz and /livez answers by code, and conntrack reconciler passes', async () => {
    const { metrics, scrape } = setup();
    metrics.probeServed('healthz', 200);
    metrics.probeServed('healthz', 503);
    metrics.probeServed('healthz', 200);
    metrics.conntrackReconciled(0.02, 3, 'IPv4');
    metrics.conntrackReconciled(0.001, 0, 'IPv4');
    const { families } = await scrape();
    expect(block(families, 'kubeproxy_proxy_healthz_total')).toBe(
      '# HELP kubeproxy_proxy_healthz_total [ALPHA] Cumulative proxy healthz HTTP status\n' +
        '# TYPE kubeproxy_proxy_healthz_total counter\n' +
        'kubeproxy_proxy_healthz_total{code="200"} 2\n' +
        'kubeproxy_proxy_healthz_total{code="503"} 1',
    );
    expect(families.has('kubeproxy_proxy_livez_total')).toBe(false);
    expect(block(families, 'kubeproxy_conntrack_reconciler_deleted_entries_total')).toBe(
      '# HELP kubeproxy_conntrack_reconciler_deleted_entries_total [ALPHA] Cumulative conntrack flows deleted by conntrack reconciler\n' +
        '# TYPE kubeproxy_conntrack_reconciler_deleted_entries_total counter\n' +
        'kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv4"} 3',
    );
    expect(block(families, 'kubeproxy_conntrack_reconciler_sync_duration_seconds')).toBe(
      histogram('kubeproxy_conntrack_reconciler_sync_duration_seconds', '[ALPHA] ReconcileConntrackFlowsLatency latency in seconds', SYNC_LE, cumulative(16, [0, 5]), '0.021'),
    );
  });

  it('publishes the nfacct packet counters only once the iptables backend provides them', async () => {
    const { metrics, scrape } = setup();
    expect((await scrape()).families.has('kubeproxy_iptables_ct_state_invalid_dropped_packets_total')).toBe(false);
    metrics.enablePacketCounters(async () => ({ ctStateInvalidDropped: 17, localhostNodePortsAccepted: 2 }));
    const { families } = await scrape();
    expect(block(families, 'kubeproxy_iptables_ct_state_invalid_dropped_packets_total')).toBe(
      '# HELP kubeproxy_iptables_ct_state_invalid_dropped_packets_total [ALPHA] packets dropped by iptables to work around conntrack problems\n' +
        '# TYPE kubeproxy_iptables_ct_state_invalid_dropped_packets_total counter\n' +
        'kubeproxy_iptables_ct_state_invalid_dropped_packets_total 17',
    );
    expect(block(families, 'kubeproxy_iptables_localhost_nodeports_accepted_packets_total')).toContain('[ALPHA] Number of packets accepted on nodeports of loopback interface');
  });
});

describe('kproxy metrics and process defaults', () => {
  it('starts the failed syncs of kproxy_syncs_total at 0 for each family and trigger, so rate() sees the first failure', async () => {
    const state = { ...fakeState(), families: ['IPv4', 'IPv6'] as IPFamily[] };
    const { sync, scrape } = setup('iptables', state);
    const failures = (text: string) => text.split('\n').filter((l) => l.startsWith('kproxy_syncs_total{') && l.includes('result="failure"'));
    const before = failures((await scrape()).text);
    expect(before).toEqual(
      (['IPv4', 'IPv6'] as const).flatMap((f) =>
        ['startup', 'change', 'periodic', 'retry', 'resync', 'tampering', 'once', 'resume'].map((t) => `kproxy_syncs_total{ip_family="${f}",result="failure",trigger="${t}"} 0`),
      ),
    );
    // No success series until a sync succeeds; a failure counts on its own series.
    expect((await scrape()).text).not.toContain('result="success"');
    sync(record({ family: 'IPv6', trigger: 'retry', ok: false, consecutiveFailures: 2, error: { code: RestoreFailedError.code, message: 'x' } }));
    expect(failures((await scrape()).text)).toContain('kproxy_syncs_total{ip_family="IPv6",result="failure",trigger="retry"} 1');
  });

  it('counts invalid objects by kind, syncs by trigger, and the source counters', async () => {
    const state = fakeState();
    state.invalidTotal.Service = 3;
    state.invalid.set('Service shop/bad', 'spec.ports[0].port 0: ...');
    state.invalid.set('EndpointSlice shop/bad-1', '...');
    const { sync, scrape } = setup('iptables', state);
    sync(record({ trigger: 'startup' }));
    sync(record({ trigger: 'change', ok: false, consecutiveFailures: 1, error: { code: RestoreFailedError.code, message: 'x' } }));
    const { families, text } = await scrape();
    expect(block(families, 'kproxy_invalid_objects_total')).toBe(
      '# HELP kproxy_invalid_objects_total Objects refused as invalid (skipped; the last valid version stays programmed), by kind\n' +
        '# TYPE kproxy_invalid_objects_total counter\n' +
        'kproxy_invalid_objects_total{kind="Service"} 3\n' +
        'kproxy_invalid_objects_total{kind="EndpointSlice"} 0\n' +
        'kproxy_invalid_objects_total{kind="Node"} 0',
    );
    expect(text).toContain('kproxy_invalid_objects{kind="Service"} 1\n');
    expect(text).toContain('kproxy_invalid_objects{kind="EndpointSlice"} 1\n');
    expect(text).toContain('kproxy_syncs_total{ip_family="IPv4",result="success",trigger="startup"} 1\n');
    expect(text).toContain('kproxy_syncs_total{ip_family="IPv4",result="failure",trigger="change"} 1\n');
    expect(text).toContain('kproxy_sync_consecutive_failures{ip_family="IPv4"} 1\n');
    expect(text).toContain('kproxy_source_events_total{event="reloads",resource="",source="file"} 3\n');
    expect(text).toContain('kproxy_source_events_total{event="parse_errors",resource="",source="file"} 1\n');
    expect(text).toContain('kproxy_source_synced{source="file"} 1\n');
    expect(text).toMatch(/kproxy_build_info\{mode="iptables",node_version="v\d+\.\d+\.\d+",version="[^"]+"\} 1\n/);
  });

  it('publishes the service ports the last successful sync left out, per family, from 0', async () => {
    const { sync, scrape } = setup('ipvs', fakeState());
    expect((await scrape()).text).toContain('kproxy_service_ports_skipped{ip_family="IPv4"} 0\n');
    const skipped = new Map([
      ['shop/lb:p0/TCP', 'its 1 entries do not fit in ipset KUBE-LOAD-BALANCER-SOURCE-CIDR…'],
      ['shop/lb:p1/TCP', 'its 1 entries do not fit in ipset KUBE-LOAD-BALANCER-SOURCE-CIDR…'],
    ]);
    sync(record({}), EMPTY_CHECKOUT, { skippedServicePorts: skipped });
    expect((await scrape()).text).toContain('kproxy_service_ports_skipped{ip_family="IPv4"} 2\n');
    // A failed sync changed nothing in the kernel: the count stands.
    sync(record({ ok: false, consecutiveFailures: 1, error: { code: RestoreFailedError.code, message: 'x' } }), EMPTY_CHECKOUT, { skippedServicePorts: new Map() });
    expect((await scrape()).text).toContain('kproxy_service_ports_skipped{ip_family="IPv4"} 2\n');
    sync(record({}), EMPTY_CHECKOUT, { skippedServicePorts: new Map() });
    expect((await scrape()).text).toContain('kproxy_service_ports_skipped{ip_family="IPv4"} 0\n');
  });

  it('counts full syncs verified, by result, and the objects that did not hold what the sync wrote, from 0', async () => {
    const { sync, scrape } = setup('nftables', fakeState());
    expect((await scrape()).text).toContain('kproxy_sync_verify_mismatches_total{ip_family="IPv4"} 0\n');
    const mismatch = { object: 'chain endpoint-X', what: 'rules and verdicts naming it', want: 3, got: 2 };
    sync(record({ verify: { ms: 5, objects: 40, mismatches: [], mismatchCount: 0 } }));
    sync(record({ ok: false, verify: { ms: 5, objects: 40, mismatches: [mismatch, mismatch], mismatchCount: 7 }, error: { code: 'KPROXY_ERR_SYNC_VERIFY', message: 'x' } }));
    sync(record({ verify: { ms: 1, objects: 0, mismatches: [], mismatchCount: 0, skipped: 'no helper' } }));
    sync(record({ full: false }));
    const { text } = await scrape();
    expect(text).toContain('kproxy_sync_verifications_total{ip_family="IPv4",result="ok"} 1\n');
    expect(text).toContain('kproxy_sync_verifications_total{ip_family="IPv4",result="mismatch"} 1\n');
    expect(text).toContain('kproxy_sync_verifications_total{ip_family="IPv4",result="skipped"} 1\n');
    expect(text).toContain('kproxy_sync_verify_mismatches_total{ip_family="IPv4"} 7\n');
  });

  it('publishes what the dashboard refused: sign-ins by reason, work its budgets turned away, certificate pairs that did not load', async () => {
    const { metrics, scrape } = setup();
    metrics.attachDashboard(() => ({
      authFailures: { missing: 4, invalid: 2, forbidden: 1, unavailable: 0, throttled: 1 },
      refused: { messages: 120, reads: 3, connections: 0, 'slow-clients': 1 },
      tlsReloadErrors: 2,
    }));
    const { text } = await scrape();
    expect(text).toContain('kproxy_dashboard_auth_failures_total{reason="invalid"} 2\n');
    expect(text).toContain('kproxy_dashboard_auth_failures_total{reason="throttled"} 1\n');
    expect(text).toContain('kproxy_dashboard_refused_total{reason="messages"} 120\n');
    expect(text).toContain('kproxy_dashboard_refused_total{reason="reads"} 3\n');
    expect(text).toContain('kproxy_dashboard_tls_reload_errors_total 2\n');
  });

  it('sorts families by name like client_golang and includes process and Node.js defaults', async () => {
    const { scrape } = setup('iptables', fakeState(), true);
    const { families, text } = await scrape();
    const names = [...families.keys()];
    expect(names).toEqual([...names].sort());
    for (const name of [
      'process_cpu_seconds_total',
      'process_resident_memory_bytes',
      'process_start_time_seconds',
      'process_open_fds',
      'nodejs_heap_size_used_bytes',
      'nodejs_eventloop_lag_seconds',
    ]) {
      expect(families.has(name), name).toBe(true);
    }
    expect(text).not.toContain('\n\n');
  });
});

describe('source counters', () => {
  it('splits per-kind counters into a resource label and drops the totals they add up to', () => {
    expect(sourceCounters({ relists: 3, errors: 1, 'Service.relists': 1, 'EndpointSlice.relists': 2, 'Service.quietRelists': 1 })).toEqual([
      { event: 'errors', resource: '', value: 1 },
      { event: 'relists', resource: 'Service', value: 1 },
      { event: 'relists', resource: 'EndpointSlice', value: 2 },
      { event: 'quiet_relists', resource: 'Service', value: 1 },
    ]);
  });
});

function labelNames(f: Family): string {
  const sample = f.lines.find((l) => !l.startsWith('#'));
  if (!sample) return '';
  const m = /\{(.*)\}/.exec(sample);
  return m
    ? m[1]
        .split(',')
        .map((kv) => kv.split('=')[0])
        .join(',')
    : '';
}

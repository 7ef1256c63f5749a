import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../clock-fake.ts';
import { setDefaults } from '../../config/defaults.ts';
import { toProxyConfig } from '../../config/convert.ts';
import type { EventRecorder } from '../../events/event-recorder.ts';
import { SimulatedConntrack, natFlow } from '../../kernel/conntrack-simulated.ts';
import { procSysctl } from '../../kernel/sysctl.ts';
import { SimulatedSysctl } from '../../kernel/sysctl-simulated.ts';
import { MemoryLog } from '../../log.ts';
import { ProxyMetrics } from '../metrics/metrics.ts';
import { ProxyState } from '../proxy-state.ts';
import { HASHSIZE } from './sysctls.ts';
import { ConntrackSetup } from './setup.ts';
import { NO_RESULT, syncRecord, syslogService, syslogSlice, SYSLOG } from './testing.ts';

function setup(over: { sysfs?: SimulatedSysctl } = {}) {
  const clock = new FakeClock();
  const log = new MemoryLog();
  const table = new SimulatedConntrack();
  const sysctl = new SimulatedSysctl({ 'net/netfilter/nf_conntrack_count': '3', 'net/netfilter/nf_conntrack_max': '65536' });
  const events: string[] = [];
  const recorder: EventRecorder = { record: (_r, type, reason, action, note) => events.push(`${type} ${reason} ${action}: ${note}`) };
  const config = toProxyConfig(setDefaults({}));
  const ct = new ConntrackSetup({
    config,
    families: ['IPv4'],
    nodeName: 'node-a',
    dryRun: false,
    clock,
    logger: log.logger,
    events: recorder,
    runner: table,
    sysctl,
    sysfs: over.sysfs ?? new SimulatedSysctl({ [HASHSIZE]: '16384' }),
    cpuCount: 2,
    cleaner: { reconcileIntervalMs: 0 },
  });
  const state = new ProxyState({ family: 'IPv4', nodeName: 'node-a', clock });
  state.onSynced('Service');
  state.onSynced('EndpointSlice');
  const metrics = new ProxyMetrics({ mode: 'iptables', state, clock, logger: log.logger, processMetrics: false });
  return { clock, log, table, sysctl, events, ct, state, metrics };
}

const sample = (text: string, name: string) => text.split('\n').find((l) => l.startsWith(name + ' ') || l.startsWith(name + '{'));

describe('ConntrackSetup', () => {
  it('publishes the node counts and the cleaner state, and feeds kube-proxy reconciler metrics from each pass', async () => {
    const { clock, table, ct, state, metrics } = setup();
    ct.attachMetrics(metrics);
    let text = await metrics.render();
    expect(text).toContain('# TYPE kproxy_conntrack_entries gauge\nkproxy_conntrack_entries 3\n');
    expect(sample(text, 'kproxy_conntrack_max')).toBe('kproxy_conntrack_max 65536');
    expect(sample(text, 'kproxy_conntrack_cleanup_enabled')).toBe('kproxy_conntrack_cleanup_enabled 1');
    expect(sample(text, 'kproxy_conntrack_cleanup_errors_total')).toBe('kproxy_conntrack_cleanup_errors_total 0');
    expect(sample(text, 'kproxy_conntrack_count_errors_total')).toBe('kproxy_conntrack_count_errors_total 0');
    expect(text).not.toContain('kubeproxy_conntrack_reconciler_deleted_entries_total{');

    state.onService(null, syslogService());
    state.onEndpointSlice(null, syslogSlice('10.244.1.5', '10.244.2.6'));
    ct.cleaner.onSync(syncRecord(), state.checkout(), NO_RESULT);
    await clock.advanceAsync(0);
    table.add(natFlow({ client: '10.0.0.2', clientPort: 1, vip: SYSLOG.clusterIP, port: SYSLOG.port, endpoint: '10.244.1.5' }));
    table.add(natFlow({ client: '10.0.0.3', clientPort: 2, vip: SYSLOG.clusterIP, port: SYSLOG.port, endpoint: '10.244.1.5' }));
    state.onEndpointSlice(null, syslogSlice('10.244.2.6'));
    ct.cleaner.onSync(syncRecord(true, 2), state.checkout(), NO_RESULT);
    await clock.advanceAsync(0);
    text = await metrics.render();
    expect(sample(text, 'kubeproxy_conntrack_reconciler_deleted_entries_total')).toBe('kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv4"} 2');
    expect(sample(text, 'kubeproxy_conntrack_reconciler_sync_duration_seconds_count')).toBe('kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family="IPv4"} 2');
  });

  it('counts failed per-frontend listings in kproxy_conntrack_count_errors_total', async () => {
    const { table, ct, metrics } = setup();
    ct.attachMetrics(metrics);
    table.onCall = () => {
      throw new Error('conntrack v1.4.7 (conntrack-tools): Operation failed: Operation not permitted');
    };
    await expect(ct.counts.countForService('10.96.0.10', 53, 'UDP')).rejects.toThrow('Operation not permitted');
    expect(sample(await metrics.render(), 'kproxy_conntrack_count_errors_total')).toBe('kproxy_conntrack_count_errors_total 1');
  });

  it('shows unknown counts as NaN and a disabled cleaner as 0', async () => {
    const { clock, table, ct, sysctl, state, metrics } = setup();
    sysctl.values.clear();
    table.missing = true;
    ct.attachMetrics(metrics);
    ct.attachMetrics(metrics);
    state.onService(null, syslogService());
    state.onEndpointSlice(null, syslogSlice('10.244.1.5'));
    ct.cleaner.onSync(syncRecord(), state.checkout(), NO_RESULT);
    await clock.advanceAsync(0);
    const text = await metrics.render();
    // prom-client spells NaN "Nan" (Prometheus parses floats case-insensitively).
    expect(sample(text, 'kproxy_conntrack_entries')).toBe('kproxy_conntrack_entries Nan');
    expect(sample(text, 'kproxy_conntrack_cleanup_enabled')).toBe('kproxy_conntrack_cleanup_enabled 0');
  });

  it("applies the sysctls at start and records kube-proxy's Warning Event when /sys is read-only", async () => {
    const sysfs = new SimulatedSysctl({ [HASHSIZE]: '16384' }).refuse(HASHSIZE, 'EROFS');
    const { ct, sysctl, events } = setup({ sysfs });
    const r = await ct.applySysctls();
    expect(sysctl.values.get('net/netfilter/nf_conntrack_max')).toBe('131072');
    expect(r.readOnlySysFS).toBe(true);
    expect(events).toEqual([
      'Warning readOnlySysFS StartKubeProxy: CRI error: /sys is read-only: cannot modify conntrack limits, problems may arise later (If running Docker, see docker issue #24000)',
    ]);
  });

  it('a dry run changes a simulated /proc seeded from the host, never the host', async () => {
    const host = procSysctl();
    const before = await host.read('net/netfilter/nf_conntrack_max').catch(() => null);
    const log = new MemoryLog();
    const ct = new ConntrackSetup({ config: toProxyConfig(setDefaults({})), families: ['IPv4'], nodeName: 'node-a', dryRun: true, clock: new FakeClock(), logger: log.logger, cpuCount: 64 });
    const r = await ct.applySysctls();
    expect(ct.simulated).toBe(true);
    // 64 × 32768 = 2Mi, capped at 1Mi; compared with what the host holds, changed in memory only.
    const max = r.outcomes.find((o) => o.name === 'net/netfilter/nf_conntrack_max')!;
    expect(max.want).toBe(1_048_576);
    expect(max.was).toBe(before === null ? null : Number(before));
    expect(max.action).toBe(before !== null && Number(before) >= 1_048_576 ? 'kept' : 'set');
    expect(await host.read('net/netfilter/nf_conntrack_max').catch(() => null)).toBe(before);
    expect(log.records.some((x) => x.component.includes('sysctl (simulated)'))).toBe(true);
  });
});

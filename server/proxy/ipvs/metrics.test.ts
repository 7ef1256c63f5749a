import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../log.ts';
import { ProxyMetrics } from '../metrics/metrics.ts';
import { SyncLoop } from '../sync-loop.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { ipvsHarness } from './testing.ts';

/** The metrics kube-proxy publishes in IPVS mode, fed by syncs of the IPVS backend through the sync loop. */
describe('IPVS mode metrics', () => {
  async function run(breakIptables: boolean, breakIpvs: boolean) {
    const h = ipvsHarness();
    const state = stateFromObjects('node-a', [
      makeService('ns1', 'a', { clusterIP: '10.96.0.1', internalTrafficPolicy: 'Local', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }),
      makeSlice('ns1', 'a', 'a-1', [ep('10.244.1.1', { nodeName: 'node-b' })], [{ name: 'http', port: 8080, protocol: 'TCP' }]),
    ]);
    const metrics = new ProxyMetrics({ mode: 'ipvs', state, clock: h.clock, logger: silentLogger, processMetrics: false });
    const loop = new SyncLoop({ state, backend: h.backend, clock: h.clock, logger: silentLogger, minSyncPeriodMs: 0, syncPeriodMs: 30_000, observers: [metrics.observer] });
    if (breakIptables) h.iptables.restoreHook = () => 'iptables-restore: line 2 failed';
    if (breakIpvs) h.ipvs.failNext = 'Memory allocation problem';
    const rec = await loop.syncOnce();
    return { rec, text: await metrics.render() };
  }

  it('counts a failed iptables-restore in kubeproxy_sync_proxy_rules_iptables_restore_failures_total', async () => {
    const { rec, text } = await run(true, false);
    expect(rec.ok).toBe(false);
    expect(text).toContain('kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family="IPv4"} 1');
    expect(text).not.toContain('kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total');
    expect(text).not.toContain('kubeproxy_sync_full_proxy_rules_duration_seconds');
  });

  it('does not count an ipvsadm failure as an iptables-restore failure', async () => {
    const { rec, text } = await run(false, true);
    expect(rec.error?.code).toBe('KPROXY_ERR_IPVS');
    expect(text).not.toContain('kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family="IPv4"} 1');
  });

  it('publishes the last sync time and no-local-endpoints gauge after a good sync', async () => {
    const { rec, text } = await run(false, false);
    expect(rec.ok).toBe(true);
    expect(text).toMatch(/kubeproxy_sync_proxy_rules_last_timestamp_seconds\{ip_family="IPv4"\} \d+/);
    expect(text).toContain('kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="internal"} 1');
    expect(text).toContain('kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1');
  });
});

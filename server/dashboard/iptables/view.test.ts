import { describe, expect, it, vi } from 'vitest';
import type { BackendSyncResult } from '../../proxy/backend.ts';
import { KUBE_NODEPORTS, KUBE_SERVICES } from '../../proxy/xtables/chain-names.ts';
import { harness, testConfig } from '../../proxy/iptables/testing.ts';
import type { EndpointSlice, Service } from '../../proxy/kube-objects.ts';
import type { SyncRecord } from '../../proxy/sync-loop.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../../proxy/testing.ts';
import { findDrift } from '../drift.ts';
import type { KernelTables } from '../kernel-view.ts';
import { noYield } from '../yield.ts';
import { IptablesView } from './view.ts';

/**
 * The dashboard's record of what kproxy wrote must follow partial syncs that
 * edit the shared chains in place (-D CHAIN rule, -I CHAIN 1 rule) exactly as
 * the kernel does, or every added or removed service shows as drift.
 */
const tcp = [{ name: 'http', port: 8080, protocol: 'TCP' }];

function service(i: number): Service {
  const nodePort = i % 3 === 0;
  return makeService('ns', `s${i}`, {
    clusterIP: `10.96.0.${i + 1}`,
    ...(nodePort ? { type: 'NodePort' } : {}),
    ports: [{ name: 'http', port: 80, protocol: 'TCP', ...(nodePort ? { nodePort: 30000 + i } : {}) }],
  });
}

function slice(i: number): EndpointSlice {
  return makeSlice('ns', `s${i}`, `s${i}-1`, [ep(`10.244.1.${i + 1}`, { nodeName: 'node-b' }), ep(`10.244.2.${i + 1}`, { nodeName: 'node-a' })], tcp);
}

/** shape is each kproxy chain's rules in order, as text. */
function shape(t: KernelTables): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [tn, table] of t.tables) for (const [cn, c] of table.chains) if (cn.startsWith('KUBE-')) out[`${tn}/${cn}`] = c.rules.map((r) => r.spec);
  return out;
}

describe("IptablesView: the dashboard's read of the kernel", () => {
  it('asks for the counters, in the background (iptables-save at a lower CPU priority than the proxy)', async () => {
    const h = harness({ config: testConfig({ clusterCIDRs: ['10.244.0.0/16'] }), nodeName: 'node-a' });
    const save = vi.spyOn(h.kernel, 'save');
    const view = new IptablesView({ runner: h.kernel, simulated: true, pause: noYield });
    await view.read();
    expect(save).toHaveBeenCalledWith({ counters: true, background: true });
  });
});

describe('IptablesView: the record of written rules through partial syncs', () => {
  it('follows in-place edits of the shared chains: after services come and go, intended equals the kernel and there is no drift', async () => {
    const objects = Array.from({ length: 40 }, (_, i) => [service(i), slice(i)]).flat();
    const state = stateFromObjects('node-a', objects);
    const h = harness({ config: testConfig({ clusterCIDRs: ['10.244.0.0/16'] }), nodeName: 'node-a' });
    const view = new IptablesView({ runner: h.kernel, simulated: true, pause: noYield });
    let seq = 0;
    const note = (r: BackendSyncResult) => {
      expect(r.error).toBeUndefined();
      view.noteSync({ seq: ++seq, ok: true, finishedAt: seq } as SyncRecord, r);
      return r;
    };
    note(await h.backend.sync({ state: state.checkout(), forceFull: true }));

    const steps: Array<{ what: string; change: () => void }> = [
      { what: 'add s40 (node port)', change: () => (state.onService(null, service(40)), state.onEndpointSlice(null, slice(40))) },
      { what: 'add s41', change: () => (state.onService(null, service(41)), state.onEndpointSlice(null, slice(41))) },
      { what: 'remove s7', change: () => (state.onService(service(7), null), state.onEndpointSlice(slice(7), null)) },
      { what: 'remove s40 (added by a partial sync)', change: () => (state.onService(service(40), null), state.onEndpointSlice(slice(40), null)) },
      {
        what: 'remove s9 (node port) and add s42',
        change: () => (state.onService(service(9), null), state.onEndpointSlice(slice(9), null), state.onService(null, service(42)), state.onEndpointSlice(null, slice(42))),
      },
    ];
    let edits = 0;
    for (const { what, change } of steps) {
      change();
      const r = note(await h.backend.sync({ state: state.checkout(), forceFull: false }));
      expect(r.full, what).toBe(false);
      if (/^-D /m.test(r.batch!) && /^-I /m.test(r.batch!)) edits++;
      const intended = (await view.intended())!;
      const kernel = await view.read();
      expect(shape(intended), what).toEqual(shape(kernel));
      expect(await findDrift(intended, kernel, view, noYield), what).toEqual([]);
    }
    // The fix is exercised: deletions and insertions by rule, in KUBE-SERVICES and KUBE-NODEPORTS.
    expect(edits).toBeGreaterThanOrEqual(1);
    const services = (await view.intended())!.tables.get('nat')!.chains.get(KUBE_SERVICES)!.rules;
    expect(services[0].spec).toContain('ns/s42:http cluster IP');
    expect(services.at(-1)!.target).toBe(KUBE_NODEPORTS);
    expect(services.some((r) => r.spec.includes('ns/s7:http'))).toBe(false);
  });
});

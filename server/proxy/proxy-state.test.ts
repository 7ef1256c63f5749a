import { describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import { ProxyState } from './proxy-state.ts';
import { ep, makeService, makeSlice } from './testing.ts';

function setup() {
  const clock = new FakeClock();
  const events = { changes: 0, invalid: [] as string[] };
  const state = new ProxyState({
    family: 'IPv4',
    nodeName: 'node-a',
    clock,
    hooks: { onInvalid: (_k, ref, err) => events.invalid.push(`${ref}: ${err.message}`) },
  });
  state.addChangeListener(() => events.changes++);
  return { state, events, clock };
}

describe('ProxyState', () => {
  it('is ready only once Services and EndpointSlices have both listed', async () => {
    const { state } = setup();
    let ready = false;
    void state.whenReady().then(() => (ready = true));
    state.onSynced('Service');
    await Promise.resolve();
    expect(ready).toBe(false);
    state.onSynced('Node');
    state.onSynced('EndpointSlice');
    await Promise.resolve();
    expect(ready).toBe(true);
  });

  it('says when given lists have all arrived (--once waits for the Node as well)', async () => {
    const { state } = setup();
    let listed = false;
    void state.whenListed(['Service', 'EndpointSlice', 'Node']).then(() => (listed = true));
    state.onSynced('Service');
    state.onSynced('EndpointSlice');
    await Promise.resolve();
    expect(state.ready).toBe(true);
    expect(listed).toBe(false);
    state.onSynced('Node');
    await Promise.resolve();
    expect(listed).toBe(true);
    expect(state.listed(['Node'])).toBe(true);
  });

  it('reports services changed by service or endpoint events since the last checkout', () => {
    const { state, events } = setup();
    state.onService(null, makeService('ns', 'a'));
    state.onService(null, makeService('ns', 'b', { clusterIP: '10.96.0.2' }));
    state.onEndpointSlice(null, makeSlice('ns', 'a', 'a-1', [ep('10.0.0.1')]));
    expect(events.changes).toBe(3);
    let c = state.checkout();
    expect([...c.changedServices].sort()).toEqual(['ns/a', 'ns/b']);
    expect([...c.services.keys()].sort()).toEqual(['ns/a:p80/TCP', 'ns/b:p80/TCP']);
    expect(c.endpoints.get('ns/a:p80/TCP')!.map((e) => e.key)).toEqual(['10.0.0.1:80']);
    state.onEndpointSlice(null, makeSlice('ns', 'b', 'b-1', [ep('10.0.0.2')]));
    c = state.checkout();
    expect([...c.changedServices]).toEqual(['ns/b']);
    expect(c.services.size).toBe(2);
  });

  it('coalesces add+delete before a sync into nothing', () => {
    const { state } = setup();
    const svc = makeService('ns', 'a');
    state.onService(null, svc);
    state.onService(svc, null);
    const c = state.checkout();
    expect(c.changedServices.size).toBe(0);
    expect(c.services.size).toBe(0);
  });

  it('keeps the last valid version of a service when an update is invalid, and says so', () => {
    const { state, events } = setup();
    const good = makeService('ns', 'a');
    state.onService(null, good);
    state.checkout();
    state.onService(good, makeService('ns', 'a', { ports: [{ name: 'p80', port: 70000 }] }));
    expect(events.invalid).toEqual(['Service ns/a: Service ns/a: spec.ports[0].port 70000: must be a port from 1 to 65535']);
    expect(state.invalidTotal.Service).toBe(1);
    expect(state.invalid.get('Service ns/a')).toMatch(/70000/);
    const c = state.checkout();
    expect(c.changedServices.size).toBe(0);
    expect(c.services.get('ns/a:p80/TCP')!.port).toBe(80);
    // A later valid version clears the finding.
    state.onService(null, makeService('ns', 'a', { ports: [{ name: 'p80', port: 81 }] }));
    expect(state.invalid.size).toBe(0);
    expect(state.checkout().services.get('ns/a:p80/TCP')!.port).toBe(81);
  });

  it('one invalid service never blocks the others', () => {
    const { state } = setup();
    state.onService(null, makeService('ns', 'bad', { clusterIP: 'x' }));
    state.onService(null, makeService('ns', 'good'));
    expect([...state.checkout().services.keys()]).toEqual(['ns/good:p80/TCP']);
  });

  it('reports deleted UDP cluster IPs', () => {
    const { state } = setup();
    const dns = makeService('kube-system', 'dns', { clusterIP: '10.96.0.10', ports: [{ name: 'dns', port: 53, protocol: 'UDP' }] });
    state.onService(null, dns);
    state.checkout();
    state.onService(dns, null);
    expect([...state.checkout().deletedUDPClusterIPs]).toEqual(['10.96.0.10']);
  });

  it('tracks its own Node and flags topology changes', () => {
    const { state, events } = setup();
    state.onNode(null, { metadata: { name: 'node-b', labels: { 'topology.kubernetes.io/zone': 'z2' } } });
    expect(state.node.known).toBe(false);
    state.onNode(null, {
      metadata: { name: 'node-a', labels: { 'topology.kubernetes.io/zone': 'z1' } },
      spec: { podCIDRs: ['10.244.0.0/24'], taints: [{ key: 'ToBeDeletedByClusterAutoscaler', effect: 'NoSchedule' }] },
    });
    expect(state.node).toMatchObject({ known: true, zone: 'z1', podCIDRs: ['10.244.0.0/24'], toBeDeleted: true, deleting: false });
    expect(events.changes).toBe(1);
    expect(state.checkout().topologyChanged).toBe(true);
    expect(state.checkout().topologyChanged).toBe(false);
  });
});

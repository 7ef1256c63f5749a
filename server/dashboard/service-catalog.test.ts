import { describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import { ProxyState } from '../proxy/proxy-state.ts';
import { ep, makeService, makeSlice } from '../proxy/testing.ts';
import { REFRESH_PER_TURN, ServiceCatalog, type ServiceModel } from './service-catalog.ts';

function model(state: ProxyState, skipped = new Map<string, string>()): ServiceModel {
  return { services: state.services, endpoints: state.endpoints, nodeName: 'node-a', zone: '', invalid: state.invalid, skipped: (id) => skipped.get(id) };
}

function setup() {
  const state = new ProxyState({ family: 'IPv4', nodeName: 'node-a', clock: new FakeClock() });
  state.onService(
    null,
    makeService('shop', 'web', {
      clusterIP: '10.96.0.10',
      ports: [
        { name: 'https', port: 443, protocol: 'TCP' },
        { name: 'http', port: 80, protocol: 'TCP' },
      ],
    }),
  );
  state.onEndpointSlice(
    null,
    makeSlice(
      'shop',
      'web',
      'web-1',
      [ep('10.244.0.1', { nodeName: 'node-a' }), ep('10.244.1.1', { nodeName: 'node-b', ready: false, serving: true, terminating: true })],
      [
        { name: 'https', port: 8443, protocol: 'TCP' },
        { name: 'http', port: 8080, protocol: 'TCP' },
      ],
    ),
  );
  state.onService(null, makeService('shop', 'empty', { clusterIP: '10.96.0.11' }));
  state.onService(
    null,
    makeService(
      'shop',
      'lb',
      { type: 'LoadBalancer', clusterIP: '10.96.0.12', externalTrafficPolicy: 'Local', ports: [{ name: 'p80', port: 80, protocol: 'TCP', nodePort: 30080 }] },
      { status: { loadBalancer: { ingress: [{ ip: '192.0.2.1' }] } } },
    ),
  );
  state.onEndpointSlice(null, makeSlice('shop', 'lb', 'lb-1', [ep('10.244.1.5', { nodeName: 'node-b' })]));
  state.onSynced('Service');
  state.onSynced('EndpointSlice');
  state.checkout();
  return state;
}

describe('ServiceCatalog', () => {
  it('summarises each Service over its ports: endpoints by state, IPs, warnings', () => {
    const state = setup();
    const c = new ServiceCatalog();
    c.refresh(model(state), 'all');
    expect(c.list().map((s) => s.key)).toEqual(['shop/empty', 'shop/lb', 'shop/web']);
    expect(c.summary('shop/web')).toEqual({
      key: 'shop/web',
      namespace: 'shop',
      name: 'web',
      type: 'ClusterIP',
      clusterIP: '10.96.0.10',
      clusterIPs: ['10.96.0.10'],
      families: ['IPv4'],
      ports: ['80/TCP', '443/TCP'],
      ips: [],
      endpoints: { total: 2, ready: 1, serving: 2, terminating: 1, local: 1 },
      warnings: [],
    });
    expect(c.summary('shop/empty')!.warnings).toEqual(['no-endpoints']);
    expect(c.summary('shop/lb')).toMatchObject({ ports: ['80/TCP:30080'], ips: ['192.0.2.1'], warnings: ['no-local-endpoints'] });
    expect(c.warningCounts()).toEqual({ noEndpoints: 1, noLocalEndpoints: 1 });
  });

  it('recomputes only the services a sync changed, and reports removed ones', () => {
    const state = setup();
    const c = new ServiceCatalog();
    c.refresh(model(state), 'all');
    const before = c.list();
    const web = c.summary('shop/web');
    state.onEndpointSlice(null, makeSlice('shop', 'lb', 'lb-1', [ep('10.244.0.5', { nodeName: 'node-a' })]));
    state.onService(makeService('shop', 'empty'), null);
    const checkout = state.checkout();
    const r = c.refresh(model(state), checkout.changedServices);
    expect(r.upserts.map((s) => s.key)).toEqual(['shop/lb']);
    expect(r.upserts[0].warnings).toEqual([]);
    expect(r.removed).toEqual(['shop/empty']);
    expect(c.summary('shop/web')).toBe(web);
    expect(c.list().map((s) => s.key)).toEqual(['shop/lb', 'shop/web']);
    expect(c.list()).not.toBe(before);
  });

  it('keeps the sorted list current in place when only summaries change', () => {
    const state = setup();
    const c = new ServiceCatalog();
    c.refresh(model(state), 'all');
    const list = c.list();
    state.onEndpointSlice(null, makeSlice('shop', 'lb', 'lb-1', []));
    c.refresh(model(state), state.checkout().changedServices);
    expect(c.list()).toBe(list);
    expect(c.list()[1].warnings).toEqual(['no-endpoints']);
  });

  it('refreshes every service in turns (refreshAll), to the same list, each summary whole between two turns', async () => {
    const state = new ProxyState({ family: 'IPv4', nodeName: 'node-a', clock: new FakeClock() });
    const count = REFRESH_PER_TURN * 2 + 7;
    for (let i = 0; i < count; i++) {
      const name = `svc-${String(i).padStart(4, '0')}`;
      state.onService(null, makeService('bulk', name, { clusterIP: `10.97.${i >> 8}.${i & 255}`, ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }));
      state.onEndpointSlice(null, makeSlice('bulk', name, `${name}-1`, [ep(`10.244.${i >> 8}.${i & 255}`, { nodeName: 'node-b' })], [{ name: 'http', port: 8080, protocol: 'TCP' }]));
    }
    state.onSynced('Service');
    state.onSynced('EndpointSlice');
    state.checkout();
    const inTurns = new ServiceCatalog();
    const seen: number[] = [];
    const r = await inTurns.refreshAll(model(state), async () => {
      seen.push(inTurns.size);
      for (const s of inTurns.list()) expect(s.endpoints.ready).toBe(1);
    });
    // A pause after every REFRESH_PER_TURN services, the list growing by that many each time.
    expect(seen).toEqual([REFRESH_PER_TURN, REFRESH_PER_TURN * 2]);
    expect(r.upserts).toHaveLength(count);
    const atOnce = new ServiceCatalog();
    atOnce.refresh(model(state), 'all');
    expect(inTurns.list()).toEqual(atOnce.list());
  });

  it('marks refused and unprogrammed services', () => {
    const state = setup();
    state.onService(null, makeService('shop', 'web', { clusterIP: 'not-an-ip' }));
    const c = new ServiceCatalog();
    c.refresh(model(state, new Map([['shop/lb:p80/TCP', 'bad']])), 'all');
    expect(c.summary('shop/web')!.warnings).toEqual(['invalid']);
    expect(c.summary('shop/lb')!.warnings).toContain('not-programmed');
  });
});

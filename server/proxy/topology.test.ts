import { describe, expect, it } from 'vitest';
import { EndpointsChangeTracker } from './endpoints-change-tracker.ts';
import type { SliceEndpoint } from './kube-objects.ts';
import { servicePortsFromService, type ServicePort } from './service-port.ts';
import { makeService, makeSlice, ep } from './testing.ts';
import { categorizeEndpoints } from './topology.ts';

function port(spec: Parameters<typeof makeService>[2] = {}): ServicePort {
  const r = servicePortsFromService(makeService('ns', 's', spec), 'IPv4');
  if (r.kind !== 'ports') throw new Error('ignored');
  return r.ports[0];
}

function endpoints(list: SliceEndpoint[]) {
  const t = new EndpointsChangeTracker('IPv4', 'node-a', 0);
  t.update('ns/s-1', makeSlice('ns', 's', 's-1', list));
  t.checkout();
  return t.endpoints.get('ns/s:p80/TCP')!;
}

const keys = (l: readonly { key: string }[]) => l.map((e) => e.key);

describe('categorizeEndpoints', () => {
  it('uses ready endpoints for Cluster policy', () => {
    const eps = endpoints([ep('10.0.0.1'), ep('10.0.0.2', { ready: false, serving: false }), ep('10.0.0.3', { ready: false, serving: true, terminating: true })]);
    const c = categorizeEndpoints(eps, port(), 'node-a', 'z1');
    expect(keys(c.cluster)).toEqual(['10.0.0.1:80']);
    expect(keys(c.allReachable)).toEqual(['10.0.0.1:80']);
    expect(c.local).toEqual([]);
    expect(c.hasAny).toBe(true);
  });

  it('falls back to serving terminating endpoints when none is ready', () => {
    const eps = endpoints([ep('10.0.0.2', { ready: false, serving: false, terminating: true }), ep('10.0.0.3', { ready: false, serving: true, terminating: true })]);
    const c = categorizeEndpoints(eps, port(), 'node-a', 'z1');
    expect(keys(c.cluster)).toEqual(['10.0.0.3:80']);
    expect(c.hasAny).toBe(true);
  });

  it('has nothing when no endpoint is ready or serving', () => {
    const c = categorizeEndpoints(endpoints([ep('10.0.0.2', { ready: false, serving: false })]), port(), 'node-a', 'z1');
    expect(c.cluster).toEqual([]);
    expect(c.hasAny).toBe(false);
  });

  it('internalTrafficPolicy Local uses only local endpoints, with their own terminating fallback', () => {
    const sp = port({ internalTrafficPolicy: 'Local' });
    const eps = endpoints([ep('10.0.0.1', { nodeName: 'node-b' }), ep('10.0.0.2', { nodeName: 'node-a', ready: false, serving: true, terminating: true })]);
    const c = categorizeEndpoints(eps, sp, 'node-a', 'z1');
    expect(c.cluster).toEqual([]);
    expect(keys(c.local)).toEqual(['10.0.0.2:80']);
    expect(keys(c.allReachable)).toEqual(['10.0.0.2:80']);
    expect(c.hasAny).toBe(true);
  });

  it('externalTrafficPolicy Local keeps cluster endpoints for internal traffic and merges when local ones are terminating', () => {
    const sp = port({ type: 'NodePort', externalTrafficPolicy: 'Local', ports: [{ name: 'p80', port: 80, nodePort: 30080 }] });
    const eps = endpoints([ep('10.0.0.1', { nodeName: 'node-b' }), ep('10.0.0.2', { nodeName: 'node-a', ready: false, serving: true, terminating: true })]);
    const c = categorizeEndpoints(eps, sp, 'node-a', 'z1');
    expect(keys(c.cluster)).toEqual(['10.0.0.1:80']);
    expect(keys(c.local)).toEqual(['10.0.0.2:80']);
    expect(keys(c.allReachable)).toEqual(['10.0.0.1:80', '10.0.0.2:80']);
  });

  it('applies zone hints only when every ready endpoint has one and one names this zone', () => {
    const hinted = [ep('10.0.0.1', { zone: 'z1', hints: { forZones: [{ name: 'z1' }] } }), ep('10.0.0.2', { zone: 'z2', hints: { forZones: [{ name: 'z2' }] } })];
    const c = categorizeEndpoints(endpoints(hinted), port(), 'node-a', 'z1');
    expect(c.topologyMode).toBe('PreferSameZone');
    expect(keys(c.cluster)).toEqual(['10.0.0.1:80']);
    // One ready endpoint without a hint: hints are ignored.
    const partial = categorizeEndpoints(endpoints([...hinted, ep('10.0.0.3')]), port(), 'node-a', 'z1');
    expect(partial.topologyMode).toBe('');
    expect(partial.cluster).toHaveLength(3);
    // No hint for this zone: hints are ignored.
    expect(categorizeEndpoints(endpoints(hinted), port(), 'node-a', 'z9').cluster).toHaveLength(2);
  });

  it('prefers the same node when every ready endpoint has a node hint', () => {
    const eps = endpoints([
      ep('10.0.0.1', { nodeName: 'node-a', hints: { forNodes: [{ name: 'node-a' }], forZones: [{ name: 'z1' }] } }),
      ep('10.0.0.2', { nodeName: 'node-b', hints: { forNodes: [{ name: 'node-b' }], forZones: [{ name: 'z1' }] } }),
    ]);
    const c = categorizeEndpoints(eps, port(), 'node-a', 'z1');
    expect(c.topologyMode).toBe('PreferSameNode');
    expect(keys(c.cluster)).toEqual(['10.0.0.1:80']);
  });
});

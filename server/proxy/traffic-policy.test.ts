import { describe, expect, it } from 'vitest';
import { EndpointsChangeTracker } from './endpoints-change-tracker.ts';
import type { SliceEndpoint } from './kube-objects.ts';
import { servicePortsFromService, type ServicePort } from './service-port.ts';
import { ep, makeService, makeSlice } from './testing.ts';
import { categorizeEndpoints } from './topology.ts';
import { trafficPolicyChains } from './traffic-policy.ts';

function port(spec: Parameters<typeof makeService>[2] = {}): ServicePort {
  const r = servicePortsFromService(makeService('ns', 's', spec), 'IPv4');
  if (r.kind !== 'ports') throw new Error('ignored');
  return r.ports[0];
}

/** chosen categorizes the endpoints on node-a and chooses between the chains "SVC" and "SVL". */
function chosen(sp: ServicePort, list: SliceEndpoint[]) {
  const t = new EndpointsChangeTracker('IPv4', 'node-a', 0);
  t.update('ns/s-1', makeSlice('ns', 's', 's-1', list));
  t.checkout();
  return trafficPolicyChains(sp, categorizeEndpoints(t.endpoints.get(sp.id), sp, 'node-a', ''), { cluster: 'SVC', local: 'SVL' });
}

const nodePort = { type: 'NodePort' as const, ports: [{ name: 'p80', port: 80, nodePort: 30080 }] };

describe('trafficPolicyChains', () => {
  it('sends everything to the Cluster chain under Cluster policies', () => {
    expect(chosen(port(nodePort), [ep('10.0.0.1', { nodeName: 'node-b' })])).toEqual({
      usesClusterPolicyChain: true,
      usesLocalPolicyChain: false,
      internalPolicyChain: 'SVC',
      hasInternalEndpoints: true,
      externalPolicyChain: 'SVC',
      hasExternalEndpoints: true,
    });
  });

  it('sends external traffic to the Local chain under externalTrafficPolicy Local, and has none for it without a local endpoint', () => {
    const sp = port({ ...nodePort, externalTrafficPolicy: 'Local' });
    expect(chosen(sp, [ep('10.0.0.1', { nodeName: 'node-a' }), ep('10.0.0.2', { nodeName: 'node-b' })])).toMatchObject({
      usesClusterPolicyChain: true,
      usesLocalPolicyChain: true,
      internalPolicyChain: 'SVC',
      externalPolicyChain: 'SVL',
      hasExternalEndpoints: true,
    });
    expect(chosen(sp, [ep('10.0.0.2', { nodeName: 'node-b' })])).toMatchObject({ usesLocalPolicyChain: false, externalPolicyChain: 'SVL', hasInternalEndpoints: true, hasExternalEndpoints: false });
  });

  it('sends internal traffic to the Local chain under internalTrafficPolicy Local, and has none for it without a local endpoint', () => {
    const sp = port({ internalTrafficPolicy: 'Local' });
    expect(chosen(sp, [ep('10.0.0.1', { nodeName: 'node-a' })])).toMatchObject({ usesClusterPolicyChain: false, usesLocalPolicyChain: true, internalPolicyChain: 'SVL', hasInternalEndpoints: true });
    expect(chosen(sp, [ep('10.0.0.2', { nodeName: 'node-b' })])).toMatchObject({ usesLocalPolicyChain: false, internalPolicyChain: 'SVL', hasInternalEndpoints: false });
  });

  it('has no endpoints for any traffic, and writes neither chain, when no endpoint is usable anywhere', () => {
    expect(chosen(port(nodePort), [ep('10.0.0.1', { ready: false, serving: false })])).toMatchObject({
      usesClusterPolicyChain: false,
      usesLocalPolicyChain: false,
      hasInternalEndpoints: false,
      hasExternalEndpoints: false,
    });
  });
});

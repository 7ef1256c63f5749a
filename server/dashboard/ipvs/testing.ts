import type { ProxyConfig } from '../../config/types.ts';
import { ipvsHarness, type IpvsHarness } from '../../proxy/ipvs/testing.ts';
import type { ProxyState } from '../../proxy/proxy-state.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../../proxy/testing.ts';
import { noYield } from '../yield.ts';
import { IpvsView } from './view.ts';

/**
 * A small IPVS cluster for the view's tests, node-a's view of it:
 *
 *   ns1/web    LoadBalancer 10.96.0.1:80/TCP, node port 30080, LB IP 192.0.2.10 (source range 203.0.113.0/24),
 *              endpoints 10.244.0.1 (node-a) and 10.244.1.1, 10.244.1.2 (node-b)
 *   ns1/dns    ClusterIP 10.96.0.10:53/UDP, no endpoints
 *   ns1/ext    ClusterIP 10.96.0.20:8080/TCP, external IP 198.51.100.7, externalTrafficPolicy Local,
 *              one endpoint on node-b (so the Local policy falls back to it)
 */
export function ipvsCluster(): { state: ProxyState; webEndpoints(ips: string[]): void } {
  const tcp = (port: number) => [{ name: 'http', port, protocol: 'TCP' }];
  const webSlice = (ips: string[]) =>
    makeSlice(
      'ns1',
      'web',
      'web-1',
      ips.map((ip) => ep(ip, { nodeName: ip.startsWith('10.244.0.') ? 'node-a' : 'node-b' })),
      tcp(8080),
    );
  let web = ['10.244.0.1', '10.244.1.1', '10.244.1.2'];
  const state = stateFromObjects('node-a', [
    makeService(
      'ns1',
      'web',
      { type: 'LoadBalancer', clusterIP: '10.96.0.1', ports: [{ name: 'http', port: 80, protocol: 'TCP', nodePort: 30080 }], loadBalancerSourceRanges: ['203.0.113.0/24'] },
      { status: { loadBalancer: { ingress: [{ ip: '192.0.2.10' }] } } },
    ),
    webSlice(web),
    makeService('ns1', 'dns', { clusterIP: '10.96.0.10', ports: [{ name: 'dns', port: 53, protocol: 'UDP' }] }),
    makeService('ns1', 'ext', { clusterIP: '10.96.0.20', externalIPs: ['198.51.100.7'], externalTrafficPolicy: 'Local', ports: tcp(8080) }),
    makeSlice('ns1', 'ext', 'ext-1', [ep('10.244.1.5', { nodeName: 'node-b' })], tcp(8080)),
  ]);
  return {
    state,
    webEndpoints(ips) {
      state.onEndpointSlice(webSlice(web), webSlice(ips));
      web = ips;
    },
  };
}

export interface IpvsViewHarness extends IpvsHarness {
  view: IpvsView;
}

/** ipvsViewHarness is an IPVS backend over the simulated kernel with the dashboard's view of it. */
export function ipvsViewHarness(config?: ProxyConfig): IpvsViewHarness {
  const h = ipvsHarness(config ? { config } : {});
  const view = new IpvsView({ backend: h.backend, simulated: true, clock: h.clock, pause: noYield });
  return { ...h, view };
}

import type { ServicePort } from '../proxy/service-port.ts';
import type { ServiceNames } from './mode.ts';

/**
 * serviceNames indexes kproxy's model of the Services (the daemon's, or
 * --dry-run's) by address: which service port a cluster, external or load
 * balancer IP and port, or a node port, belongs to. IPVS objects carry no
 * names; with this the tracer still answers in Service terms.
 */
export function serviceNames(ports: Iterable<ServicePort>): ServiceNames {
  const byAddress = new Map<string, { name: string; kind: string }>();
  const byNodePort = new Map<string, string>();
  const byIP = new Map<string, { name: string; ports: Set<string> }>();
  for (const sp of ports) {
    const proto = sp.protocol.toLowerCase();
    const add = (ip: string, kind: string) => {
      byAddress.set(`${proto} ${ip} ${sp.port}`, { name: sp.name, kind });
      let o = byIP.get(ip);
      if (!o) byIP.set(ip, (o = { name: sp.service, ports: new Set() }));
      o.ports.add(`${sp.port}/${proto}`);
    };
    add(sp.clusterIP, 'cluster IP');
    for (const ip of sp.externalIPs) add(ip, 'external IP');
    for (const ip of sp.loadBalancerVIPs) add(ip, 'load balancer IP');
    if (sp.nodePort) byNodePort.set(`${proto} ${sp.nodePort}`, sp.name);
  }
  return {
    byAddress: (proto, ip, port) => byAddress.get(`${proto} ${ip} ${port}`) ?? null,
    byNodePort: (proto, port) => byNodePort.get(`${proto} ${port}`) ?? null,
    portsOf: (ip) => {
      const o = byIP.get(ip);
      return o ? { name: o.name, ports: [...o.ports].sort() } : null;
    },
  };
}

import type { Endpoint } from '../endpoint.ts';
import type { ServicePort } from '../service-port.ts';

/** serviceOfPortId returns "ns/name" of a service port id ("ns/name:port/TCP" or "ns/name/TCP"). */
export function serviceOfPortId(id: string): string {
  const slash = id.indexOf('/');
  // Namespaces and names are DNS labels: neither holds ':' nor '/', so the name
  // ends at the first of them after the namespace.
  let end = id.length;
  for (let i = slash + 1; i < id.length; i++) {
    if (id[i] === ':' || id[i] === '/') {
      end = i;
      break;
    }
  }
  return id.slice(0, end);
}

/**
 * healthCheckNodePorts maps "ns/name" to the health check node port of every
 * service that needs one (LoadBalancer with externalTrafficPolicy Local), like
 * kube-proxy's ServicePortMap.HealthCheckNodePorts.
 */
export function healthCheckNodePorts(services: ReadonlyMap<string, ServicePort>): Map<string, number> {
  const out = new Map<string, number>();
  for (const sp of services.values()) if (sp.healthCheckNodePort !== 0) out.set(sp.service, sp.healthCheckNodePort);
  return out;
}

/**
 * localReadyEndpoints maps "ns/name" to the number of distinct IPs of its ready
 * endpoints on this node, over all of its ports, like kube-proxy's
 * EndpointsMap.LocalReadyEndpoints: 10.0.0.1:80 and 10.0.0.1:443 are one
 * endpoint, and terminating endpoints do not count, so a node whose pods are
 * all shutting down fails the load balancer's health check.
 */
export function localReadyEndpoints(endpoints: ReadonlyMap<string, readonly Endpoint[]>): Map<string, number> {
  const ips = new Map<string, Set<string>>();
  for (const [portId, list] of endpoints) {
    for (const ep of list) {
      if (!ep.ready || !ep.isLocal) continue;
      const svc = serviceOfPortId(portId);
      let set = ips.get(svc);
      if (!set) ips.set(svc, (set = new Set()));
      set.add(ep.ip);
    }
  }
  const out = new Map<string, number>();
  for (const [svc, set] of ips) out.set(svc, set.size);
  return out;
}

import type { EndpointSlice, Service, SliceEndpoint } from './kube-objects.ts';

/**
 * Builders for tests: small valid objects that a test then bends into the case
 * it needs. Kept in one place so every suite speaks about the same cluster.
 */
export function makeService(ns: string, name: string, spec: NonNullable<Service['spec']> = {}, extra: Partial<Service> = {}): Service {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: ns, ...(extra.metadata ?? {}) },
    spec: { type: 'ClusterIP', clusterIP: '10.96.0.1', ports: [{ name: 'p80', port: 80, protocol: 'TCP' }], ...spec },
    ...(extra.status ? { status: extra.status } : {}),
  };
}

export function makeSlice(
  ns: string,
  service: string,
  sliceName: string,
  endpoints: SliceEndpoint[],
  ports: EndpointSlice['ports'] = [{ name: 'p80', port: 80, protocol: 'TCP' }],
  annotations: Record<string, string> = {},
): EndpointSlice {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: sliceName, namespace: ns, labels: { 'kubernetes.io/service-name': service }, annotations },
    addressType: 'IPv4',
    ports,
    endpoints,
  };
}

export function ep(ip: string, opts: Partial<SliceEndpoint> & { ready?: boolean; serving?: boolean; terminating?: boolean } = {}): SliceEndpoint {
  const { ready, serving, terminating, ...rest } = opts;
  return {
    addresses: [ip],
    conditions: { ready: ready ?? true, serving: serving ?? ready ?? true, terminating: terminating ?? false },
    ...rest,
  };
}

import { mkdtempSync, renameSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { POD_TCP_PORT, type Pod } from './plan.ts';

/**
 * manifests: the test cluster's Services, EndpointSlices and Nodes, written
 * as files into a temporary folder that kproxy's file source follows. A test
 * changes the cluster by rewriting one file (atomically, as kubectl-less
 * tooling or a ConfigMap update would).
 */

/** K8S_NAMESPACE is the Kubernetes namespace of every test Service. */
export const K8S_NAMESPACE = 'kpt';

export interface PortSpec {
  name: string;
  protocol?: 'TCP' | 'UDP';
  port: number;
  targetPort: number;
  nodePort?: number;
}

export interface ServiceSpec {
  name: string;
  type?: 'ClusterIP' | 'NodePort' | 'LoadBalancer';
  clusterIP: string;
  /** clusterIPs: a dual-stack Service's two cluster IPs, clusterIP first (default [clusterIP]). */
  clusterIPs?: string[];
  ipFamilyPolicy?: 'SingleStack' | 'PreferDualStack' | 'RequireDualStack';
  ports: PortSpec[];
  externalIPs?: string[];
  /** loadBalancerIP: the ingress IP a cloud controller would have written into status. */
  loadBalancerIP?: string;
  loadBalancerSourceRanges?: string[];
  externalTrafficPolicy?: 'Cluster' | 'Local';
  internalTrafficPolicy?: 'Cluster' | 'Local';
  sessionAffinity?: 'ClientIP';
  healthCheckNodePort?: number;
}

/** EndpointSpec is one pod behind a service with its conditions (ready, serving, not terminating by default). */
export interface EndpointSpec {
  pod: Pod;
  ready?: boolean;
  serving?: boolean;
  terminating?: boolean;
  /** zone, forZones: topology (the endpoint's zone and the zones its hints name). */
  zone?: string;
  forZones?: string[];
}

/** tcpPort is a service's one TCP port, sent to the pods' TCP server (and a node port when given). */
export const tcpPort = (port: number, nodePort?: number): PortSpec[] => [{ name: 'tcp', port, targetPort: POD_TCP_PORT, ...(nodePort ? { nodePort } : {}) }];

/** ready lists pods as ready, serving, non-terminating endpoints. */
export const ready = (...pods: Pod[]): EndpointSpec[] => pods.map((pod) => ({ pod }));

export type KubeObject = Record<string, unknown>;

export function serviceObject(s: ServiceSpec): KubeObject {
  const spec: Record<string, unknown> = {
    type: s.type ?? 'ClusterIP',
    clusterIP: s.clusterIP,
    clusterIPs: clusterIPsOf(s),
    ipFamilies: clusterIPsOf(s).map(familyOf),
    ipFamilyPolicy: s.ipFamilyPolicy ?? (clusterIPsOf(s).length > 1 ? 'PreferDualStack' : 'SingleStack'),
    selector: { app: s.name },
    ports: s.ports.map((p) => ({ name: p.name, protocol: p.protocol ?? 'TCP', port: p.port, targetPort: p.targetPort, ...(p.nodePort ? { nodePort: p.nodePort } : {}) })),
  };
  if (s.externalIPs) spec.externalIPs = s.externalIPs;
  if (s.loadBalancerSourceRanges) spec.loadBalancerSourceRanges = s.loadBalancerSourceRanges;
  if (s.type === 'NodePort' || s.type === 'LoadBalancer') spec.externalTrafficPolicy = s.externalTrafficPolicy ?? 'Cluster';
  if (s.internalTrafficPolicy) spec.internalTrafficPolicy = s.internalTrafficPolicy;
  if (s.sessionAffinity) {
    spec.sessionAffinity = s.sessionAffinity;
    spec.sessionAffinityConfig = { clientIP: { timeoutSeconds: 10800 } };
  }
  if (s.healthCheckNodePort) spec.healthCheckNodePort = s.healthCheckNodePort;
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: s.name, namespace: K8S_NAMESPACE, uid: `uid-${s.name}` },
    spec,
    status: { loadBalancer: s.loadBalancerIP ? { ingress: [{ ip: s.loadBalancerIP, ipMode: 'VIP' }] } : {} },
  };
}

const clusterIPsOf = (s: ServiceSpec) => s.clusterIPs ?? [s.clusterIP];
const familyOf = (ip: string) => (ip.includes(':') ? 'IPv6' : 'IPv4');

/** endpointSliceObject is one EndpointSlice of a family (the pods' addresses of that family). */
export function endpointSliceObject(s: ServiceSpec, endpoints: readonly EndpointSpec[], family: 'IPv4' | 'IPv6' = 'IPv4'): KubeObject {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: `${s.name}-kpt0${family === 'IPv6' ? 6 : 1}`,
      namespace: K8S_NAMESPACE,
      labels: { 'kubernetes.io/service-name': s.name, 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' },
    },
    addressType: family,
    ports: s.ports.map((p) => ({ name: p.name, protocol: p.protocol ?? 'TCP', port: p.targetPort })),
    endpoints: endpoints.map((e) => ({
      addresses: [family === 'IPv6' ? e.pod.ip6 : e.pod.ip],
      conditions: { ready: e.ready ?? true, serving: e.serving ?? e.ready ?? true, terminating: e.terminating ?? false },
      nodeName: e.pod.node,
      ...(e.zone ? { zone: e.zone } : {}),
      ...(e.forZones ? { hints: { forZones: e.forZones.map((name) => ({ name })) } } : {}),
      targetRef: { kind: 'Pod', namespace: K8S_NAMESPACE, name: e.pod.name },
    })),
  };
}

/** serviceObjects is a Service and, unless endpoints is null, one EndpointSlice per family of its cluster IPs. */
export function serviceObjects(s: ServiceSpec, endpoints: readonly EndpointSpec[] | null): KubeObject[] {
  if (endpoints === null) return [serviceObject(s)];
  return [serviceObject(s), ...clusterIPsOf(s).map((ip) => endpointSliceObject(s, endpoints, familyOf(ip)))];
}

export function nodeObject(name: string, internalIP: string, podCIDR: string, opts: { zone?: string; ipv6?: { ip: string; podCIDR: string } } = {}): KubeObject {
  const { zone, ipv6 } = opts;
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, labels: { 'kubernetes.io/hostname': name, 'kubernetes.io/os': 'linux', ...(zone ? { 'topology.kubernetes.io/zone': zone } : {}) } },
    spec: { podCIDR, podCIDRs: ipv6 ? [podCIDR, ipv6.podCIDR] : [podCIDR] },
    status: {
      addresses: [{ type: 'InternalIP', address: internalIP }, ...(ipv6 ? [{ type: 'InternalIP', address: ipv6.ip }] : []), { type: 'Hostname', address: name }],
    },
  };
}

/** serviceCIDRObject is a ServiceCIDR (networking.k8s.io/v1): the range cluster IPs come from. */
export function serviceCIDRObject(name: string, cidrs: string[]): KubeObject {
  return { apiVersion: 'networking.k8s.io/v1', kind: 'ServiceCIDR', metadata: { name }, spec: { cidrs } };
}

/** ManifestDir is the folder kproxy watches (`--source file:DIR`). */
export class ManifestDir {
  readonly path: string;

  constructor() {
    this.path = mkdtempSync(join(tmpdir(), `kpt-${process.pid}-manifests-`));
  }

  /** write replaces one file's objects atomically (write aside, then rename over it). */
  write(file: string, objects: readonly KubeObject[]): void {
    const target = join(this.path, `${file}.json`);
    const aside = join(this.path, `.${file}.json.tmp`);
    writeFileSync(aside, JSON.stringify(objects, null, 2));
    renameSync(aside, target);
  }

  /** writeService writes a Service and its endpoints into the file named after it. */
  writeService(s: ServiceSpec, endpoints: readonly EndpointSpec[] | null): void {
    this.write(`svc-${s.name}`, serviceObjects(s, endpoints));
  }

  remove(file: string): void {
    unlinkSync(join(this.path, `${file}.json`));
  }

  destroy(): void {
    rmSync(this.path, { recursive: true, force: true });
  }
}

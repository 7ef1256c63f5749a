/**
 * cluster generates the synthetic clusters the benchmarks program: N services
 * with M endpoints each, in a fixed, seeded mix (the same seed gives the same
 * cluster, byte for byte):
 *   10% NodePort, 2% LoadBalancer with loadBalancerSourceRanges (plus their
 *   node ports), 5% externalTrafficPolicy Local (only externally reachable
 *   services can have it), 5% ClientIP session affinity, 10% UDP.
 * Endpoints are spread over NODES nodes; this node (nodeName) holds about 1%.
 */
import type { EndpointSlice, Node, Service } from '../../server/proxy/kube-objects.ts';

/** NODES: nodes the endpoints are spread over; node 0 is the benchmarked node. */
export const NODES = 100;
/** Address plan: all private or documentation ranges, nothing routable from the host. */
export const CLUSTER_IP_BASE = ip4(10, 96, 0, 10);
export const POD_CIDR = '10.64.0.0/10';
export const POD_IP_BASE = ip4(10, 64, 0, 10);
export const LB_IP_BASE = ip4(100, 64, 0, 10);
export const NODE_PORT_BASE = 30000;
const SOURCE_RANGES = ['192.0.2.0/24', '198.51.100.0/24'];
/** ANNOTATION_TRIGGER: the endpoints controller's last-change-trigger-time annotation. */
export const ANNOTATION_TRIGGER = 'endpoints.kubernetes.io/last-change-trigger-time';
/** INITIAL_TRIGGER: trigger time of generated slices; before kproxy starts, so not counted as programming latency. */
const INITIAL_TRIGGER = '2020-01-01T00:00:00Z';

export interface ClusterSpec {
  services: number;
  endpointsPerService: number;
  nodeName: string;
  /** nodeIP: the node's InternalIP (LB source ranges that contain it also admit LB IPs as source). */
  nodeIP: string;
  seed?: number;
  /**
   * dualStack: every Service is PreferDualStack with an IPv4 and an IPv6 cluster
   * IP, and has an IPv6 slice beside its IPv4 one (the same number of endpoints).
   */
  dualStack?: boolean;
}

/** IPv6 counterparts of the address plan: cluster IPs, pod IPs, LB IPs, the pod CIDR and the node IP. */
export const CLUSTER_IP6_PREFIX = 'fd00:96::';
export const POD_IP6_PREFIX = 'fd00:64::';
export const LB_IP6_PREFIX = 'fd00:100::';
export const POD_CIDR6 = 'fd00:64::/64';
export const NODE_IP6 = 'fd00:250::2';

/** ip6Text puts n (below 2^32) into the last two groups of a /96 prefix such as "fd00:96::". */
export function ip6Text(prefix: string, n: number): string {
  return `${prefix}${(n >>> 16).toString(16)}:${(n & 0xffff).toString(16)}`;
}

/** ServiceShape is what the mix decided for one service (kept for tests and the churn driver). */
export interface ServiceShape {
  readonly index: number;
  readonly namespace: string;
  readonly name: string;
  readonly type: 'ClusterIP' | 'NodePort' | 'LoadBalancer';
  readonly protocol: 'TCP' | 'UDP';
  readonly local: boolean;
  readonly affinity: boolean;
}

export interface SyntheticCluster {
  readonly spec: ClusterSpec;
  readonly shapes: readonly ServiceShape[];
  readonly services: readonly Service[];
  /** slices[i] is the one EndpointSlice of services[i] (its IPv4 one in a dual-stack cluster). */
  readonly slices: readonly EndpointSlice[];
  /** slices6[i] is the IPv6 EndpointSlice of services[i] (dual-stack clusters; empty otherwise). */
  readonly slices6: readonly EndpointSlice[];
  readonly node: Node;
}

/** mulberry32 is a small seeded PRNG: the mix must be the same on every run. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function ip4(a: number, b: number, c: number, d: number): number {
  return ((a << 24) | (b << 16) | (c << 8) | d) >>> 0;
}

export function ipText(n: number): string {
  return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

/** shapeOf decides one service's features from two uniform draws and the index. */
function shapeOf(index: number, rng: () => number): ServiceShape {
  const u = rng();
  const type = u < 0.02 ? 'LoadBalancer' : u < 0.12 ? 'NodePort' : 'ClusterIP';
  // 5% of all services are Local: 5/12 of the externally reachable 12%.
  const local = type !== 'ClusterIP' && rng() < 5 / 12;
  const affinity = rng() < 0.05;
  const protocol = rng() < 0.1 ? 'UDP' : 'TCP';
  return { index, namespace: `bench-${Math.floor(index / 100)}`, name: `svc-${index}`, type, protocol, local, affinity };
}

export function nodeNameOf(k: number, self: string): string {
  return k === 0 ? self : `node-${k}`;
}

/** endpointIP: every endpoint of the cluster has its own pod IP. */
export function endpointIP(service: number, e: number, m: number, generation = 0): string {
  // Generations move an endpoint to a new IP (churn) without colliding with others: 10.64.0.0/10 holds 4M.
  return ipText(POD_IP_BASE + service * m + e + generation * 1_000_000);
}

export function sliceOf(shape: ServiceShape, m: number, rng: () => number, nodeName: string): EndpointSlice {
  const port = shape.protocol === 'UDP' ? { name: 'dns', port: 5353, protocol: 'UDP' } : { name: 'http', port: 8080, protocol: 'TCP' };
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: `${shape.name}-x7k2p`,
      namespace: shape.namespace,
      labels: { 'kubernetes.io/service-name': shape.name, 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' },
      annotations: { [ANNOTATION_TRIGGER]: INITIAL_TRIGGER },
    },
    addressType: 'IPv4',
    ports: [port],
    endpoints: Array.from({ length: m }, (_, e) => ({
      addresses: [endpointIP(shape.index, e, m)],
      conditions: { ready: true, serving: true, terminating: false },
      nodeName: nodeNameOf(Math.floor(rng() * NODES), nodeName),
      targetRef: { kind: 'Pod', namespace: shape.namespace, name: `${shape.name}-pod-${e}` },
    })),
  };
}

/** generateCluster builds the whole cluster in memory. */
export function generateCluster(spec: ClusterSpec): SyntheticCluster {
  const rng = mulberry32(spec.seed ?? 20240611);
  const shapes: ServiceShape[] = [];
  const services: Service[] = [];
  const slices: EndpointSlice[] = [];
  const slices6: EndpointSlice[] = [];
  let nextNodePort = NODE_PORT_BASE;
  let lbs = 0;
  for (let i = 0; i < spec.services; i++) {
    const s = shapeOf(i, rng);
    shapes.push(s);
    const port: NonNullable<NonNullable<Service['spec']>['ports']>[number] =
      s.protocol === 'UDP' ? { name: 'dns', port: 53, protocol: 'UDP', targetPort: 5353 } : { name: 'http', port: 80, protocol: 'TCP', targetPort: 8080 };
    // Node ports past 32767 stand for a widened --service-node-port-range: 30,000 services hold 3,600 of them.
    if (s.type !== 'ClusterIP') port.nodePort = nextNodePort++;
    const svc: Service = {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: s.name, namespace: s.namespace, labels: { app: s.name } },
      spec: { type: s.type, clusterIP: ipText(CLUSTER_IP_BASE + i), clusterIPs: [ipText(CLUSTER_IP_BASE + i)], ipFamilies: ['IPv4'], ports: [port], selector: { app: s.name } },
    };
    if (s.local) svc.spec!.externalTrafficPolicy = 'Local';
    if (s.affinity) Object.assign(svc.spec!, { sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 10800 } } });
    if (s.type === 'LoadBalancer') {
      svc.spec!.loadBalancerSourceRanges = SOURCE_RANGES;
      if (s.local) svc.spec!.healthCheckNodePort = nextNodePort++;
      svc.status = { loadBalancer: { ingress: [{ ip: ipText(LB_IP_BASE + lbs++) }] } };
    }
    if (spec.dualStack) {
      Object.assign(svc.spec!, { clusterIPs: [svc.spec!.clusterIP, ip6Text(CLUSTER_IP6_PREFIX, i)], ipFamilies: ['IPv4', 'IPv6'], ipFamilyPolicy: 'PreferDualStack' });
      if (s.type === 'LoadBalancer') svc.status!.loadBalancer!.ingress!.push({ ip: ip6Text(LB_IP6_PREFIX, lbs) });
    }
    services.push(svc);
    const slice = sliceOf(s, spec.endpointsPerService, rng, spec.nodeName);
    slices.push(slice);
    if (spec.dualStack) slices6.push(ipv6Slice(slice, i, spec.endpointsPerService));
  }
  const node: Node = {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: spec.nodeName, labels: { 'kubernetes.io/hostname': spec.nodeName } },
    spec: { podCIDR: '10.64.0.0/24', podCIDRs: spec.dualStack ? ['10.64.0.0/24', POD_CIDR6] : ['10.64.0.0/24'] },
    status: { addresses: [{ type: 'InternalIP', address: spec.nodeIP }, ...(spec.dualStack ? [{ type: 'InternalIP', address: NODE_IP6 }] : [])] },
  };
  return { spec, shapes, services, slices, slices6, node };
}

/** ipv6Slice is the IPv6 twin of a Service's slice: the same pods, nodes and ports at IPv6 pod IPs. */
function ipv6Slice(slice: EndpointSlice, service: number, m: number): EndpointSlice {
  return {
    ...slice,
    metadata: { ...slice.metadata, name: `${slice.metadata!.name}-v6` },
    addressType: 'IPv6',
    endpoints: slice.endpoints!.map((e, k) => ({ ...e, addresses: [ip6Text(POD_IP6_PREFIX, service * m + k)] })),
  };
}

/** mixOf counts the features of a cluster (the report shows the mix it measured). */
export function mixOf(c: SyntheticCluster): Record<string, number> {
  const n = (f: (s: ServiceShape) => boolean) => c.shapes.filter(f).length;
  return {
    services: c.shapes.length,
    endpoints: c.slices.reduce((a, s) => a + (s.endpoints?.length ?? 0), 0),
    nodePort: n((s) => s.type === 'NodePort'),
    loadBalancer: n((s) => s.type === 'LoadBalancer'),
    externalTrafficPolicyLocal: n((s) => s.local),
    sessionAffinity: n((s) => s.affinity),
    udp: n((s) => s.protocol === 'UDP'),
  };
}

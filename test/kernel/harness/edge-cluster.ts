/**
 * edge-cluster: clusters at the edges of what the API server accepts, for
 * testing every writer beyond the sizes of the examples (issue 30). Pure: no
 * I/O but writeEdgeCase, no clock; usable from the unit and kernel tiers.
 *
 * fixedEdgeCases() are the named edges (one Service with 1 … 10,000 ready
 * endpoints, 4,096 non-contiguous loadBalancerSourceRanges per family, 100
 * ports, 100 external IPs, names at their longest, 1,000 NodePort Services,
 * and dual-stack versions of the big ones); randomEdgeCase(seed) is a small
 * random cluster mixing every Service feature, the same for the same seed.
 * expectations(c) says, per service port, what "programmed exactly" means:
 * which endpoints a new connection to each of its addresses may reach, and
 * which sources its firewall lets in and keeps out. It reads the objects back
 * and decides as kube-proxy does (written from its rules, not from kproxy's
 * code), so a test of any mode can trace the kernel against it.
 *
 * Every object is one the API server would accept
 * (kubernetes/kubernetes pkg/apis/core/validation, pkg/apis/discovery/validation):
 * Service names are DNS-1035 labels and namespaces DNS-1123 labels (63
 * characters), port names DNS-1123 labels (63: IANA_SVC_NAME's 15 applies to
 * container ports, not to Service ports), node names DNS subdomains (253);
 * ports are unique per protocol, node ports unique in the cluster and within
 * the default range (30000-32767); EndpointSlices hold at most 100 endpoints
 * (the EndpointSlice controller's default; the API allows 1,000) and 100
 * ports, names made like the controller's generateName; external IPs are
 * neither loopback, link-local nor unspecified; source ranges are canonical
 * CIDRs; a LoadBalancer exposes no kubelet port (10250).
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ipFromBigInt, ipToBigInt, parseCIDR, type IPFamily } from '../../../server/net/ip.ts';
import type { EndpointSlice, KubeObject, Node, Service, SliceEndpoint } from '../../../server/proxy/kube-objects.ts';
import { mulberry32 } from '../../bench/cluster.ts';

export type { KubeObject };

/** EdgeObject is what a case holds: Nodes, Services and EndpointSlices. */
export type EdgeObject = Service | EndpointSlice | Node;

export interface EdgeCase {
  /** name: e.g. 'endpoints-738', 'source-ranges-4096-v4', 'random-seed-42'. */
  readonly name: string;
  readonly description: string;
  /** node: the node name to run kproxy as (--hostname-override). */
  readonly node: string;
  /** objects: the Node first, then each Service followed by its EndpointSlices (at most 100 endpoints each). */
  readonly objects: readonly EdgeObject[];
  /** families: the node's IP families (its InternalIPs and pod CIDRs). */
  readonly families: readonly IPFamily[];
}

/** CI_SEEDS: the random clusters CI runs (KPROXY_EDGE_SEEDS replaces them, see edgeSeeds). */
export const CI_SEEDS: readonly number[] = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233];

/** Address plan: private and documentation ranges only, nothing routable from the host. */
export const EDGE_NODE = 'edge-node';
export const NODE_IPS: Readonly<Record<IPFamily, string>> = { IPv4: '10.240.0.10', IPv6: 'fd00:240::10' };
/** EDGE_CLUSTER_CIDRS: the pod network of every case (--cluster-cidr); node k's pod CIDR is the k-th /22 of 10.64.0.0/10 and fd64:0:0:k::/64. */
export const EDGE_CLUSTER_CIDRS: Readonly<Record<IPFamily, string>> = { IPv4: '10.64.0.0/10', IPv6: 'fd64::/16' };
/** EXTERNAL_CLIENT: a client outside the cluster and outside every source range. */
export const EXTERNAL_CLIENT: Readonly<Record<IPFamily, string>> = { IPv4: '192.0.2.99', IPv6: '2001:db8:ff::99' };
/** NODE_PORT_BASE: the first node port handed out (the API's default range is 30000-32767). */
export const NODE_PORT_BASE = 30000;
export const NODE_PORT_MAX = 32767;
/** SLICE_SIZE: endpoints per EndpointSlice, as the EndpointSlice controller cuts them. */
export const SLICE_SIZE = 100;

const CLUSTER_IP_BASE: Record<IPFamily, bigint> = { IPv4: ipToBigInt('10.96.0.10')!, IPv6: ipToBigInt('fd00:96::a')! };
const EXTERNAL_IP_BASE: Record<IPFamily, bigint> = { IPv4: ipToBigInt('203.0.113.1')!, IPv6: ipToBigInt('2001:db8:e::1')! };
const LB_IP_BASE: Record<IPFamily, bigint> = { IPv4: ipToBigInt('198.51.100.10')!, IPv6: ipToBigInt('2001:db8:1b::10')! };
/** Source ranges are cut from these blocks (CGNAT space and a ULA /32), away from every other address. */
const RANGE_BASE: Record<IPFamily, bigint> = { IPv4: ipToBigInt('100.64.0.0')!, IPv6: ipToBigInt('fd00:5000::')! };
const KUBELET_PORT = 10250;

const family6 = (ip: string): IPFamily => (ip.includes(':') ? 'IPv6' : 'IPv4');
const ipAt = (base: Record<IPFamily, bigint>, f: IPFamily, i: number) => ipFromBigInt(base[f] + BigInt(i), f);

/** PODS_PER_NODE: addresses a node's pod CIDR hands to endpoints (the rest of its /22 is left free). */
const PODS_PER_NODE = 1000;

/** podIP is the j-th pod of node k (node 0 is the case's node): 10.64.0.0 + 1024k + j + 2, fd64:0:0:k::(j+2). */
export function podIP(f: IPFamily, k: number, j: number): string {
  if (!Number.isInteger(j) || j < 0 || j >= PODS_PER_NODE) throw new Error(`pod ${j} of node ${k}: a node holds pods 0 to ${PODS_PER_NODE - 1}`);
  if (f === 'IPv4') return ipFromBigInt(ipToBigInt('10.64.0.0')! + BigInt(k) * 1024n + BigInt(j + 2), f);
  return ipFromBigInt(ipToBigInt('fd64::')! + (BigInt(k) << 64n) + BigInt(j + 2), f);
}

/** podCIDR is node k's pod range of a family. */
export function podCIDR(f: IPFamily, k: number): string {
  return f === 'IPv4' ? `${ipFromBigInt(ipToBigInt('10.64.0.0')! + BigInt(k) * 1024n, f)}/22` : `${ipFromBigInt(ipToBigInt('fd64::')! + (BigInt(k) << 64n), f)}/64`;
}

/** POD_CLIENT_INDEX: a pod of the case's node that is no endpoint, the source of "from a pod" traces. */
export const POD_CLIENT_INDEX = PODS_PER_NODE + 10;

export const nodeNameOf = (c: Pick<EdgeCase, 'node'>, k: number) => (k === 0 ? c.node : `edge-node-${k}`);

// ------------------------------------------------------------- objects

interface PortSpec {
  readonly name: string;
  readonly protocol: 'TCP' | 'UDP' | 'SCTP';
  readonly port: number;
  readonly targetPort: number;
  readonly nodePort?: number;
}

interface EndpointSpec {
  /** ips: the endpoint's address per family the Service has. */
  readonly ips: Partial<Record<IPFamily, string>>;
  readonly node: string;
  readonly zone?: string;
  readonly ready: boolean;
  readonly serving: boolean;
  readonly terminating: boolean;
  readonly forZones?: readonly string[];
  readonly pod: string;
}

interface ServiceSpec {
  readonly namespace: string;
  readonly name: string;
  readonly type: 'ClusterIP' | 'NodePort' | 'LoadBalancer';
  /** clusterIPs: one per family, the primary first. */
  readonly clusterIPs: readonly string[];
  readonly policy: 'SingleStack' | 'PreferDualStack' | 'RequireDualStack';
  readonly ports: readonly PortSpec[];
  readonly externalIPs?: readonly string[];
  readonly lbIPs?: readonly string[];
  readonly sourceRanges?: readonly string[];
  readonly etp?: 'Cluster' | 'Local';
  readonly itp?: 'Cluster' | 'Local';
  readonly affinitySeconds?: number;
  readonly healthCheckNodePort?: number;
  readonly trafficDistribution?: 'PreferClose';
}

function serviceObject(s: ServiceSpec): Service {
  const spec: NonNullable<Service['spec']> = {
    type: s.type,
    clusterIP: s.clusterIPs[0],
    clusterIPs: [...s.clusterIPs],
    ipFamilies: s.clusterIPs.map(family6),
    ipFamilyPolicy: s.policy,
    ports: s.ports.map((p) => ({ name: p.name, protocol: p.protocol, port: p.port, targetPort: p.targetPort, ...(p.nodePort ? { nodePort: p.nodePort } : {}) })),
    selector: { app: s.name.slice(0, 63) },
    sessionAffinity: s.affinitySeconds ? 'ClientIP' : 'None',
    internalTrafficPolicy: s.itp ?? 'Cluster',
  };
  if (s.affinitySeconds) spec.sessionAffinityConfig = { clientIP: { timeoutSeconds: s.affinitySeconds } };
  if (s.type !== 'ClusterIP') spec.externalTrafficPolicy = s.etp ?? 'Cluster';
  if (s.externalIPs?.length) spec.externalIPs = [...s.externalIPs];
  if (s.sourceRanges?.length) spec.loadBalancerSourceRanges = [...s.sourceRanges];
  if (s.healthCheckNodePort) spec.healthCheckNodePort = s.healthCheckNodePort;
  if (s.trafficDistribution) spec.trafficDistribution = s.trafficDistribution;
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: s.name, namespace: s.namespace, uid: `uid-${s.namespace}-${s.name}`.slice(0, 128) },
    spec,
    status: { loadBalancer: s.lbIPs?.length ? { ingress: s.lbIPs.map((ip) => ({ ip, ipMode: 'VIP' })) } : {} },
  };
}

/** sliceName is the EndpointSlice controller's generateName: the service name and "-", cut to 58, then 5 characters. */
function sliceName(service: string, family: IPFamily, i: number): string {
  const alphabet = 'bcdfghjklmnpqrstvwxz2456789';
  let suffix = '';
  for (let n = i * 2 + (family === 'IPv6' ? 1 : 0), k = 0; k < 5; k++, n = Math.floor(n / alphabet.length)) suffix += alphabet[n % alphabet.length];
  return `${`${service}-`.slice(0, 58)}${suffix}`;
}

/** sliceObjects cuts a Service's endpoints of one family into EndpointSlices of at most `size`. */
function sliceObjects(s: ServiceSpec, endpoints: readonly EndpointSpec[], family: IPFamily, size = SLICE_SIZE): EndpointSlice[] {
  const eps = endpoints.filter((e) => e.ips[family] !== undefined);
  const out: EndpointSlice[] = [];
  for (let start = 0, i = 0; start < eps.length || (start === 0 && i === 0); start += size, i++) {
    const part = eps.slice(start, start + size);
    out.push({
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: {
        name: sliceName(s.name, family, i),
        namespace: s.namespace,
        labels: { 'kubernetes.io/service-name': s.name, 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' },
      },
      addressType: family,
      ports: s.ports.map((p) => ({ name: p.name, protocol: p.protocol, port: p.targetPort })),
      endpoints: part.map((e): SliceEndpoint => ({
        addresses: [e.ips[family]!],
        conditions: { ready: e.ready, serving: e.serving, terminating: e.terminating },
        nodeName: e.node,
        ...(e.zone ? { zone: e.zone } : {}),
        ...(e.forZones ? { hints: { forZones: e.forZones.map((name) => ({ name })) } } : {}),
        targetRef: { kind: 'Pod', namespace: s.namespace, name: e.pod },
      })),
    });
    if (part.length === 0) break;
  }
  return out;
}

/** serviceWithSlices: the Service, then its slices for each family of its cluster IPs (an empty one when it has no endpoints). */
function serviceWithSlices(s: ServiceSpec, endpoints: readonly EndpointSpec[], size = SLICE_SIZE): EdgeObject[] {
  return [serviceObject(s), ...s.clusterIPs.flatMap((ip) => sliceObjects(s, endpoints, family6(ip), size))];
}

interface NodeSpec {
  readonly name: string;
  readonly families: readonly IPFamily[];
  readonly zone?: string;
  /** podCIDRs: per family, default node 0's. */
  readonly podCIDRs?: Partial<Record<IPFamily, string>>;
}

function nodeObject(n: NodeSpec): Node {
  const cidrs = n.families.map((f) => n.podCIDRs?.[f] ?? podCIDR(f, 0));
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: n.name, labels: { 'kubernetes.io/hostname': n.name.slice(0, 63), 'kubernetes.io/os': 'linux', ...(n.zone ? { 'topology.kubernetes.io/zone': n.zone } : {}) } },
    spec: { podCIDR: cidrs[0], podCIDRs: cidrs },
    status: { addresses: [...n.families.map((f) => ({ type: 'InternalIP', address: NODE_IPS[f] })), { type: 'Hostname', address: n.name }] },
  };
}

/** readyEndpoints: n ready endpoints spread round robin over `nodes` nodes (node 0, this one, first), 200 at most per node. */
function readyEndpoints(c: { node: string }, n: number, families: readonly IPFamily[], nodes = Math.max(2, Math.ceil(n / 200))): EndpointSpec[] {
  return Array.from({ length: n }, (_, e) => {
    const k = e % nodes;
    const j = Math.floor(e / nodes);
    return {
      ips: Object.fromEntries(families.map((f) => [f, podIP(f, k, j)])),
      node: nodeNameOf(c, k),
      ready: true,
      serving: true,
      terminating: false,
      pod: `pod-${e}`,
    };
  });
}

// ------------------------------------------------------------- source ranges

/** RANGE_PREFIXES: host bits of each range in turn (/32, /30, /28, /26, /24 for IPv4), so the list mixes single hosts and wider ranges. */
const RANGE_HOST_BITS: Record<IPFamily, readonly number[]> = { IPv4: [0, 2, 4, 6, 8], IPv6: [0, 2, 8, 16, 32, 64] };

/**
 * sourceRanges makes n ranges of a family, each aligned on its size and
 * followed by a gap at least as large, so no two touch: nothing merges away,
 * and the address just before and just after each range is outside all of them.
 */
export function sourceRanges(f: IPFamily, n: number): string[] {
  const bits = f === 'IPv4' ? 32 : 128;
  const out: string[] = [];
  let at = RANGE_BASE[f];
  for (let i = 0; i < n; i++) {
    const host = RANGE_HOST_BITS[f][i % RANGE_HOST_BITS[f].length];
    const size = 1n << BigInt(host);
    // Align up to the range's size, leaving at least one size free after the previous range.
    at = ((at + size + size - 1n) / size) * size;
    out.push(`${ipFromBigInt(at, f)}/${bits - host}`);
    at += size;
  }
  return out;
}

// ------------------------------------------------------------- fixed cases

function clusterIP(f: IPFamily, i: number): string {
  return ipAt(CLUSTER_IP_BASE, f, i);
}

/** endpointsEdgeCase: one NodePort Service with n ready endpoints per family (the endpoints-N cases, at any n: for probing past them). */
export function endpointsEdgeCase(n: number, families: readonly IPFamily[] = ['IPv4']): EdgeCase {
  return endpointsCase(n, families);
}

function endpointsCase(n: number, families: readonly IPFamily[]): EdgeCase {
  const node = EDGE_NODE;
  const dual = families.length > 1;
  const svc: ServiceSpec = {
    namespace: 'edge',
    name: `endpoints-${n}`,
    type: 'NodePort',
    clusterIPs: families.map((f) => clusterIP(f, 0)),
    policy: dual ? 'RequireDualStack' : 'SingleStack',
    ports: [{ name: 'http', protocol: 'TCP', port: 80, targetPort: 8080, nodePort: NODE_PORT_BASE }],
  };
  return {
    name: `endpoints-${n}${dual ? '-dual' : ''}`,
    description: `one NodePort Service with ${n.toLocaleString('en')} ready endpoints${dual ? ' in each family (dual-stack)' : ''}, in EndpointSlices of ${SLICE_SIZE}`,
    node,
    families,
    objects: [nodeObject({ name: node, families }), ...serviceWithSlices(svc, readyEndpoints({ node }, n, families))],
  };
}

function sourceRangesCase(n: number, families: readonly IPFamily[]): EdgeCase {
  const node = EDGE_NODE;
  const dual = families.length > 1;
  const svc: ServiceSpec = {
    namespace: 'edge',
    name: 'firewalled',
    type: 'LoadBalancer',
    clusterIPs: families.map((f) => clusterIP(f, 0)),
    policy: dual ? 'RequireDualStack' : 'SingleStack',
    ports: [{ name: 'https', protocol: 'TCP', port: 443, targetPort: 8443, nodePort: NODE_PORT_BASE }],
    lbIPs: families.map((f) => ipAt(LB_IP_BASE, f, 0)),
    sourceRanges: families.flatMap((f) => sourceRanges(f, n)),
  };
  const tag = dual ? 'dual' : families[0] === 'IPv4' ? 'v4' : 'v6';
  return {
    name: `source-ranges-${n}-${tag}`,
    description: `a LoadBalancer with ${n.toLocaleString('en')} non-contiguous loadBalancerSourceRanges (/32 and wider mixed)${dual ? ' in each family' : ` (${families[0]})`}`,
    node,
    families,
    objects: [nodeObject({ name: node, families }), ...serviceWithSlices(svc, readyEndpoints({ node }, 3, families))],
  };
}

function portsCase(): EdgeCase {
  const node = EDGE_NODE;
  const families: IPFamily[] = ['IPv4'];
  const ports = Array.from({ length: 100 }, (_, i): PortSpec => ({
    name: `p${i + 1}`,
    protocol: i % 2 === 0 ? 'TCP' : 'UDP',
    port: 8001 + i,
    targetPort: 9001 + i,
    nodePort: NODE_PORT_BASE + 1000 + i,
  }));
  const svc: ServiceSpec = { namespace: 'edge', name: 'many-ports', type: 'NodePort', clusterIPs: [clusterIP('IPv4', 0)], policy: 'SingleStack', ports };
  return {
    name: 'ports-100',
    description: 'one NodePort Service with 100 ports, TCP and UDP alternating (an EndpointSlice holds at most 100 ports)',
    node,
    families,
    objects: [nodeObject({ name: node, families }), ...serviceWithSlices(svc, readyEndpoints({ node }, 3, families))],
  };
}

function externalIPsCase(): EdgeCase {
  const node = EDGE_NODE;
  const families: IPFamily[] = ['IPv4'];
  const svc: ServiceSpec = {
    namespace: 'edge',
    name: 'many-external-ips',
    type: 'ClusterIP',
    clusterIPs: [clusterIP('IPv4', 0)],
    policy: 'SingleStack',
    ports: [{ name: 'http', protocol: 'TCP', port: 80, targetPort: 8080 }],
    externalIPs: Array.from({ length: 100 }, (_, i) => ipAt(EXTERNAL_IP_BASE, 'IPv4', i)),
  };
  return {
    name: 'external-ips-100',
    description: 'one Service with 100 externalIPs',
    node,
    families,
    objects: [nodeObject({ name: node, families }), ...serviceWithSlices(svc, readyEndpoints({ node }, 3, families))],
  };
}

/** label makes a DNS label of exactly `length` characters from a seed word (a letter first: valid as DNS-1035 too). */
function label(word: string, length: number): string {
  let s = word;
  while (s.length < length) s += `-${word}`;
  s = s.slice(0, length);
  return s.endsWith('-') ? `${s.slice(0, -1)}x` : s;
}

/** subdomain makes a DNS subdomain of exactly `length` characters from labels of at most 63. */
function subdomain(word: string, length: number): string {
  const parts: string[] = [];
  let left = length;
  while (left > 0) {
    const n = Math.min(63, left - (parts.length ? 1 : 0));
    if (parts.length) left--;
    parts.push(label(`${word}${parts.length}`, n));
    left -= n;
  }
  return parts.join('.');
}

/**
 * maxNamesCase: every name at its longest, so every comment and name kproxy
 * writes is as long as the API lets it be: a 63-character namespace, Service
 * and port names, a 253-character node name, a 63-character zone, IPv6
 * endpoints of 39 characters on port 65535, over every feature that puts the
 * service port's name in a comment (LoadBalancer with source ranges, external
 * IP, externalTrafficPolicy Local with its health check, affinity).
 */
function maxNamesCase(): EdgeCase {
  const node = subdomain('node', 253);
  const zone = label('zone', 63);
  const families: IPFamily[] = ['IPv4', 'IPv6'];
  const podCIDRs = { IPv4: podCIDR('IPv4', 0), IPv6: 'fd64:6464:6464:6464::/64' };
  const long6 = (j: number) => `fd64:6464:6464:6464:ffff:ffff:ffff:${(0xfff0 + j).toString(16)}`;
  const svc: ServiceSpec = {
    namespace: label('namespace', 63),
    name: label('service', 63),
    type: 'LoadBalancer',
    clusterIPs: families.map((f) => clusterIP(f, 0)),
    policy: 'RequireDualStack',
    ports: [
      { name: label('port', 63), protocol: 'TCP', port: 65535, targetPort: 65535, nodePort: NODE_PORT_BASE },
      { name: label('other', 63), protocol: 'UDP', port: 65534, targetPort: 65534, nodePort: NODE_PORT_BASE + 1 },
    ],
    externalIPs: families.map((f) => ipAt(EXTERNAL_IP_BASE, f, 0)),
    lbIPs: families.map((f) => ipAt(LB_IP_BASE, f, 0)),
    sourceRanges: families.flatMap((f) => sourceRanges(f, 3)),
    etp: 'Local',
    affinitySeconds: 86400,
    healthCheckNodePort: NODE_PORT_MAX,
  };
  const eps: EndpointSpec[] = [0, 1, 2].map((j) => ({
    ips: { IPv4: podIP('IPv4', j === 2 ? 1 : 0, j), IPv6: j === 2 ? podIP('IPv6', 1, j) : long6(j) },
    node: j === 2 ? 'edge-node-1' : node,
    zone,
    ready: true,
    serving: true,
    terminating: false,
    forZones: [zone],
    pod: subdomain(`pod${j}`, 253),
  }));
  return {
    name: 'max-names',
    description: 'names at their maximum lengths: 63-character namespace, Service and port names, a 253-character node, 39-character IPv6 endpoints on port 65535',
    node,
    families,
    objects: [nodeObject({ name: node, families, zone, podCIDRs }), ...serviceWithSlices(svc, eps)],
  };
}

function nodePortsCase(n: number): EdgeCase {
  const node = EDGE_NODE;
  const families: IPFamily[] = ['IPv4'];
  const objects: EdgeObject[] = [nodeObject({ name: node, families })];
  for (let i = 0; i < n; i++) {
    const udp = i % 4 === 3;
    const local = i % 5 === 4;
    const svc: ServiceSpec = {
      namespace: `edge-${Math.floor(i / 100)}`,
      name: `np-${i}`,
      type: 'NodePort',
      clusterIPs: [clusterIP('IPv4', i)],
      policy: 'SingleStack',
      ports: [{ name: udp ? 'dns' : 'http', protocol: udp ? 'UDP' : 'TCP', port: udp ? 53 : 80, targetPort: udp ? 5353 : 8080, nodePort: NODE_PORT_BASE + i }],
      etp: local ? 'Local' : 'Cluster',
    };
    // Two endpoints each, one on this node, at addresses of their own.
    const eps: EndpointSpec[] = [0, 1].map((k) => ({ ips: { IPv4: podIP('IPv4', k, i) }, node: nodeNameOf({ node }, k), ready: true, serving: true, terminating: false, pod: `np-${i}-${k}` }));
    objects.push(...serviceWithSlices(svc, eps));
  }
  return {
    name: `node-ports-${n}`,
    description: `${n.toLocaleString('en')} NodePort Services on one node (every 4th UDP, every 5th externalTrafficPolicy Local), two endpoints each`,
    node,
    families,
    objects,
  };
}

/** FIXED_CASE_NAMES: the fixed cases in the order fixedEdgeCases() returns them. */
export const ENDPOINT_COUNTS = [1, 255, 256, 726, 738, 760, 1000, 5000, 10000] as const;

export function fixedEdgeCases(): EdgeCase[] {
  return [
    ...ENDPOINT_COUNTS.map((n) => endpointsCase(n, ['IPv4'])),
    sourceRangesCase(4096, ['IPv4']),
    sourceRangesCase(4096, ['IPv6']),
    portsCase(),
    externalIPsCase(),
    maxNamesCase(),
    nodePortsCase(1000),
    endpointsCase(10000, ['IPv4', 'IPv6']),
    sourceRangesCase(4096, ['IPv4', 'IPv6']),
  ];
}

/** fixedEdgeCase returns one fixed case by name (throws on an unknown name, listing the known ones). */
export function fixedEdgeCase(name: string): EdgeCase {
  const all = fixedEdgeCases();
  const c = all.find((x) => x.name === name);
  if (!c) throw new Error(`no fixed edge case ${JSON.stringify(name)}: ${all.map((x) => x.name).join(', ')}`);
  return c;
}

/**
 * limitEdgeCases: clusters the API server accepts but a mode's kernel cannot
 * hold whole, where the mode must leave out one Service port and program the
 * rest. Not among the fixed cases (every mode programs those exactly):
 *   ipset-full: a LoadBalancer with 16 ports and 4,096 source ranges (65,536
 *   entries: IPVS mode's KUBE-LOAD-BALANCER-SOURCE-CIDR is then full, its
 *   maxelem) sorted before a second one with one port and range, which no
 *   longer fits, and a ClusterIP Service after them.
 */
export function limitEdgeCases(): EdgeCase[] {
  const node = EDGE_NODE;
  const families: IPFamily[] = ['IPv4'];
  const full: ServiceSpec = {
    namespace: 'edge',
    name: 'a-full',
    type: 'LoadBalancer',
    clusterIPs: [clusterIP('IPv4', 0)],
    policy: 'SingleStack',
    ports: Array.from({ length: 16 }, (_, i) => ({ name: `p${i}`, protocol: 'TCP' as const, port: 8000 + i, targetPort: 9000 + i, nodePort: NODE_PORT_BASE + i })),
    lbIPs: [ipAt(LB_IP_BASE, 'IPv4', 0)],
    sourceRanges: sourceRanges('IPv4', 4096),
  };
  const over: ServiceSpec = {
    namespace: 'edge',
    name: 'b-over',
    type: 'LoadBalancer',
    clusterIPs: [clusterIP('IPv4', 1)],
    policy: 'SingleStack',
    ports: [{ name: 'https', protocol: 'TCP', port: 443, targetPort: 8443, nodePort: NODE_PORT_BASE + 100 }],
    lbIPs: [ipAt(LB_IP_BASE, 'IPv4', 1)],
    sourceRanges: ['192.0.2.0/24'],
  };
  const plain: ServiceSpec = {
    namespace: 'edge',
    name: 'c-plain',
    type: 'ClusterIP',
    clusterIPs: [clusterIP('IPv4', 2)],
    policy: 'SingleStack',
    ports: [{ name: 'http', protocol: 'TCP', port: 80, targetPort: 8080 }],
  };
  return [
    {
      name: 'ipset-full',
      description: 'a LoadBalancer with 16 ports x 4,096 source ranges (65,536: a full ipset in IPVS mode), then one more LoadBalancer that no longer fits, then a ClusterIP Service',
      node,
      families,
      objects: [nodeObject({ name: node, families }), ...[full, over, plain].flatMap((s) => serviceWithSlices(s, readyEndpoints({ node }, 2, families)))],
    },
  ];
}

// ------------------------------------------------------------- random cases

const LABEL_CHARS = 'abcdefghijklmnopqrstuvwxyz0123456789-';

/** randomLabel: a DNS label of 1..max characters (a letter first when dns1035); unique among `taken`. */
function randomLabel(rng: () => number, max: number, taken: Set<string>, dns1035 = true): string {
  for (;;) {
    // Lengths lean short, with the longest ones common enough to be met.
    const u = rng();
    const len = u < 0.15 ? max : 1 + Math.floor(rng() * Math.min(max, u < 0.6 ? 12 : max));
    let s = '';
    for (let i = 0; i < len; i++) {
      const first = i === 0;
      const last = i === len - 1;
      const pool = first && dns1035 ? 26 : first || last ? 36 : LABEL_CHARS.length;
      s += LABEL_CHARS[Math.floor(rng() * pool)];
    }
    if (!taken.has(s)) {
      taken.add(s);
      return s;
    }
  }
}

const pick = <T>(rng: () => number, xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)];

/**
 * randomEdgeCase builds a small-to-medium random cluster from a seed (the
 * same seed, the same cluster): 3 to 24 Services mixing types, traffic
 * policies, ClientIP affinity, source ranges (overlapping ones included),
 * external IPs, node ports, single- and dual-stack, endpoints ready, serving
 * and terminating, terminating and not serving, not ready, on four nodes in
 * three zones, topology hints on some, 1 to 4 ports of TCP, UDP and SCTP, and
 * names of random lengths up to the longest the API accepts.
 */
export function randomEdgeCase(seed: number): EdgeCase {
  const rng = mulberry32(seed);
  const node = EDGE_NODE;
  const families: IPFamily[] = pick(rng, [['IPv4'], ['IPv6'], ['IPv4', 'IPv6'], ['IPv4', 'IPv6']] as IPFamily[][]);
  const zones = ['zone-a', 'zone-b', 'zone-c'];
  const nodes = 4;
  const zoneOf = (k: number) => zones[k % zones.length];
  const objects: EdgeObject[] = [nodeObject({ name: node, families, zone: zoneOf(0) })];
  const namespaces = new Set<string>();
  const nsList = Array.from({ length: 1 + Math.floor(rng() * 3) }, () => randomLabel(rng, 63, namespaces, false));
  const names = new Map<string, Set<string>>();
  const podSlots = new Map<number, number>();
  let nextNodePort = NODE_PORT_BASE;
  let nextExternal = 0;
  let nextLB = 0;
  const services = 3 + Math.floor(rng() * 22);
  for (let i = 0; i < services; i++) {
    const namespace = pick(rng, nsList);
    if (!names.has(namespace)) names.set(namespace, new Set());
    const name = randomLabel(rng, 63, names.get(namespace)!);
    const u = rng();
    const type = u < 0.4 ? 'ClusterIP' : u < 0.7 ? 'NodePort' : 'LoadBalancer';
    const svcFamilies = families.length === 1 ? families : pick(rng, [['IPv4'], ['IPv6'], ['IPv4', 'IPv6'], ['IPv6', 'IPv4']] as IPFamily[][]);
    const dual = svcFamilies.length > 1;
    // A LoadBalancer takes TCP and UDP (the API refuses other protocols there); SCTP elsewhere, rarely.
    const protocols: PortSpec['protocol'][] = type === 'LoadBalancer' ? ['TCP', 'UDP'] : ['TCP', 'UDP', 'TCP', 'SCTP'];
    const portCount = rng() < 0.7 ? 1 : 2 + Math.floor(rng() * 3);
    const portNames = new Set<string>();
    const usedPorts = new Set<string>();
    const ports: PortSpec[] = [];
    while (ports.length < portCount) {
      const protocol = rng() < 0.2 ? pick(rng, protocols) : 'TCP';
      const port = rng() < 0.1 ? pick(rng, [1, 65535, 53, 443]) : 1 + Math.floor(rng() * 65535);
      if (usedPorts.has(`${protocol}/${port}`) || (type === 'LoadBalancer' && port === KUBELET_PORT)) continue;
      usedPorts.add(`${protocol}/${port}`);
      const portName = portCount === 1 && rng() < 0.3 ? '' : randomLabel(rng, 63, portNames, false);
      const nodePort = type === 'ClusterIP' ? undefined : nextNodePort++;
      ports.push({ name: portName, protocol, port, targetPort: 1 + Math.floor(rng() * 65535), ...(nodePort ? { nodePort } : {}) });
    }
    const external = type !== 'ClusterIP';
    const etp = external && rng() < 0.35 ? 'Local' : 'Cluster';
    const svc: ServiceSpec = {
      namespace,
      name,
      type,
      clusterIPs: svcFamilies.map((f) => clusterIP(f, i)),
      policy: dual ? pick(rng, ['PreferDualStack', 'RequireDualStack'] as const) : families.length > 1 && rng() < 0.3 ? 'PreferDualStack' : 'SingleStack',
      ports,
      externalIPs: rng() < 0.25 ? svcFamilies.flatMap((f) => Array.from({ length: 1 + Math.floor(rng() * 3) }, () => ipAt(EXTERNAL_IP_BASE, f, nextExternal++))) : [],
      lbIPs: type === 'LoadBalancer' ? svcFamilies.map((f) => ipAt(LB_IP_BASE, f, nextLB++)) : [],
      sourceRanges: type === 'LoadBalancer' && rng() < 0.6 ? svcFamilies.flatMap((f) => randomRanges(rng, f)) : [],
      etp,
      itp: rng() < 0.2 ? 'Local' : 'Cluster',
      affinitySeconds: rng() < 0.2 ? pick(rng, [1, 10800, 86400, 1 + Math.floor(rng() * 86400)]) : 0,
      healthCheckNodePort: type === 'LoadBalancer' && etp === 'Local' ? nextNodePort++ : 0,
      ...(rng() < 0.2 ? { trafficDistribution: 'PreferClose' as const } : {}),
    };
    const count = rng() < 0.1 ? 0 : Math.floor(rng() * (rng() < 0.8 ? 8 : 40)) + 1;
    const hinted = rng() < 0.25;
    const eps: EndpointSpec[] = [];
    for (let e = 0; e < count; e++) {
      const k = Math.floor(rng() * nodes);
      const slot = podSlots.get(k) ?? 0;
      podSlots.set(k, slot + 1);
      const v = rng();
      const cond = v < 0.65 ? [true, true, false] : v < 0.8 ? [false, true, true] : v < 0.9 ? [false, false, true] : [false, false, false];
      eps.push({
        ips: Object.fromEntries(svcFamilies.map((f) => [f, podIP(f, k, slot)])),
        node: nodeNameOf({ node }, k),
        zone: zoneOf(k),
        ready: cond[0],
        serving: cond[1],
        terminating: cond[2],
        // Hints as the EndpointSlice controller gives them: every endpoint, mostly its own zone.
        ...(hinted ? { forZones: [rng() < 0.8 ? zoneOf(k) : pick(rng, zones)] } : {}),
        pod: `${name.slice(0, 40)}-${e}`,
      });
    }
    objects.push(...serviceWithSlices(svc, eps, rng() < 0.5 ? SLICE_SIZE : 1 + Math.floor(rng() * 8)));
  }
  if (nextNodePort > NODE_PORT_MAX) throw new Error(`random case ${seed} ran out of node ports`);
  return {
    name: `random-seed-${seed}`,
    description: `random cluster ${seed}: ${services} Services, ${families.join('+')} node`,
    node,
    families,
    objects,
  };
}

/** randomRanges: 1 to 8 canonical ranges of a family, overlapping sometimes, now and then one holding the node's own address. */
function randomRanges(rng: () => number, f: IPFamily): string[] {
  const bits = f === 'IPv4' ? 32 : 128;
  const out = new Set<string>();
  const n = 1 + Math.floor(rng() * 8);
  for (let i = 0; i < n; i++) {
    if (rng() < 0.1) {
      out.add(parseCIDR(`${NODE_IPS[f]}/${f === 'IPv4' ? 16 : 64}`)!.text);
      continue;
    }
    const host = Math.floor(rng() * (f === 'IPv4' ? 12 : 40));
    const offset = BigInt(Math.floor(rng() * 4096)) << BigInt(Math.max(0, host - 4));
    out.add(parseCIDR(`${ipFromBigInt(RANGE_BASE[f] + offset, f)}/${bits - host}`)!.text);
  }
  return [...out];
}

/**
 * edgeSeeds: the random seeds to run, CI_SEEDS unless KPROXY_EDGE_SEEDS names
 * others: "1,2,3", a range "100-199", or both ("7,100-109").
 */
export function edgeSeeds(env: string | undefined = process.env.KPROXY_EDGE_SEEDS): number[] {
  if (!env?.trim()) return [...CI_SEEDS];
  const out: number[] = [];
  for (const part of env.split(',').map((p) => p.trim())) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) throw new Error(`KPROXY_EDGE_SEEDS: ${JSON.stringify(part)} is not a seed or a range of seeds (e.g. "1,2,3" or "100-199")`);
    const from = Number(m[1]);
    const to = m[2] === undefined ? from : Number(m[2]);
    for (let s = from; s <= to; s++) out.push(s);
  }
  return out;
}

// ------------------------------------------------------------- files

const SHARD = 1000;

/** writeEdgeCase writes a case as the folder the file source reads (--source file:DIR), emptied first: the Node alone, then JSON Lists of 1,000 objects. */
export function writeEdgeCase(c: EdgeCase, dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const nodes = c.objects.filter((o) => o.kind === 'Node');
  const rest = c.objects.filter((o) => o.kind !== 'Node');
  writeFileSync(join(dir, 'node.json'), JSON.stringify({ apiVersion: 'v1', kind: 'List', items: nodes }));
  for (let start = 0, shard = 0; start < rest.length; start += SHARD, shard++) {
    writeFileSync(join(dir, `objects-${String(shard).padStart(4, '0')}.json`), JSON.stringify({ apiVersion: 'v1', kind: 'List', items: rest.slice(start, start + SHARD) }));
  }
}

/** clusterCIDRs: the --cluster-cidr value for a case (its families' pod networks). */
export function clusterCIDRs(c: Pick<EdgeCase, 'families'>): string[] {
  return c.families.map((f) => EDGE_CLUSTER_CIDRS[f]);
}

/** nodeIPs: the case's node's InternalIPs (the addresses node ports answer on). */
export function nodeIPs(c: Pick<EdgeCase, 'families'>): string[] {
  return c.families.map((f) => NODE_IPS[f]);
}

export { expectations, podClientOf, type EdgeDestination, type EdgeExpectation, type EdgeFrom, type EdgeProto, type ExpectationOptions } from './edge-expectations.ts';

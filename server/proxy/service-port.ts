import { ServiceInvalidError } from '../errors.ts';
import { endpointIPProblem, objectIP, parseCIDR, type IPFamily } from '../net/ip.ts';
import { objectRef, type Service } from './kube-objects.ts';

export type Protocol = 'TCP' | 'UDP' | 'SCTP';
export const PROTOCOLS: readonly Protocol[] = ['TCP', 'UDP', 'SCTP'];

/** Default ClientIP affinity timeout, as the API server defaults it (3 hours). */
export const DEFAULT_STICKY_MAX_AGE_SECONDS = 10800;
/** Largest ClientIP affinity timeout the API server accepts (1 day). */
export const MAX_STICKY_MAX_AGE_SECONDS = 86400;

/** Size limits beyond which an object is "absurd" and refused rather than programmed. */
export const LIMITS = {
  nameLength: 253,
  labelLength: 63,
  portsPerService: 1024,
  ipsPerList: 1024,
  sourceRangesPerService: 4096,
};

/**
 * ServicePort is one port of one Service as a proxier sees it, for one IP family
 * (kube-proxy's BaseServicePortInfo). It is plain, immutable data.
 */
export interface ServicePort {
  /** id is unique per service port and protocol: "ns/name:port/TCP" (the maps' key). */
  readonly id: string;
  /** name is kube-proxy's ServicePortName.String(): "ns/name:port", or "ns/name" for an unnamed port. */
  readonly name: string;
  readonly namespace: string;
  readonly serviceName: string;
  /** service is "ns/name", the key changes are tracked by. */
  readonly service: string;
  readonly portName: string;
  readonly protocol: Protocol;
  readonly type: 'ClusterIP' | 'NodePort' | 'LoadBalancer';
  readonly clusterIP: string;
  readonly port: number;
  /** nodePort is 0 when the port has none. */
  readonly nodePort: number;
  readonly externalIPs: readonly string[];
  /** loadBalancerVIPs are the VIP-mode ingress IPs of this family (ipMode Proxy ones are left to the LB). */
  readonly loadBalancerVIPs: readonly string[];
  /** loadBalancerSourceRanges are canonical CIDR texts of this family. */
  readonly loadBalancerSourceRanges: readonly string[];
  /** stickyMaxAgeSeconds is 0 without ClientIP affinity. */
  readonly stickyMaxAgeSeconds: number;
  readonly externalPolicyLocal: boolean;
  readonly internalPolicyLocal: boolean;
  /** healthCheckNodePort is 0 unless the service needs a health check (LB + externalTrafficPolicy Local). */
  readonly healthCheckNodePort: number;
  /** trafficDistribution as set on the Service ("" when unset). */
  readonly trafficDistribution: string;
}

/** sessionAffinityClientIP reports whether the port has ClientIP session affinity. */
export function hasSessionAffinity(sp: ServicePort): boolean {
  return sp.stickyMaxAgeSeconds > 0;
}

/** externallyAccessible: reachable other than through the cluster IP (node port, external or LB IP). */
export function externallyAccessible(sp: ServicePort): boolean {
  return sp.nodePort !== 0 || sp.loadBalancerVIPs.length > 0 || sp.externalIPs.length > 0;
}

/** usesClusterEndpoints: the port ever sends traffic by "Cluster" policy (also for ETP Local short-circuits). */
export function usesClusterEndpoints(sp: ServicePort): boolean {
  return !sp.internalPolicyLocal || externallyAccessible(sp);
}

/** usesLocalEndpoints: the port ever sends traffic by "Local" policy. */
export function usesLocalEndpoints(sp: ServicePort): boolean {
  return sp.internalPolicyLocal || (sp.externalPolicyLocal && externallyAccessible(sp));
}

/** servicePortName renders kube-proxy's ServicePortName.String(). */
export function servicePortName(namespace: string, name: string, portName: string): string {
  return portName ? `${namespace}/${name}:${portName}` : `${namespace}/${name}`;
}

/** servicePortId is the map key of a service port: its name plus protocol. */
export function servicePortId(namespace: string, name: string, portName: string, protocol: Protocol): string {
  return `${servicePortName(namespace, name, portName)}/${protocol}`;
}

/** ServiceConversion is what one Service turns into for a proxier. */
export type ServiceConversion =
  | { kind: 'ports'; ports: ServicePort[] }
  /** ignored: not for this proxier (headless, ExternalName, other family, other proxy); not an error. */
  | { kind: 'ignored'; reason: string };

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

function isInt(v: unknown, min: number, max: number): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max;
}

/**
 * servicePortsFromService converts a Service into the ServicePorts of one IP
 * family, or explains why it is ignored. It throws ServiceInvalidError naming the
 * object and the bad field when the Service is malformed; callers skip it then.
 */
export function servicePortsFromService(svc: Service, family: IPFamily): ServiceConversion {
  const meta = svc?.metadata;
  const bad = (field: string, value: unknown, why: string): never => {
    let shown = JSON.stringify(value);
    if (shown !== undefined && shown.length > 80) shown = shown.slice(0, 77) + '...';
    throw new ServiceInvalidError(`${objectRef('Service', svc)}: ${field} ${shown ?? 'is missing'}: ${why}`);
  };
  // A Service name is a DNS label (DNS-1035, or DNS-1123 under RelaxedServiceNameValidation):
  // never a dot or a "/", so "ns/name" keys and the slices' service-name label stay unambiguous.
  if (typeof meta?.name !== 'string' || !DNS_LABEL.test(meta.name) || meta.name.length > LIMITS.labelLength) bad('metadata.name', meta?.name, 'must be a DNS label of at most 63 characters');
  if (typeof meta?.namespace !== 'string' || !DNS_LABEL.test(meta.namespace) || meta.namespace.length > LIMITS.labelLength)
    bad('metadata.namespace', meta?.namespace, 'must be a DNS label of at most 63 characters');
  const namespace = meta!.namespace!;
  const name = meta!.name!;
  if (meta?.labels?.['service.kubernetes.io/service-proxy-name'] !== undefined) return { kind: 'ignored', reason: 'it names another service proxy (service.kubernetes.io/service-proxy-name)' };
  if (meta?.labels?.['service.kubernetes.io/headless'] !== undefined) return { kind: 'ignored', reason: 'it is headless (service.kubernetes.io/headless)' };

  const spec = svc.spec;
  if (spec == null || typeof spec !== 'object') return bad('spec', spec, 'must be an object');
  const type = spec.type ?? 'ClusterIP';
  if (type === 'ExternalName') return { kind: 'ignored', reason: 'it is an ExternalName service' };
  if (type !== 'ClusterIP' && type !== 'NodePort' && type !== 'LoadBalancer') bad('spec.type', type, 'must be ClusterIP, NodePort, LoadBalancer or ExternalName');

  const clusterIPs: unknown[] = Array.isArray(spec.clusterIPs) && spec.clusterIPs.length > 0 ? spec.clusterIPs : [spec.clusterIP];
  if (clusterIPs[0] === 'None' || clusterIPs[0] === '' || clusterIPs[0] === undefined) return { kind: 'ignored', reason: 'it has no cluster IP (headless)' };
  if (clusterIPs.length > 2) bad('spec.clusterIPs', clusterIPs, 'may hold at most one address per family');
  const families: IPFamily[] = [];
  for (const [i, raw] of clusterIPs.entries()) {
    const parsed = objectIP(raw);
    if (parsed.ip === null) return bad(`spec.clusterIPs[${i}]`, raw, parsed.why);
    if (families.includes(parsed.family)) bad('spec.clusterIPs', clusterIPs, 'may hold at most one address per family (a dual-stack Service has one IPv4 and one IPv6)');
    families.push(parsed.family);
  }
  // ipFamilies names the family of each cluster IP, in order (kube-proxy's
  // GetClusterIPByFamily reads a family's cluster IP through it): a Service
  // whose ipFamilies disagree with its cluster IPs cannot be trusted either way.
  const ipFamilies = spec.ipFamilies;
  if (ipFamilies != null) {
    if (!Array.isArray(ipFamilies) || ipFamilies.length > 2) bad('spec.ipFamilies', ipFamilies, 'must list at most two families');
    for (const [i, f] of ipFamilies.entries()) {
      if (f !== 'IPv4' && f !== 'IPv6') bad(`spec.ipFamilies[${i}]`, f, 'must be IPv4 or IPv6');
      if (i < families.length && f !== families[i]) bad(`spec.ipFamilies[${i}]`, f, `does not match spec.clusterIPs[${i}] (${families[i]})`);
    }
    if (ipFamilies.length < families.length) bad('spec.ipFamilies', ipFamilies, `must name the family of each of the ${families.length} cluster IPs`);
  }
  const policy = spec.ipFamilyPolicy;
  if (policy != null && policy !== 'SingleStack' && policy !== 'PreferDualStack' && policy !== 'RequireDualStack')
    bad('spec.ipFamilyPolicy', policy, 'must be SingleStack, PreferDualStack or RequireDualStack');
  if (policy === 'SingleStack' && families.length > 1) bad('spec.clusterIPs', clusterIPs, 'must hold one address for ipFamilyPolicy SingleStack');
  if (policy === 'RequireDualStack' && families.length < 2) bad('spec.clusterIPs', clusterIPs, 'must hold an IPv4 and an IPv6 address for ipFamilyPolicy RequireDualStack');
  const familyIndex = families.indexOf(family);
  if (familyIndex < 0) return { kind: 'ignored', reason: `it has no ${family} cluster IP` };
  const clusterIP = objectIP(clusterIPs[familyIndex]).ip!;

  const ports = spec.ports;
  if (!Array.isArray(ports) || ports.length === 0) bad('spec.ports', ports, 'must list at least one port');
  if (ports!.length > LIMITS.portsPerService) bad('spec.ports', `${ports!.length} ports`, `at most ${LIMITS.portsPerService} are accepted`);

  const externalIPs = ipList(spec.externalIPs, 'spec.externalIPs', family, bad);
  const sourceRanges = cidrList(spec.loadBalancerSourceRanges, family, bad);
  const lbVIPs: string[] = [];
  if (type === 'LoadBalancer') {
    const ingress = svc.status?.loadBalancer?.ingress;
    if (ingress != null && !Array.isArray(ingress)) bad('status.loadBalancer.ingress', ingress, 'must be a list');
    for (const [i, ing] of (ingress ?? []).entries()) {
      if (ing?.ip === undefined || ing.ip === '') continue;
      const parsed = objectIP(ing.ip);
      if (parsed.ip === null) return bad(`status.loadBalancer.ingress[${i}].ip`, ing.ip, parsed.why);
      // ipMode Proxy means the load balancer delivers to the node with the LB IP
      // rewritten, so kube-proxy must not capture that IP itself.
      if (ing.ipMode === 'Proxy') continue;
      if (parsed.family === family && !lbVIPs.includes(parsed.ip)) lbVIPs.push(parsed.ip);
    }
  }

  let sticky = 0;
  if (spec.sessionAffinity === 'ClientIP') {
    const t = spec.sessionAffinityConfig?.clientIP?.timeoutSeconds ?? DEFAULT_STICKY_MAX_AGE_SECONDS;
    if (!isInt(t, 1, MAX_STICKY_MAX_AGE_SECONDS)) bad('spec.sessionAffinityConfig.clientIP.timeoutSeconds', t, `must be an integer from 1 to ${MAX_STICKY_MAX_AGE_SECONDS}`);
    sticky = t;
  } else if (spec.sessionAffinity !== undefined && spec.sessionAffinity !== 'None' && spec.sessionAffinity !== null) {
    bad('spec.sessionAffinity', spec.sessionAffinity, 'must be None or ClientIP');
  }

  for (const [field, v] of [
    ['spec.externalTrafficPolicy', spec.externalTrafficPolicy],
    ['spec.internalTrafficPolicy', spec.internalTrafficPolicy],
  ] as const) {
    if (v !== undefined && v !== null && v !== 'Cluster' && v !== 'Local') bad(field, v, 'must be Cluster or Local');
  }
  const externallyVisible = type === 'NodePort' || type === 'LoadBalancer' || (Array.isArray(spec.externalIPs) && spec.externalIPs.length > 0);
  const externalPolicyLocal = externallyVisible && spec.externalTrafficPolicy === 'Local';
  const internalPolicyLocal = spec.internalTrafficPolicy === 'Local';
  let healthCheckNodePort = 0;
  if (type === 'LoadBalancer' && externalPolicyLocal && spec.healthCheckNodePort !== undefined && spec.healthCheckNodePort !== 0) {
    if (!isInt(spec.healthCheckNodePort, 1, 65535)) bad('spec.healthCheckNodePort', spec.healthCheckNodePort, 'must be a port from 1 to 65535');
    healthCheckNodePort = spec.healthCheckNodePort!;
  }

  const out: ServicePort[] = [];
  const seenNames = new Set<string>();
  const seenPorts = new Set<string>();
  for (const [i, p] of ports!.entries()) {
    const at = `spec.ports[${i}]`;
    if (p == null || typeof p !== 'object') bad(at, p, 'must be an object');
    const portName = p.name ?? '';
    if (typeof portName !== 'string' || (portName !== '' && (!DNS_LABEL.test(portName) || portName.length > LIMITS.labelLength))) bad(`${at}.name`, portName, 'must be a DNS label');
    if (ports!.length > 1 && portName === '') bad(`${at}.name`, portName, 'is required when a service has several ports');
    if (seenNames.has(portName)) bad(`${at}.name`, portName, 'is used by another port of this service');
    seenNames.add(portName);
    const protocol = p.protocol ?? 'TCP';
    if (!PROTOCOLS.includes(protocol as Protocol)) bad(`${at}.protocol`, protocol, 'must be TCP, UDP or SCTP');
    if (!isInt(p.port, 1, 65535)) bad(`${at}.port`, p.port, 'must be a port from 1 to 65535');
    const portKey = `${p.port}/${protocol}`;
    if (seenPorts.has(portKey)) bad(`${at}.port`, portKey, 'is used by another port of this service');
    seenPorts.add(portKey);
    let nodePort = 0;
    if (p.nodePort !== undefined && p.nodePort !== null && p.nodePort !== 0) {
      if (!isInt(p.nodePort, 1, 65535)) bad(`${at}.nodePort`, p.nodePort, 'must be a port from 1 to 65535');
      if (type === 'NodePort' || type === 'LoadBalancer') nodePort = p.nodePort!;
    }
    out.push({
      id: servicePortId(namespace, name, portName, protocol as Protocol),
      name: servicePortName(namespace, name, portName),
      namespace,
      serviceName: name,
      service: `${namespace}/${name}`,
      portName,
      protocol: protocol as Protocol,
      type: type as ServicePort['type'],
      clusterIP,
      port: p.port!,
      nodePort,
      externalIPs,
      loadBalancerVIPs: lbVIPs,
      loadBalancerSourceRanges: sourceRanges,
      stickyMaxAgeSeconds: sticky,
      externalPolicyLocal,
      internalPolicyLocal,
      healthCheckNodePort,
      trafficDistribution: typeof spec.trafficDistribution === 'string' ? spec.trafficDistribution : '',
    });
  }
  return { kind: 'ports', ports: out };
}

type Bad = (field: string, value: unknown, why: string) => never;

function ipList(list: unknown, field: string, family: IPFamily, bad: Bad): string[] {
  if (list == null) return [];
  if (!Array.isArray(list)) return bad(field, list, 'must be a list of IP addresses');
  if (list.length > LIMITS.ipsPerList) bad(field, `${list.length} addresses`, `at most ${LIMITS.ipsPerList} are accepted`);
  const out: string[] = [];
  for (const [i, raw] of list.entries()) {
    const parsed = objectIP(raw);
    if (parsed.ip === null) return bad(`${field}[${i}]`, raw, parsed.why);
    // The API server refuses these in externalIPs (ValidateEndpointIP): a
    // Service must not capture the node's loopback, link-local or wildcard
    // traffic. Checked in the tracker for every source (see sliceInfoFromEndpointSlice).
    const special = endpointIPProblem(parsed.ip);
    if (special !== null) bad(`${field}[${i}]`, raw, special);
    if (parsed.family === family && !out.includes(parsed.ip)) out.push(parsed.ip);
  }
  return out;
}

/**
 * cidrList reads the source ranges of one family. The limit is per family
 * (each family's proxier programs its own): a dual-stack load balancer may
 * list 4,096 IPv4 and 4,096 IPv6 ranges.
 */
function cidrList(list: unknown, family: IPFamily, bad: Bad): string[] {
  const field = 'spec.loadBalancerSourceRanges';
  const max = LIMITS.sourceRangesPerService;
  if (list == null) return [];
  if (!Array.isArray(list)) return bad(field, list, 'must be a list of CIDRs');
  if (list.length > 2 * max) bad(field, `${list.length} ranges`, `at most ${max} per IP family are accepted`);
  // A set, not a scan of the list so far: 4,096 ranges took 8 million comparisons per family.
  const out = new Set<string>();
  const counts = { IPv4: 0, IPv6: 0 };
  for (const [i, raw] of list.entries()) {
    // The API server's validation tolerates whitespace around source ranges.
    const cidr = parseCIDR(typeof raw === 'string' ? raw.trim() : raw);
    if (!cidr) bad(`${field}[${i}]`, raw, 'is not a CIDR');
    if (++counts[cidr!.family] > max) bad(field, `more than ${max} ${cidr!.family} ranges`, `at most ${max} per IP family are accepted`);
    if (cidr!.family === family) out.add(cidr!.text);
  }
  return [...out];
}

/** sameServicePort compares two ServicePorts field by field (change detection). */
export function sameServicePort(a: ServicePort, b: ServicePort): boolean {
  if (a === b) return true;
  for (const key of Object.keys(a) as (keyof ServicePort)[]) {
    const x = a[key];
    const y = b[key];
    if (Array.isArray(x) && Array.isArray(y)) {
      if (x.length !== y.length || x.some((v, i) => v !== y[i])) return false;
    } else if (x !== y) return false;
  }
  return true;
}

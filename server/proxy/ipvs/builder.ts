import { RuleBuildError } from '../../errors.ts';
import { realServerKey, virtualServerKey, type IpvsProtocol, type IpvsRealServer, type IpvsVirtualServer } from '../../kernel/ipvs-batch.ts';
import type { Endpoint } from '../endpoint.ts';
import { canonicalIP, cidrContains, parseCIDR, type IPFamily } from '../../net/ip.ts';
import { hasSessionAffinity, type ServicePort } from '../service-port.ts';
import { validateServicePort } from '../service-port-validation.ts';
import { categorizeEndpoints } from '../topology.ts';
import type { SetKey } from './names.ts';

/**
 * The pure half of IPVS mode: one service port and its endpoints in, the
 * virtual servers, ipset entries and service addresses it needs out, as
 * kube-proxy's syncProxyRules computes them (pkg/proxy/ipvs/proxier.go). No I/O.
 */

/** IpvsContext is everything global a service port's objects depend on. */
export interface IpvsContext {
  readonly family: IPFamily;
  readonly nodeName: string;
  readonly zone: string;
  /** scheduler: the IPVS scheduler of every virtual server (validated: rr, lc, mh...). */
  readonly scheduler: string;
  /** nodePortIPs: addresses node ports answer on (one virtual server each); none skips node ports. */
  readonly nodePortIPs: readonly string[];
  /** nodeAddresses: every local address not on kube-ipvs0; external and LB IPs among them are not bound again. */
  readonly nodeAddresses: readonly string[];
  /** nodeIP: the node's primary IP (an LB source range containing it lets the node reach the LB IP). */
  readonly nodeIP: string | null;
}

/** ipvsContextKey: when it differs from the last sync's, every service port is rebuilt (a full sync). */
export function ipvsContextKey(ctx: IpvsContext): string {
  return JSON.stringify(ctx);
}

/** WantedVirtualServer is a virtual server with the real servers it must have. */
export interface WantedVirtualServer {
  readonly vs: IpvsVirtualServer;
  readonly key: string;
  readonly reals: ReadonlyMap<string, IpvsRealServer>;
  /** role says which service address this is, for logs and the dashboard. */
  readonly role: 'cluster IP' | 'external IP' | 'load balancer IP' | 'node port';
}

/** OutFilterEntry is an LB IP:port the node itself must not reach (its source ranges leave the node out). */
export interface OutFilterEntry {
  readonly ip: string;
  readonly protocol: string;
  readonly port: number;
}

/** ServicePortObjects is the cached output for one service port. */
export interface ServicePortObjects {
  readonly id: string;
  readonly service: string;
  readonly virtualServers: readonly WantedVirtualServer[];
  /** entries: ipset entries in canonical form, per set. */
  readonly entries: ReadonlyMap<SetKey, readonly string[]>;
  /** binds: addresses to hold on kube-ipvs0. */
  readonly binds: readonly string[];
  readonly outFilter: readonly OutFilterEntry[];
  /** noLocalInternal/External: a Local policy had to fall back to cluster-wide endpoints. */
  readonly noLocalInternal: boolean;
  readonly noLocalExternal: boolean;
}

function checkEndpoint(ep: Endpoint, family: IPFamily): void {
  const ip = canonicalIP(ep.ip);
  if (ip === null || ip !== ep.ip || (family === 'IPv6') !== ip.includes(':')) throw new RuleBuildError(`endpoint IP ${JSON.stringify(ep.ip)} is not a canonical ${family} address`);
  if (!Number.isInteger(ep.port) || ep.port < 1 || ep.port > 65535) throw new RuleBuildError(`endpoint port ${ep.port} is not a port`);
}

/**
 * buildServicePortObjects computes one service port's IPVS objects. Throws
 * RuleBuildError when a value cannot be programmed safely; the proxier then
 * skips this service port and programs every other one.
 */
export function buildServicePortObjects(sp: ServicePort, endpoints: readonly Endpoint[] | undefined, ctx: IpvsContext): ServicePortObjects {
  validateServicePort(sp, ctx.family);
  for (const ep of endpoints ?? []) checkEndpoint(ep, ctx.family);
  const protocol = sp.protocol as IpvsProtocol;
  const proto = sp.protocol.toLowerCase();
  const entries = new Map<SetKey, string[]>();
  const add = (set: SetKey, entry: string) => {
    const list = entries.get(set);
    if (list) list.push(entry);
    else entries.set(set, [entry]);
  };
  const virtualServers: WantedVirtualServer[] = [];
  const binds: string[] = [];
  const outFilter: OutFilterEntry[] = [];
  const nodeAddresses = new Set(ctx.nodeAddresses);

  const { cluster, local, hasAny } = categorizeEndpoints(endpoints, sp, ctx.nodeName, ctx.zone);
  let noLocalInternal = false;
  let noLocalExternal = false;
  // kube-proxy's syncEndpoint: a Local policy uses this node's endpoints and, when
  // there are none, falls back to the cluster-wide ones so pods can still reach
  // the service (kubernetes#97081); replies to outside clients are then lost.
  const realsFor = (onlyLocal: boolean): Map<string, IpvsRealServer> => {
    let eps = cluster;
    if (onlyLocal) {
      if (local.length > 0) eps = local;
      else if (hasAny) {
        if (sp.internalPolicyLocal) noLocalInternal = true;
        if (sp.externalPolicyLocal) noLocalExternal = true;
      }
    }
    const out = new Map<string, IpvsRealServer>();
    for (const ep of eps) out.set(realServerKey({ address: ep.ip, port: ep.port }), { address: ep.ip, port: ep.port, weight: 1, forward: 'masq' });
    return out;
  };
  const virtualServer = (address: string, port: number): IpvsVirtualServer => ({
    protocol,
    address,
    port,
    scheduler: ctx.scheduler,
    // ClientIP affinity is IPVS persistence with the affinity timeout.
    persistence: hasSessionAffinity(sp) ? sp.stickyMaxAgeSeconds : 0,
    // The mh scheduler hashes the source port too (kube-proxy's FlagSourceHash).
    schedFlags: ctx.scheduler === 'mh' ? ['mh-port'] : [],
  });
  const wanted = (role: WantedVirtualServer['role'], address: string, port: number, onlyLocal: boolean) => {
    const vs = virtualServer(address, port);
    virtualServers.push({ vs, key: virtualServerKey(vs), reals: realsFor(onlyLocal), role });
  };

  // Hairpin: a local endpoint reaching itself through the service is masqueraded.
  for (const ep of endpoints ?? []) if (ep.isLocal) add('loopBack', `${ep.ip},${proto}:${ep.port},${ep.ip}`);

  add('clusterIP', `${sp.clusterIP},${proto}:${sp.port}`);
  wanted('cluster IP', sp.clusterIP, sp.port, sp.internalPolicyLocal);
  binds.push(sp.clusterIP);

  for (const ip of sp.externalIPs) {
    add(sp.externalPolicyLocal ? 'externalIPLocal' : 'externalIP', `${ip},${proto}:${sp.port}`);
    wanted('external IP', ip, sp.port, sp.externalPolicyLocal);
    // An address the node already has elsewhere must not be bound to kube-ipvs0 too.
    if (!nodeAddresses.has(ip)) binds.push(ip);
  }

  for (const ip of sp.loadBalancerVIPs) {
    const entry = `${ip},${proto}:${sp.port}`;
    add('loadBalancer', entry);
    if (sp.externalPolicyLocal) add('loadBalancerLocal', entry);
    if (sp.loadBalancerSourceRanges.length > 0) {
      // Source ranges only filter traffic the LB delivers with the client's address (not via node ports).
      add('loadBalancerFW', entry);
      let allowFromNode = false;
      for (const cidr of sp.loadBalancerSourceRanges) {
        add('loadBalancerSourceCIDR', `${entry},${cidr}`);
        if (ctx.nodeIP && cidrContains(parseCIDR(cidr)!, ctx.nodeIP)) allowFromNode = true;
      }
      // The node's own requests to a VIP-mode LB IP arrive with the LB IP as source.
      if (allowFromNode) add('loadBalancerSourceIP', `${entry},${ip}`);
      else outFilter.push({ ip, protocol: proto, port: sp.port });
    }
    wanted('load balancer IP', ip, sp.port, sp.externalPolicyLocal);
    if (!nodeAddresses.has(ip)) binds.push(ip);
  }

  if (sp.nodePort !== 0 && ctx.nodePortIPs.length > 0) {
    const local = sp.externalPolicyLocal;
    if (protocol === 'SCTP') {
      // SCTP node ports are kept per node IP (hash:ip,port): bitmap:port has no protocol of its own.
      for (const ip of ctx.nodePortIPs) {
        add('nodePortSCTP', `${ip},sctp:${sp.nodePort}`);
        if (local) add('nodePortLocalSCTP', `${ip},sctp:${sp.nodePort}`);
      }
    } else {
      add(protocol === 'TCP' ? 'nodePortTCP' : 'nodePortUDP', String(sp.nodePort));
      if (local) add(protocol === 'TCP' ? 'nodePortLocalTCP' : 'nodePortLocalUDP', String(sp.nodePort));
    }
    for (const ip of ctx.nodePortIPs) wanted('node port', ip, sp.nodePort, local);
  }

  if (sp.healthCheckNodePort !== 0) add('healthCheckNodePort', String(sp.healthCheckNodePort));

  return { id: sp.id, service: sp.service, virtualServers, entries, binds, outFilter, noLocalInternal, noLocalExternal };
}

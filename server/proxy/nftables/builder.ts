import { RuleBuildError } from '../../errors.ts';
import type { NftBaseChain, NftFamily, NftSetSpec } from '../../kernel/nft-types.ts';
import { endpointKey, type Endpoint } from '../endpoint.ts';
import { cidrContains, isLoopbackIP, parseCIDR, type IPFamily } from '../../net/ip.ts';
import type { LocalDetector } from '../local-detector.ts';
import { externallyAccessible, hasSessionAffinity, type ServicePort } from '../service-port.ts';
import { validateServicePort } from '../service-port-validation.ts';
import { categorizeEndpoints } from '../topology.ts';
import { trafficPolicyChains } from '../traffic-policy.ts';
import { mergeAddresses } from './intervals.ts';
import * as N from './names.ts';

/**
 * The pure half of the nftables backend: node facts in, the fixed objects of
 * the `kube-proxy` table out; a service port and its endpoints in, its chains,
 * affinity sets and map elements out. Object for object what kube-proxy's
 * nftables proxier writes (pkg/proxy/nftables/proxier.go, setupNFTables and
 * syncProxyRules); rules are text in the form nft lists them back, so the
 * kernel's listing and what kproxy wants compare as equal strings. No I/O,
 * no clock.
 */

/** NftBuildContext is everything global the objects depend on; when it changes, a full sync follows. */
export interface NftBuildContext {
  readonly family: IPFamily;
  readonly nodeName: string;
  readonly zone: string;
  /** masqueradeMark: "0x00004000" (Go's "%#08x" of 1 << masqueradeBit). */
  readonly masqueradeMark: string;
  readonly masqueradeAll: boolean;
  readonly localDetector: LocalDetector;
  /** nodePortsMatchAll: node ports on every local address (fib daddr type local); else on nodePortIPs. */
  readonly nodePortsMatchAll: boolean;
  readonly nodePortIPs: readonly string[];
  /** nodeIP: the node's primary IP (a source range holding it also admits the LB IPs as sources). */
  readonly nodeIP: string | null;
  /** serviceCIDRs: the ServiceCIDRs of this family; traffic to an unallocated address in them is dropped. */
  readonly serviceCIDRs: readonly string[];
}

/** nftFamilyOf: the table family of an IP family. */
export function nftFamilyOf(family: IPFamily): NftFamily {
  return family === 'IPv6' ? 'ip6' : 'ip';
}

/** ChainSpec is a chain as kproxy wants it: its name, base hook if any, and rules in order. */
export interface ChainSpec {
  readonly name: string;
  readonly base?: NftBaseChain;
  readonly comment?: string;
  readonly rules: readonly string[];
}

/** WantedElement is one element a service port puts in a shared set or map. */
export interface WantedElement {
  readonly set: N.ElementSet;
  readonly key: string;
  /** value: the verdict of a map element ("goto service-…", "drop"); null in a set. */
  readonly value: string | null;
  readonly comment: string | null;
}

/** FixedObjects: the chains, sets and static elements every node has. */
export interface FixedObjects {
  readonly chains: readonly ChainSpec[];
  readonly sets: readonly NftSetSpec[];
  /** nodePortIPs: the elements of nodeport-ips (only when that set exists). */
  readonly nodePortIPs: readonly string[];
  readonly warnings: readonly string[];
}

/** ServicePortObjects: what one service port owns in the table. */
export interface ServicePortObjects {
  readonly id: string;
  readonly service: string;
  readonly chains: readonly ChainSpec[];
  readonly affinitySets: readonly NftSetSpec[];
  readonly elements: readonly WantedElement[];
  /** noLocalInternal/External: kube-proxy's sync_proxy_rules_no_local_endpoints_total inputs. */
  readonly noLocalInternal: boolean;
  readonly noLocalExternal: boolean;
}

// Base chains (pkg/proxy/nftables nftablesBaseChains): filtering that must see the
// service address runs before DNAT (dstnat - 10 = -110); the endpoint and cluster IP
// checks run at filter priority (0), after DNAT, so only traffic that was not DNATed
// (no endpoints, unknown port, unallocated IP) reaches them. Numbers, not "dstnat":
// nft 1.0.6 refuses that keyword on the output hook.
const DNAT_PRIORITY = -100;
const SNAT_PRIORITY = 100;
const FILTER_PRIORITY = 0;
export const BASE_CHAINS: readonly { name: string; base: NftBaseChain }[] = [
  { name: N.FILTER_PREROUTING_PRE_DNAT, base: { type: 'filter', hook: 'prerouting', priority: DNAT_PRIORITY - 10 } },
  { name: N.FILTER_OUTPUT_PRE_DNAT, base: { type: 'filter', hook: 'output', priority: DNAT_PRIORITY - 10 } },
  { name: N.FILTER_INPUT, base: { type: 'filter', hook: 'input', priority: FILTER_PRIORITY } },
  { name: N.FILTER_FORWARD, base: { type: 'filter', hook: 'forward', priority: FILTER_PRIORITY } },
  { name: N.FILTER_OUTPUT, base: { type: 'filter', hook: 'output', priority: FILTER_PRIORITY } },
  { name: N.NAT_PREROUTING, base: { type: 'nat', hook: 'prerouting', priority: DNAT_PRIORITY } },
  { name: N.NAT_OUTPUT, base: { type: 'nat', hook: 'output', priority: DNAT_PRIORITY } },
  { name: N.NAT_POSTROUTING, base: { type: 'nat', hook: 'postrouting', priority: SNAT_PRIORITY } },
];

/**
 * JUMPS are the rules of the base chains, in kube-proxy's order: reject only
 * works from the input, forward and output hooks (before Linux 5.9), so the
 * endpoint checks hang there; the firewall check sees the address before DNAT.
 */
const JUMPS: Readonly<Record<string, readonly string[]>> = {
  [N.FILTER_PREROUTING_PRE_DNAT]: [`ct state new jump ${N.FIREWALL_CHECK}`],
  [N.FILTER_OUTPUT_PRE_DNAT]: [`ct state new jump ${N.FIREWALL_CHECK}`],
  [N.FILTER_INPUT]: [`ct state new jump ${N.NODEPORT_ENDPOINTS_CHECK}`, `ct state new jump ${N.SERVICE_ENDPOINTS_CHECK}`],
  [N.FILTER_FORWARD]: [`ct state new jump ${N.SERVICE_ENDPOINTS_CHECK}`, `ct state new jump ${N.CLUSTER_IPS_CHECK}`],
  [N.FILTER_OUTPUT]: [`ct state new jump ${N.SERVICE_ENDPOINTS_CHECK}`, `ct state new jump ${N.CLUSTER_IPS_CHECK}`],
  [N.NAT_PREROUTING]: [`jump ${N.SERVICES}`],
  [N.NAT_OUTPUT]: [`jump ${N.SERVICES}`],
  [N.NAT_POSTROUTING]: [`jump ${N.MASQUERADING}`],
};

const REJECT_CHAIN_COMMENT = 'helper for @no-endpoint-services / @no-endpoint-nodeports';

function addrType(family: IPFamily): string {
  return family === 'IPv6' ? 'ipv6_addr' : 'ipv4_addr';
}

function ipX(family: IPFamily): string {
  return family === 'IPv6' ? 'ip6' : 'ip';
}

/**
 * addressMatch writes a merged address list as nft lists it back: nft loads a
 * one-element anonymous set as a plain match ("ip saddr != 10.0.0.0/8"), so
 * one element is written without braces (kube-proxy writes "{ X }").
 */
function addressMatch(merged: readonly string[], negate: boolean): string {
  const op = negate ? '!= ' : '';
  return merged.length === 1 ? `${op}${merged[0]}` : `${op}{ ${merged.join(' , ')} }`;
}

/**
 * buildFixedObjects writes the table's fixed chains and sets for a context
 * (setupNFTables): base chains and their jumps, dispatch through the
 * service-ips and service-nodeports verdict maps, the no-endpoint, firewall
 * and cluster IP checks, and masquerading by mark.
 */
export function buildFixedObjects(ctx: NftBuildContext): FixedObjects {
  const ip = ipX(ctx.family);
  const addr = addrType(ctx.family);
  const noLocalhost = ctx.family === 'IPv6' ? 'ip6 daddr != ::1' : 'ip daddr != 127.0.0.0/8';
  const mark = ctx.masqueradeMark;
  const warnings: string[] = [];
  const nodePortIPs: string[] = [];
  if (!ctx.nodePortsMatchAll) {
    for (const a of ctx.nodePortIPs) {
      // As kube-proxy: nftables mode never accepts node ports on localhost.
      if (isLoopbackIP(a)) warnings.push(`--nodeport-addresses includes localhost (${a}) but localhost NodePorts are not supported in nftables mode`);
      else nodePortIPs.push(a);
    }
  }
  const chains: ChainSpec[] = BASE_CHAINS.map((b) => ({ name: b.name, base: b.base, rules: JUMPS[b.name] }));
  const clusterIPsCheck = [`${ip} daddr @${N.CLUSTER_IPS} reject comment "Reject traffic to invalid ports of ClusterIPs"`];
  const cidrs = mergeAddresses(ctx.serviceCIDRs, ctx.family);
  if (cidrs.length) clusterIPsCheck.push(`${ip} daddr ${addressMatch(cidrs, false)} drop comment "Drop traffic to unallocated ClusterIPs"`);
  const nodePortMatch = ctx.nodePortsMatchAll ? noLocalhost : `${ip} daddr @${N.NODEPORT_IPS}`;
  chains.push(
    {
      name: N.SERVICES,
      rules: [
        `${ip} daddr . meta l4proto . th dport vmap @${N.SERVICE_IPS}`,
        `${ctx.nodePortsMatchAll ? `fib daddr type local ${noLocalhost}` : nodePortMatch} meta l4proto . th dport vmap @${N.SERVICE_NODEPORTS}`,
      ],
    },
    { name: N.SERVICE_ENDPOINTS_CHECK, rules: [`${ip} daddr . meta l4proto . th dport vmap @${N.NO_ENDPOINT_SERVICES}`] },
    { name: N.NODEPORT_ENDPOINTS_CHECK, rules: [`${nodePortMatch} meta l4proto . th dport vmap @${N.NO_ENDPOINT_NODEPORTS}`] },
    { name: N.REJECT_CHAIN, comment: REJECT_CHAIN_COMMENT, rules: ['reject'] },
    { name: N.CLUSTER_IPS_CHECK, rules: clusterIPsCheck },
    { name: N.FIREWALL_CHECK, rules: [`${ip} daddr . meta l4proto . th dport vmap @${N.FIREWALL_IPS}`] },
    { name: N.MARK_FOR_MASQUERADE, rules: [`mark set mark or ${mark}`] },
    { name: N.MASQUERADING, rules: [`mark and ${mark} == 0 return`, `mark set mark xor ${mark}`, 'masquerade fully-random'] },
  );
  const svcKey = `${addr} . inet_proto . inet_service`;
  const sets: NftSetSpec[] = [
    { name: N.CLUSTER_IPS, map: false, type: addr, comment: 'Active ClusterIPs' },
    ...(ctx.nodePortsMatchAll ? [] : [{ name: N.NODEPORT_IPS, map: false, type: addr, comment: 'IPs that accept NodePort traffic' }]),
    { name: N.FIREWALL_IPS, map: true, type: svcKey, comment: 'destinations that are subject to LoadBalancerSourceRanges' },
    { name: N.NO_ENDPOINT_NODEPORTS, map: true, type: 'inet_proto . inet_service', comment: 'vmap to drop or reject packets to service nodeports with no endpoints' },
    { name: N.NO_ENDPOINT_SERVICES, map: true, type: svcKey, comment: 'vmap to drop or reject packets to services with no endpoints' },
    { name: N.SERVICE_IPS, map: true, type: svcKey, comment: 'ClusterIP, ExternalIP and LoadBalancer IP traffic' },
    { name: N.SERVICE_NODEPORTS, map: true, type: 'inet_proto . inet_service', comment: 'NodePort traffic' },
  ];
  return { chains, sets, nodePortIPs, warnings };
}

const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;

function validateEndpoint(ep: Endpoint, family: IPFamily): void {
  const ok = family === 'IPv4' ? IPV4.test(ep.ip) : ep.ip.includes(':') && !/[^0-9a-f:.]/i.test(ep.ip);
  if (!ok) throw new RuleBuildError(`endpoint IP ${JSON.stringify(ep.ip)} is not a canonical ${family} address`);
  if (!Number.isInteger(ep.port) || ep.port < 1 || ep.port > 65535) throw new RuleBuildError(`endpoint port ${ep.port} is not a port`);
  if (ep.key !== endpointKey(ep.ip, ep.port)) throw new RuleBuildError(`endpoint key ${JSON.stringify(ep.key)} does not match ${ep.ip}:${ep.port}`);
}

/**
 * buildServicePortObjects writes one service port's chains, affinity sets and
 * map elements. It throws RuleBuildError when a value cannot be written
 * safely; the caller skips that port and programs every other one.
 */
export function buildServicePortObjects(sp: ServicePort, endpoints: readonly Endpoint[] | undefined, ctx: NftBuildContext): ServicePortObjects {
  validateServicePort(sp, ctx.family);
  for (const ep of endpoints ?? []) validateEndpoint(ep, ctx.family);
  const ip = ipX(ctx.family);
  const protocol = sp.protocol.toLowerCase();
  const name = sp.name;
  const names = N.servicePortNames(sp.namespace, sp.serviceName, protocol, sp.portName);
  const { cluster, local, allReachable, hasAny } = categorizeEndpoints(endpoints, sp, ctx.nodeName, ctx.zone);
  const affinity = hasSessionAffinity(sp);

  const epBase = new Map<string, string>();
  const baseOf = (ep: Endpoint): string => {
    let b = epBase.get(ep.key);
    if (b === undefined) {
      b = N.endpointNameBase(sp.namespace, sp.serviceName, protocol, sp.portName, ep.key);
      epBase.set(ep.key, b);
    }
    return b;
  };

  const {
    usesClusterPolicyChain,
    usesLocalPolicyChain,
    internalPolicyChain: internalTrafficChain,
    hasInternalEndpoints,
    externalPolicyChain,
    hasExternalEndpoints,
  } = trafficPolicyChains(sp, { cluster, local, hasAny }, { cluster: names.clusterPolicy, local: names.localPolicy });
  // The external chain exists whenever there are endpoints anywhere: its short-circuit rules still serve pods and the node.
  const usesExternalTrafficChain = hasAny && externallyAccessible(sp);
  const usesFWChain = sp.loadBalancerVIPs.length > 0 && sp.loadBalancerSourceRanges.length > 0;

  let internalVerdict = '';
  let externalVerdict = '';
  let noLocalInternal = false;
  let noLocalExternal = false;
  if (!hasAny) {
    internalVerdict = externalVerdict = `goto ${N.REJECT_CHAIN}`;
  } else {
    if (!hasInternalEndpoints) {
      internalVerdict = 'drop';
      noLocalInternal = true;
    }
    if (!hasExternalEndpoints) {
      externalVerdict = 'drop';
      noLocalExternal = true;
    }
  }

  const elements: WantedElement[] = [];
  const el = (set: N.ElementSet, key: string, value: string | null, comment: string | null = null) => elements.push({ set, key, value, comment: comment === null ? null : N.elementComment(comment) });
  const port = String(sp.port);
  const dest = (addr: string) => `${addr} . ${protocol} . ${port}`;
  el(N.CLUSTER_IPS, sp.clusterIP, null);
  if (hasInternalEndpoints) el(N.SERVICE_IPS, dest(sp.clusterIP), `goto ${internalTrafficChain}`);
  else el(N.NO_ENDPOINT_SERVICES, dest(sp.clusterIP), internalVerdict, name);
  for (const ext of sp.externalIPs) {
    if (hasAny) el(N.SERVICE_IPS, dest(ext), `goto ${names.external}`);
    if (!hasExternalEndpoints) el(N.NO_ENDPOINT_SERVICES, dest(ext), externalVerdict, name);
  }
  for (const lb of sp.loadBalancerVIPs) {
    if (hasAny) el(N.SERVICE_IPS, dest(lb), `goto ${names.external}`);
    if (usesFWChain) el(N.FIREWALL_IPS, dest(lb), `goto ${names.firewall}`);
  }
  if (!hasExternalEndpoints) for (const lb of sp.loadBalancerVIPs) el(N.NO_ENDPOINT_SERVICES, dest(lb), externalVerdict, name);
  if (sp.nodePort !== 0) {
    // Node ports are not subject to loadBalancerSourceRanges (kube-proxy cannot change that).
    const key = `${protocol} . ${sp.nodePort}`;
    if (hasAny) el(N.SERVICE_NODEPORTS, key, `goto ${names.external}`);
    if (!hasExternalEndpoints) el(N.NO_ENDPOINT_NODEPORTS, key, externalVerdict, name);
  }

  const chains = new Map<string, string[]>();
  const chain = (n: string) => {
    let rules = chains.get(n);
    if (!rules) chains.set(n, (rules = []));
    return rules;
  };
  const masq = `jump ${N.MARK_FOR_MASQUERADE}`;
  if (usesClusterPolicyChain) chain(names.clusterPolicy);
  if (usesLocalPolicyChain) chain(names.localPolicy);
  if (usesExternalTrafficChain) chain(names.external);
  if (usesFWChain) chain(names.firewall);

  // Internal traffic: masquerade what does not come from a local pod (or everything with masqueradeAll).
  if (hasInternalEndpoints) {
    if (ctx.masqueradeAll) chain(internalTrafficChain).push(`${ip} daddr ${sp.clusterIP} ${masq}`);
    else if (ctx.localDetector.implemented) chain(internalTrafficChain).push(`${ip} daddr ${sp.clusterIP} ${ctx.localDetector.ifNotLocalNFT.join(' ')} ${masq}`);
  }

  // External traffic: node ports, external and LB IPs all enter through the external chain.
  if (usesExternalTrafficChain) {
    const ext = chain(names.external);
    if (!sp.externalPolicyLocal) {
      // Endpoints may be on another node: masquerade so replies come back through this one.
      ext.push(masq);
    } else {
      // Pod to external IP skips both policies, as if it went out to the LB and back in.
      if (ctx.localDetector.implemented) ext.push(`${ctx.localDetector.ifLocalNFT.join(' ')} goto ${names.clusterPolicy} comment "short-circuit pod traffic"`);
      // The node's own traffic has a local source address: masquerade it and use Cluster policy.
      ext.push(`fib saddr type local ${masq} comment "masquerade local traffic"`);
      ext.push(`fib saddr type local goto ${names.clusterPolicy} comment "short-circuit local traffic"`);
    }
    if (hasExternalEndpoints) ext.push(`goto ${externalPolicyChain}`);
  }

  if (usesFWChain) {
    const sources = [...sp.loadBalancerSourceRanges];
    // A VIP-mode LB IP is often local to the node: its own requests then come from the LB IP.
    if (ctx.nodeIP && sp.loadBalancerSourceRanges.some((c) => cidrContains(parseCIDR(c)!, ctx.nodeIP!))) sources.push(...sp.loadBalancerVIPs);
    chain(names.firewall).push(`${ip} saddr ${addressMatch(mergeAddresses(sources, ctx.family), true)} drop`);
  }

  const affinitySets: NftSetSpec[] = [];
  if (affinity) {
    // Affinity is per client IP (any source port) and per service port (whichever service IP was used).
    for (const ep of allReachable) {
      affinitySets.push({ name: N.AFFINITY_PREFIX + baseOf(ep), map: false, type: addrType(ctx.family), flags: ['dynamic', 'timeout'], timeoutSeconds: sp.stickyMaxAgeSeconds });
    }
  }
  const balance = (svcChain: string, eps: readonly Endpoint[]) => {
    const rules = chain(svcChain);
    if (affinity) for (const ep of eps) rules.push(`${ip} saddr @${N.AFFINITY_PREFIX}${baseOf(ep)} goto ${N.ENDPOINT_PREFIX}${baseOf(ep)}`);
    const vmap = eps.map((ep, i) => `${i} : goto ${N.ENDPOINT_PREFIX}${baseOf(ep)}`).join(' , ');
    rules.push(`numgen random mod ${eps.length} vmap { ${vmap} }`);
  };
  if (usesClusterPolicyChain) balance(names.clusterPolicy, cluster);
  if (usesLocalPolicyChain) balance(names.localPolicy, local);

  // One chain per endpoint: hairpin masquerade (a pod reaching itself through the service), affinity, DNAT.
  for (const ep of allReachable) {
    const rules = chain(N.ENDPOINT_PREFIX + baseOf(ep));
    rules.push(`${ip} saddr ${ep.ip} ${masq}`);
    if (affinity) rules.push(`update @${N.AFFINITY_PREFIX}${baseOf(ep)} { ${ip} saddr }`);
    rules.push(`meta l4proto ${protocol} dnat to ${ctx.family === 'IPv6' ? `[${ep.ip}]:${ep.port}` : ep.key}`);
  }

  // Every goto must land in a chain this service port writes: a dangling one would fail the whole transaction.
  const declared = new Set(chains.keys());
  const targets = [...elements.map((e) => e.value ?? ''), ...[...chains.values()].flat()].flatMap((t) => [...t.matchAll(/\bgoto (\S+)/g)].map((m) => m[1]));
  for (const t of targets) {
    if (t !== N.REJECT_CHAIN && !declared.has(t)) throw new RuleBuildError(`rules would go to ${t}, which this service port does not create (endpoints: ${endpoints?.length ?? 0})`);
  }
  return {
    id: sp.id,
    service: sp.service,
    chains: [...chains].map(([n, rules]) => ({ name: n, rules })),
    affinitySets,
    elements,
    noLocalInternal,
    noLocalExternal,
  };
}

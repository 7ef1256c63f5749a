import { flatString } from '../flat-string.ts';
import { RuleBuildError } from '../../errors.ts';
import type { Endpoint } from '../endpoint.ts';
import { cidrContains, parseCIDR, type IPFamily } from '../../net/ip.ts';
import type { LocalDetector } from '../local-detector.ts';
import { externallyAccessible, hasSessionAffinity, type ServicePort } from '../service-port.ts';
import { validateEndpoint, validateServicePort } from '../service-port-validation.ts';
import { categorizeEndpoints } from '../topology.ts';
import { trafficPolicyChains } from '../traffic-policy.ts';
import { KUBE_EXTERNAL_SERVICES, KUBE_MARK_MASQ, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL, KUBE_SERVICES, servicePortChains, type ChainNames } from '../xtables/chain-names.ts';
import { chainLine, comment, LineBuffer, type ProbabilityCache } from '../xtables/restore-writer.ts';

/**
 * The pure half of the iptables backend: service ports and endpoints in,
 * iptables-restore text out, rule for rule what kube-proxy's syncProxyRules
 * writes (pkg/proxy/iptables/proxier.go). No I/O and no clock here.
 */

/** The nfacct counters kube-proxy attaches to two rules when the kernel has them. */
export const NFACCT_CT_STATE_INVALID = 'ct_state_invalid_dropped_pkts';
export const NFACCT_LOCALHOST_NODEPORTS = 'localhost_nps_accepted_pkts';

/** LARGE_CLUSTER_ENDPOINTS: above this many endpoints, per-endpoint comments are left out. */
export const LARGE_CLUSTER_ENDPOINTS = 1000;

/** BuildContext is everything global a service's rules depend on. */
export interface BuildContext {
  readonly family: IPFamily;
  readonly nodeName: string;
  readonly zone: string;
  /** masqueradeMark: e.g. "0x00004000" (Go's "%#08x" of 1 << masqueradeBit). */
  readonly masqueradeMark: string;
  readonly masqueradeAll: boolean;
  readonly localDetector: LocalDetector;
  /** localhostNodePorts: effective value (IPv4 only, and only if nodePortAddresses include 127.0.0.0/8). */
  readonly localhostNodePorts: boolean;
  /** nodePortsMatchAll: node ports on every local address; else nodePortIPs lists them. */
  readonly nodePortsMatchAll: boolean;
  readonly nodePortIPs: readonly string[];
  /** nodeIP: the node's primary IP (LB source ranges that contain it also admit the LB IP as source). */
  readonly nodeIP: string | null;
  /** conntrackTCPLiberal: nf_conntrack_tcp_be_liberal is set, so INVALID packets are not dropped. */
  readonly conntrackTCPLiberal: boolean;
  readonly randomFully: boolean;
  readonly nfacct: { readonly ctStateInvalid: boolean; readonly localhostNodePorts: boolean };
  readonly largeClusterMode: boolean;
}

/**
 * contextKey summarises a context: when it differs from the last sync's, every
 * service's cached rules are stale and the next sync must be full.
 */
export function contextKey(ctx: BuildContext): string {
  return JSON.stringify(ctx);
}

/** ServicePortRules is the cached output for one service port. */
export interface ServicePortRules {
  readonly id: string;
  readonly service: string;
  /** filterText: its rules in the fixed filter chains. */
  readonly filterText: string;
  readonly filterLines: number;
  /** jumpsText: its rules in the fixed nat chains KUBE-SERVICES and KUBE-NODEPORTS. */
  readonly jumpsText: string;
  readonly jumpsLines: number;
  /** chains: its own nat chains (SVC, SVL, EXT, FW, SEP...), declared by chainsText. */
  readonly chains: readonly string[];
  readonly chainsText: string;
  /** rulesText: the rules of its own chains. */
  readonly rulesText: string;
  readonly rulesLines: number;
  /**
   * serviceChains, serviceRulesLines: the first serviceChains of `chains` (and
   * lines of chainsText) are the service chains (EXT, FW, SVC, SVL), the first
   * serviceRulesLines of rulesText their rules; the endpoint chains (SEP) and
   * their rules follow, chain after chain, in the same order.
   */
  readonly serviceChains: number;
  readonly serviceRulesLines: number;
  /** endpointChains: endpoint "ip:port" -> its KUBE-SEP- chain, reused when the port is rebuilt. */
  readonly endpointChains: ReadonlyMap<string, string>;
  /** noLocalInternal/External: kube-proxy's sync_proxy_rules_no_local_endpoints_total inputs. */
  readonly noLocalInternal: boolean;
  readonly noLocalExternal: boolean;
}

/**
 * buildServicePortRules writes one service port's rules. It throws
 * RuleBuildError when a value cannot be written safely; the caller skips the
 * service then, and every other service is still programmed.
 */
export function buildServicePortRules(
  sp: ServicePort,
  endpoints: readonly Endpoint[] | undefined,
  ctx: BuildContext,
  names: ChainNames,
  probabilities: ProbabilityCache,
  previous?: ServicePortRules,
): ServicePortRules {
  validateServicePort(sp, ctx.family);
  for (const ep of endpoints ?? []) validateEndpoint(ep, ctx.family);

  const protocol = sp.protocol.toLowerCase();
  const name = sp.name;
  const port = String(sp.port);
  const nameComment = comment(name);
  const { cluster, local, allReachable, hasAny } = categorizeEndpoints(endpoints, sp, ctx.nodeName, ctx.zone);
  const chains = servicePortChains(names, name, protocol);

  const { usesClusterPolicyChain, usesLocalPolicyChain, internalPolicyChain, hasInternalEndpoints, externalPolicyChain, hasExternalEndpoints } = trafficPolicyChains(
    sp,
    { cluster, local, hasAny },
    chains,
  );
  const externalChain = chains.external;
  // The EXT chain is needed whenever there are endpoints anywhere, even without
  // local ones: its short-circuit rules still serve pods and the node itself.
  const usesExternalTrafficChain = hasAny && externallyAccessible(sp);
  const usesFWChain = hasAny && sp.loadBalancerVIPs.length > 0 && sp.loadBalancerSourceRanges.length > 0;
  const loadBalancerTrafficChain = usesFWChain ? chains.firewall : externalChain;

  let internalFilterTarget = '';
  let internalFilterComment = '';
  let externalFilterTarget = '';
  let externalFilterComment = '';
  let noLocalInternal = false;
  let noLocalExternal = false;
  if (!hasAny) {
    internalFilterTarget = externalFilterTarget = 'REJECT';
    internalFilterComment = externalFilterComment = comment(`${name} has no endpoints`);
  } else {
    if (!hasInternalEndpoints) {
      internalFilterTarget = 'DROP';
      internalFilterComment = comment(`${name} has no local endpoints`);
      noLocalInternal = true;
    }
    if (!hasExternalEndpoints) {
      externalFilterTarget = 'DROP';
      externalFilterComment = comment(`${name} has no local endpoints`);
      noLocalExternal = true;
    }
  }

  const filter = new LineBuffer();
  const jumps = new LineBuffer();
  const declared: string[] = [];
  const rules = new LineBuffer();
  const jumpTargets = new Set<string>();
  const proto = ['-m', protocol, '-p', protocol];

  // Cluster IP.
  if (hasInternalEndpoints) {
    jumps.write('-A', KUBE_SERVICES, '-m', 'comment', '--comment', comment(`${name} cluster IP`), ...proto, '-d', sp.clusterIP, '--dport', port, '-j', internalPolicyChain);
    jumpTargets.add(internalPolicyChain);
  } else {
    filter.write('-A', KUBE_SERVICES, '-m', 'comment', '--comment', internalFilterComment, ...proto, '-d', sp.clusterIP, '--dport', port, '-j', internalFilterTarget);
  }

  // External IPs.
  for (const ip of sp.externalIPs) {
    if (hasAny) {
      jumps.write('-A', KUBE_SERVICES, '-m', 'comment', '--comment', comment(`${name} external IP`), ...proto, '-d', ip, '--dport', port, '-j', externalChain);
      jumpTargets.add(externalChain);
    }
    if (!hasExternalEndpoints) {
      filter.write('-A', KUBE_EXTERNAL_SERVICES, '-m', 'comment', '--comment', externalFilterComment, ...proto, '-d', ip, '--dport', port, '-j', externalFilterTarget);
    }
  }

  // Load balancer IPs.
  for (const ip of sp.loadBalancerVIPs) {
    if (hasAny) {
      jumps.write('-A', KUBE_SERVICES, '-m', 'comment', '--comment', comment(`${name} loadbalancer IP`), ...proto, '-d', ip, '--dport', port, '-j', loadBalancerTrafficChain);
      jumpTargets.add(loadBalancerTrafficChain);
    }
    if (usesFWChain) {
      filter.write('-A', KUBE_PROXY_FIREWALL, '-m', 'comment', '--comment', comment(`${name} traffic not accepted by ${chains.firewall}`), ...proto, '-d', ip, '--dport', port, '-j', 'DROP');
    }
  }
  if (!hasExternalEndpoints) {
    for (const ip of sp.loadBalancerVIPs) {
      filter.write('-A', KUBE_EXTERNAL_SERVICES, '-m', 'comment', '--comment', externalFilterComment, ...proto, '-d', ip, '--dport', port, '-j', externalFilterTarget);
    }
  }

  // Node port. Node ports are not subject to loadBalancerSourceRanges (kube-proxy cannot change that).
  if (sp.nodePort !== 0) {
    const nodePort = String(sp.nodePort);
    if (hasAny) {
      if (ctx.localhostNodePorts && ctx.family === 'IPv4' && ctx.nfacct.localhostNodePorts) {
        jumps.write(
          '-A',
          KUBE_NODEPORTS,
          '-m',
          'comment',
          '--comment',
          nameComment,
          ...proto,
          '-d',
          '127.0.0.0/8',
          '--dport',
          nodePort,
          '-m',
          'nfacct',
          '--nfacct-name',
          NFACCT_LOCALHOST_NODEPORTS,
          '-j',
          externalChain,
        );
      }
      jumps.write('-A', KUBE_NODEPORTS, '-m', 'comment', '--comment', nameComment, ...proto, '--dport', nodePort, '-j', externalChain);
      jumpTargets.add(externalChain);
    }
    if (!hasExternalEndpoints) {
      filter.write(
        '-A',
        KUBE_EXTERNAL_SERVICES,
        '-m',
        'comment',
        '--comment',
        externalFilterComment,
        '-m',
        'addrtype',
        '--dst-type',
        'LOCAL',
        ...proto,
        '--dport',
        nodePort,
        '-j',
        externalFilterTarget,
      );
    }
  }

  // Health check node port: accepted whether or not this node has local endpoints.
  if (sp.healthCheckNodePort !== 0) {
    filter.write('-A', KUBE_NODEPORTS, '-m', 'comment', '--comment', comment(`${name} health check node port`), '-m', 'tcp', '-p', 'tcp', '--dport', String(sp.healthCheckNodePort), '-j', 'ACCEPT');
  }

  // Internal traffic: masquerade what does not come from a local pod (or everything with masqueradeAll).
  if (hasInternalEndpoints) {
    const match = ['-m', 'comment', '--comment', comment(`${name} cluster IP`), ...proto, '-d', sp.clusterIP, '--dport', port];
    if (ctx.masqueradeAll) rules.write('-A', internalPolicyChain, ...match, '-j', KUBE_MARK_MASQ);
    else if (ctx.localDetector.implemented) rules.write('-A', internalPolicyChain, ...match, ...ctx.localDetector.ifNotLocal, '-j', KUBE_MARK_MASQ);
  }

  // External traffic: everything captured for node ports, external and LB IPs goes through EXT.
  if (usesExternalTrafficChain) {
    declared.push(externalChain);
    if (!sp.externalPolicyLocal) {
      // Non-local endpoints may be on another node: masquerade so replies come back here.
      rules.write('-A', externalChain, '-m', 'comment', '--comment', comment(`masquerade traffic for ${name} external destinations`), '-j', KUBE_MARK_MASQ);
    } else {
      if (ctx.localDetector.implemented) {
        // Pod-to-external-IP traffic skips both traffic policies, as if it went out to the LB and back.
        rules.write('-A', externalChain, '-m', 'comment', '--comment', comment(`pod traffic for ${name} external destinations`), ...ctx.localDetector.ifLocal, '-j', chains.cluster);
        jumpTargets.add(chains.cluster);
      }
      // The node's own traffic to an external IP has a local source address: masquerade it and use Cluster policy.
      rules.write(
        '-A',
        externalChain,
        '-m',
        'comment',
        '--comment',
        comment(`masquerade LOCAL traffic for ${name} external destinations`),
        '-m',
        'addrtype',
        '--src-type',
        'LOCAL',
        '-j',
        KUBE_MARK_MASQ,
      );
      rules.write('-A', externalChain, '-m', 'comment', '--comment', comment(`route LOCAL traffic for ${name} external destinations`), '-m', 'addrtype', '--src-type', 'LOCAL', '-j', chains.cluster);
      jumpTargets.add(chains.cluster);
    }
    if (hasExternalEndpoints) {
      rules.write('-A', externalChain, '-j', externalPolicyChain);
      jumpTargets.add(externalPolicyChain);
    }
  }

  // Firewall chain for loadBalancerSourceRanges.
  if (usesFWChain) {
    declared.push(chains.firewall);
    const head = ['-A', chains.firewall, '-m', 'comment', '--comment', comment(`${name} loadbalancer IP`)];
    let allowFromNode = false;
    for (const cidr of sp.loadBalancerSourceRanges) {
      rules.write(...head, '-s', cidr, '-j', externalChain);
      if (ctx.nodeIP && cidrContains(parseCIDR(cidr)!, ctx.nodeIP)) allowFromNode = true;
    }
    // A VIP-mode LB IP is often local to the node: the node's own requests then
    // arrive with the LB IP as source and must be let through.
    if (allowFromNode) for (const ip of sp.loadBalancerVIPs) rules.write(...head, '-s', ip, '-j', externalChain);
    // What falls off the end was not DNATed and is dropped by KUBE-PROXY-FIREWALL in filter.
    rules.write('-A', chains.firewall, '-m', 'comment', '--comment', comment(`other traffic to ${name} will be dropped by KUBE-PROXY-FIREWALL`));
  }

  // The per-endpoint loops below are the hot path (100k endpoints on a big
  // node): they build each line as one template string. Their values were all
  // validated above, and "name -> ip:port" always has spaces, so it is quoted.
  // Endpoint chain names hash the service port name, protocol and endpoint:
  // reuse the previous build's names (same id, so same name and protocol).
  const before = previous?.id === sp.id ? previous.endpointChains : undefined;
  const epChain = new Map<string, string>();
  const chainOf = (ep: Endpoint): string => {
    let c = epChain.get(ep.key);
    if (c === undefined) {
      c = before?.get(ep.key) ?? names.endpointChain(name, protocol, ep.key);
      epChain.set(ep.key, c);
    }
    return c;
  };
  const large = ctx.largeClusterMode;
  const writeBalancing = (svcChain: string, eps: readonly Endpoint[]) => {
    if (hasSessionAffinity(sp)) {
      const seconds = sp.stickyMaxAgeSeconds;
      for (const ep of eps) {
        const c = chainOf(ep);
        const cm = large ? '' : ` -m comment --comment "${name} -> ${ep.key}"`;
        rules.writeLine(`-A ${svcChain}${cm} -m recent --name ${c} --rcheck --seconds ${seconds} --reap -j ${c}`);
      }
    }
    const n = eps.length;
    for (let i = 0; i < n; i++) {
      const ep = eps[i];
      const c = chainOf(ep);
      jumpTargets.add(c);
      const cm = large ? '' : ` -m comment --comment "${name} -> ${ep.key}"`;
      // Each rule takes 1/(endpoints left) of what reaches it; the last one takes the rest.
      const stat = i < n - 1 ? ` -m statistic --mode random --probability ${probabilities.get(n - i)}` : '';
      rules.writeLine(`-A ${svcChain}${cm}${stat} -j ${c}`);
    }
  };
  if (usesClusterPolicyChain) {
    declared.push(chains.cluster);
    writeBalancing(chains.cluster, cluster);
  }
  if (usesLocalPolicyChain) {
    declared.push(chains.local);
    writeBalancing(chains.local, local);
  }

  // One chain per endpoint: hairpin masquerade (a pod reaching itself through
  // the service), then DNAT. Last, so the endpoint chains can be committed apart (proxier.ts).
  const serviceChains = declared.length;
  const serviceRulesLines = rules.lines;
  const sepComment = large ? '' : ` -m comment --comment ${nameComment}`;
  const affinity = hasSessionAffinity(sp);
  for (const ep of allReachable) {
    const c = chainOf(ep);
    declared.push(c);
    rules.writeLine(`-A ${c}${sepComment} -s ${ep.ip} -j ${KUBE_MARK_MASQ}`);
    const recent = affinity ? ` -m recent --name ${c} --set` : '';
    rules.writeLine(`-A ${c}${sepComment}${recent} -m ${protocol} -p ${protocol} -j DNAT --to-destination ${ep.key}`);
  }

  // Every jump must land in a chain this service declares: a dangling jump would fail the whole restore.
  const declaredSet = new Set(declared);
  for (const t of jumpTargets) {
    if (!declaredSet.has(t)) throw new RuleBuildError(`rules would jump to ${t}, which this service port does not create (endpoints: ${endpoints?.length ?? 0})`);
  }

  return {
    id: sp.id,
    service: sp.service,
    // Flat: these two stay in the sync's cache (slimCache drops the others).
    filterText: flatString(filter.text()),
    filterLines: filter.lines,
    jumpsText: flatString(jumps.text()),
    jumpsLines: jumps.lines,
    chains: declared,
    chainsText: declared.map((c) => chainLine(c) + '\n').join(''),
    rulesText: rules.text(),
    rulesLines: rules.lines,
    serviceChains,
    serviceRulesLines,
    endpointChains: epChain,
    noLocalInternal,
    noLocalExternal,
  };
}

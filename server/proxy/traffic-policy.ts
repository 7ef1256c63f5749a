import { usesClusterEndpoints, usesLocalEndpoints, type ServicePort } from './service-port.ts';
import type { CategorizedEndpoints } from './topology.ts';

/**
 * PolicyChains says which of a service port's two endpoint chains (the
 * Cluster policy's and the Local policy's, whatever a mode calls them) exist,
 * and where its internal and its external traffic go, as kube-proxy's
 * iptables and nftables proxiers choose them in syncProxyRules
 * (usesClusterPolicyChain, internalPolicyChain, hasInternalEndpoints…).
 */
export interface PolicyChains<C> {
  /** usesClusterPolicyChain: the Cluster policy's chain is written (it has endpoints, and some traffic uses it). */
  readonly usesClusterPolicyChain: boolean;
  /** usesLocalPolicyChain: the Local policy's chain is written. */
  readonly usesLocalPolicyChain: boolean;
  /** internalPolicyChain: where traffic to the cluster IP goes (internalTrafficPolicy). */
  readonly internalPolicyChain: C;
  /** hasInternalEndpoints: that traffic has an endpoint to go to (false: no endpoint at all, or Local policy and none on this node). */
  readonly hasInternalEndpoints: boolean;
  /** externalPolicyChain: where external traffic goes (node ports, external and load balancer IPs; externalTrafficPolicy). */
  readonly externalPolicyChain: C;
  /** hasExternalEndpoints: that traffic has an endpoint to go to. */
  readonly hasExternalEndpoints: boolean;
}

/**
 * trafficPolicyChains chooses, from a service port's categorized endpoints,
 * between its Cluster and Local policy chains (each mode names its own: the
 * iptables mode's KUBE-SVC-/KUBE-SVL-, nftables mode's service-/local-…).
 */
export function trafficPolicyChains<C>(sp: ServicePort, endpoints: Pick<CategorizedEndpoints, 'cluster' | 'local' | 'hasAny'>, chains: { readonly cluster: C; readonly local: C }): PolicyChains<C> {
  const noLocal = endpoints.local.length === 0;
  return {
    usesClusterPolicyChain: endpoints.cluster.length > 0 && usesClusterEndpoints(sp),
    usesLocalPolicyChain: !noLocal && usesLocalEndpoints(sp),
    internalPolicyChain: sp.internalPolicyLocal ? chains.local : chains.cluster,
    hasInternalEndpoints: endpoints.hasAny && !(sp.internalPolicyLocal && noLocal),
    externalPolicyChain: sp.externalPolicyLocal ? chains.local : chains.cluster,
    hasExternalEndpoints: endpoints.hasAny && !(sp.externalPolicyLocal && noLocal),
  };
}

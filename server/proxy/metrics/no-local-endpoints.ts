import type { StateCheckout } from '../proxy-state.ts';
import { categorizeEndpoints } from '../topology.ts';

/** NoLocalEndpoints counts service ports whose Local traffic policy has nothing to send to. */
export interface NoLocalEndpoints {
  readonly internal: number;
  readonly external: number;
}

/**
 * countNoLocalEndpoints computes kubeproxy_sync_proxy_rules_no_local_endpoints_total
 * as kube-proxy's proxiers do while writing rules: a service port counts when
 * it has usable endpoints somewhere in the cluster but none on this node for a
 * Local policy ("internal" for internalTrafficPolicy, "external" for
 * externalTrafficPolicy). Ports with no endpoints at all are rejected outright
 * and do not count.
 */
export function countNoLocalEndpoints(checkout: Pick<StateCheckout, 'services' | 'endpoints' | 'node'>): NoLocalEndpoints {
  let internal = 0;
  let external = 0;
  for (const [id, sp] of checkout.services) {
    if (!sp.internalPolicyLocal && !sp.externalPolicyLocal) continue;
    const c = categorizeEndpoints(checkout.endpoints.get(id), sp, checkout.node.name, checkout.node.zone);
    if (!c.hasAny || c.local.length > 0) continue;
    if (sp.internalPolicyLocal) internal++;
    if (sp.externalPolicyLocal) external++;
  }
  return { internal, external };
}

import { parseCIDR } from '../net/ip.ts';
import type { ServiceCIDR } from './kube-objects.ts';

/**
 * serviceCIDRsOf reads a ServiceCIDR's spec.cidrs (at most one per family,
 * validated by the API server): canonical CIDR texts, anything unreadable
 * left out. kube-proxy takes every ServiceCIDR's ranges, whatever its
 * status conditions (pkg/proxy/config ServiceCIDRConfig).
 */
export function serviceCIDRsOf(obj: ServiceCIDR): string[] {
  const cidrs = obj.spec?.cidrs;
  if (!Array.isArray(cidrs)) return [];
  const out: string[] = [];
  for (const c of cidrs) {
    const parsed = parseCIDR(typeof c === 'string' ? c.trim() : c);
    if (parsed && !out.includes(parsed.text)) out.push(parsed.text);
  }
  return out;
}

import { ipFamilyOf, otherFamily, type IPFamily } from '../net/ip.ts';
import type { ProxyConfig } from './types.ts';

/**
 * primaryFamily is the node's primary IP family: the family of bindAddress
 * (0.0.0.0, the default, is IPv4; :: is IPv6), as kube-proxy chose it before
 * it read node IPs. The primary family's proxier comes first: its rules are
 * written first, and `--once` reports it first.
 */
export function primaryFamily(config: Pick<ProxyConfig, 'bindAddress'>): IPFamily {
  return ipFamilyOf(config.bindAddress) ?? 'IPv4';
}

/**
 * proxyFamilies lists the families to proxy, the primary first: both when the
 * kernel supports the secondary one (kube-proxy runs dual-stack whenever the
 * host supports both families, platformCheckSupported), else the primary alone.
 */
export function proxyFamilies(primary: IPFamily, secondarySupported: boolean): IPFamily[] {
  return secondarySupported ? [primary, otherFamily(primary)] : [primary];
}

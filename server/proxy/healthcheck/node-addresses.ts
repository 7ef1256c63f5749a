import { networkInterfaces } from 'node:os';
import { canonicalIP, cidrContains, ipFamilyOf, parseCIDR, type IPFamily } from '../ip.ts';

/** LocalAddresses lists the addresses on this host's interfaces (an OS boundary, faked in tests). */
export type LocalAddresses = () => string[];

/** hostAddresses reads the interface addresses of the network namespace kproxy runs in. */
export const hostAddresses: LocalAddresses = () => {
  const out: string[] = [];
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) {
      const ip = canonicalIP(a.address.split('%')[0]);
      if (ip && !out.includes(ip)) out.push(ip);
    }
  }
  return out;
};

/** NODE_PORT_ADDRESSES_PRIMARY is the nodePortAddresses value meaning "the node's primary IP". */
export const NODE_PORT_ADDRESSES_PRIMARY = 'primary';

export interface BindAddressInput {
  family: IPFamily;
  /** nodePortAddresses as configured: CIDRs, ["primary"], or [] for all. */
  nodePortAddresses: readonly string[];
  /** local lists the host's interface addresses. */
  local: LocalAddresses;
  /** nodeAddresses: the Node object's addresses (InternalIP first), for "primary". */
  nodeAddresses: readonly string[];
}

/**
 * healthCheckBindAddresses decides where health check node ports listen, as
 * kube-proxy's service health server does: on the wildcard address when node
 * ports are accepted on every address (nodePortAddresses empty, or no CIDR of
 * this family, or a zero CIDR), otherwise on each local address inside one of
 * the CIDRs. "primary" means the node's first address of this family.
 * An empty result means no address matches: nothing can listen.
 */
export function healthCheckBindAddresses(input: BindAddressInput): string[] {
  const wildcard = input.family === 'IPv4' ? '0.0.0.0' : '::';
  let cidrTexts = [...input.nodePortAddresses];
  if (cidrTexts.length === 1 && cidrTexts[0] === NODE_PORT_ADDRESSES_PRIMARY) {
    const primary = input.nodeAddresses.find((a) => ipFamilyOf(a) === input.family);
    cidrTexts = primary ? [input.family === 'IPv4' ? `${primary}/32` : `${primary}/128`] : [];
  }
  const cidrs = cidrTexts.map((c) => parseCIDR(c)).filter((c) => c !== null && c.family === input.family);
  if (cidrs.length === 0 || cidrs.some((c) => c!.prefix === 0)) return [wildcard];
  return input.local().filter((ip) => ipFamilyOf(ip) === input.family && cidrs.some((c) => cidrContains(c!, ip)));
}

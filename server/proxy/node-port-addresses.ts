import { NODE_PORT_ADDRESSES_PRIMARY } from '../config/modes.ts';
import { cidrContains, compareIPs, isLoopbackIP, parseCIDR, type CIDR, type IPFamily } from '../net/ip.ts';

/**
 * NodePortAddresses interprets --nodeport-addresses for one family, like
 * kube-proxy's proxyutil.NodePortAddresses: CIDRs of other families are
 * ignored; none left means "every address" (0.0.0.0/0 or ::/0).
 */
export class NodePortAddresses {
  readonly family: IPFamily;
  readonly cidrs: readonly CIDR[];
  /** matchAll: node ports are accepted on every local address (rules use -m addrtype --dst-type LOCAL). */
  readonly matchAll: boolean;
  /** containsIPv4Loopback: 127.0.0.0/8 is (partly) included, so localhost node ports may apply. */
  readonly containsIPv4Loopback: boolean;

  /**
   * The value ["primary"] stands for the node's primary address of the family
   * (kube-proxy's server.go turns it into "<nodeIP>/32"); pass the Node's
   * addresses as primaryIPs for it. Invalid entries are ignored here: the
   * configuration was validated when it was loaded.
   */
  constructor(family: IPFamily, values: readonly string[], primaryIPs: readonly string[] = []) {
    this.family = family;
    let texts = values;
    if (values.length === 1 && values[0] === NODE_PORT_ADDRESSES_PRIMARY) {
      const ip = primaryIPs.find((a) => (family === 'IPv6') === a.includes(':') && !isLoopbackIP(a));
      texts = ip ? [`${ip}/${family === 'IPv6' ? 128 : 32}`] : [];
    }
    const cidrs: CIDR[] = [];
    let loopback = false;
    let matchAll = false;
    for (const t of texts) {
      const c = parseCIDR(t);
      if (!c || c.family !== family) continue;
      if (c.family === 'IPv4' && (cidrContains(c, '127.0.0.0') || c.ip.startsWith('127.'))) loopback = true;
      if (c.prefix === 0) {
        matchAll = true;
        cidrs.length = 0;
        cidrs.push(c);
        break;
      }
      cidrs.push(c);
    }
    if (cidrs.length === 0) {
      const zero = parseCIDR(family === 'IPv6' ? '::/0' : '0.0.0.0/0')!;
      cidrs.push(zero);
      matchAll = true;
      if (family === 'IPv4') loopback = true;
    }
    this.cidrs = cidrs;
    this.matchAll = matchAll;
    this.containsIPv4Loopback = loopback;
  }

  /** nodeIPs returns the given host addresses inside the CIDRs, deduplicated and sorted (kube-proxy: GetNodeIPs). */
  nodeIPs(hostAddresses: readonly string[]): string[] {
    const out = new Set<string>();
    for (const ip of hostAddresses) {
      if ((this.family === 'IPv6') !== ip.includes(':')) continue;
      if (this.cidrs.some((c) => cidrContains(c, ip))) out.add(ip);
    }
    return [...out].sort(compareIPs);
  }

  toString(): string {
    return `[${this.cidrs.map((c) => c.text).join(' ')}]`;
  }
}

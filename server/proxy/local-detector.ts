import type { ProxyConfig } from '../config/types.ts';
import { ConfigInvalidError } from '../errors.ts';
import { parseCIDR, type IPFamily } from '../net/ip.ts';
import type { NodeInfo } from './node-info.ts';

/**
 * LocalDetector tells rules how to recognise traffic from this node's pods
 * (kube-proxy's LocalTrafficDetector, pkg/proxy/util/localdetector.go). It is
 * plain data: the iptables and nftables match words for "from a local pod" and
 * "not from a local pod". A detector that is not implemented matches nothing;
 * rules that need one are then left out, exactly as kube-proxy does.
 */
export interface LocalDetector {
  readonly implemented: boolean;
  /** mode and value describe the detector for logs and the dashboard ("ClusterCIDR 10.244.0.0/16"). */
  readonly description: string;
  readonly ifLocal: readonly string[];
  readonly ifNotLocal: readonly string[];
  readonly ifLocalNFT: readonly string[];
  readonly ifNotLocalNFT: readonly string[];
}

export const NO_LOCAL_DETECTOR: LocalDetector = {
  implemented: false,
  description: 'none',
  ifLocal: [],
  ifNotLocal: [],
  ifLocalNFT: [],
  ifNotLocalNFT: [],
};

/** detectLocalByCIDR: traffic from the CIDR is local. */
export function detectLocalByCIDR(cidr: string, how = 'CIDR'): LocalDetector {
  const parsed = parseCIDR(cidr);
  if (!parsed) throw new ConfigInvalidError(`local traffic detector: ${JSON.stringify(cidr)} is not a CIDR`);
  const nftFamily = parsed.family === 'IPv6' ? 'ip6' : 'ip';
  return {
    implemented: true,
    description: `${how} ${parsed.text}`,
    ifLocal: ['-s', parsed.text],
    ifNotLocal: ['!', '-s', parsed.text],
    ifLocalNFT: [nftFamily, 'saddr', parsed.text],
    ifNotLocalNFT: [nftFamily, 'saddr', '!=', parsed.text],
  };
}

/**
 * Linux interface names: at most 15 bytes, no "/", no whitespace, not "." or
 * "..". We also refuse quotes and "+" (iptables' own wildcard), since the name
 * goes into rule text.
 */
const IFNAME = /^[A-Za-z0-9_.:@-]{1,15}$/;

function checkInterfaceName(name: string, what: string, maxLen = 15): void {
  if (!IFNAME.test(name) || name.length > maxLen || name === '.' || name === '..') {
    throw new ConfigInvalidError(`local traffic detector: ${what} ${JSON.stringify(name)} is not a valid interface name`);
  }
}

/** detectLocalByBridgeInterface: traffic arriving on the bridge is local. */
export function detectLocalByBridgeInterface(ifname: string): LocalDetector {
  checkInterfaceName(ifname, 'bridge interface');
  return {
    implemented: true,
    description: `BridgeInterface ${ifname}`,
    ifLocal: ['-i', ifname],
    ifNotLocal: ['!', '-i', ifname],
    // Quoted as nft lists them, so the nftables backend reads its rules back as written.
    ifLocalNFT: ['iif', `"${ifname}"`],
    ifNotLocalNFT: ['iif', '!=', `"${ifname}"`],
  };
}

/** detectLocalByInterfaceNamePrefix: traffic arriving on interfaces named prefix* is local. */
export function detectLocalByInterfaceNamePrefix(prefix: string): LocalDetector {
  // iptables needs room for its "+" wildcard within the 15-character limit.
  checkInterfaceName(prefix, 'interface name prefix', 14);
  return {
    implemented: true,
    description: `InterfaceNamePrefix ${prefix}`,
    ifLocal: ['-i', `${prefix}+`],
    ifNotLocal: ['!', '-i', `${prefix}+`],
    // A wildcard needs iifname (iif names one existing interface), as kube-proxy writes it.
    ifLocalNFT: ['iifname', `"${prefix}*"`],
    ifNotLocalNFT: ['iifname', '!=', `"${prefix}*"`],
  };
}

/**
 * localDetectorFor picks the detector of a family from the configuration and
 * the Node, as kube-proxy's getLocalDetectors does: ClusterCIDR uses the
 * --cluster-cidr entry of the family; NodeCIDR the Node's first pod CIDR of
 * the family (none yet: no detector until the Node has one); the interface
 * modes apply to both families. Throws ConfigInvalidError for a bad value.
 */
export function localDetectorFor(config: Pick<ProxyConfig, 'detectLocalMode' | 'detectLocal' | 'clusterCIDRs'>, node: Pick<NodeInfo, 'podCIDRs'>, family: IPFamily): LocalDetector {
  const ofFamily = (cidrs: readonly string[]) => cidrs.map((c) => parseCIDR(c.trim())).find((c) => c?.family === family)?.text;
  switch (config.detectLocalMode) {
    case 'ClusterCIDR': {
      const cidr = ofFamily(config.clusterCIDRs);
      return cidr ? detectLocalByCIDR(cidr, 'ClusterCIDR') : NO_LOCAL_DETECTOR;
    }
    case 'NodeCIDR': {
      const cidr = ofFamily(node.podCIDRs);
      return cidr ? detectLocalByCIDR(cidr, 'NodeCIDR') : NO_LOCAL_DETECTOR;
    }
    case 'BridgeInterface':
      return detectLocalByBridgeInterface(config.detectLocal.bridgeInterface);
    case 'InterfaceNamePrefix':
      return detectLocalByInterfaceNamePrefix(config.detectLocal.interfaceNamePrefix);
    default:
      throw new ConfigInvalidError(`unknown detectLocalMode ${JSON.stringify(config.detectLocalMode)}`);
  }
}

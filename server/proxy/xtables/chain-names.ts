import { hash } from 'node:crypto';
import { flatString } from '../flat-string.ts';

/**
 * kube-proxy's chain names. Per-service-port chains are "KUBE-XXX-" plus the
 * first 16 characters of base32(sha256(servicePortName + protocol [+ endpoint])),
 * so a node taken over from kube-proxy keeps exactly the same chain names
 * (pkg/proxy/iptables/proxier.go: portProtoHash, servicePortEndpointChainName).
 * Iptables chain names must stay within 28 characters; these are at most 25.
 */

/** The fixed chains kube-proxy's iptables mode owns. */
export const KUBE_SERVICES = 'KUBE-SERVICES';
export const KUBE_EXTERNAL_SERVICES = 'KUBE-EXTERNAL-SERVICES';
export const KUBE_NODEPORTS = 'KUBE-NODEPORTS';
export const KUBE_POSTROUTING = 'KUBE-POSTROUTING';
export const KUBE_MARK_MASQ = 'KUBE-MARK-MASQ';
export const KUBE_FORWARD = 'KUBE-FORWARD';
export const KUBE_PROXY_FIREWALL = 'KUBE-PROXY-FIREWALL';
export const KUBE_PROXY_CANARY = 'KUBE-PROXY-CANARY';
/** KUBE_FIREWALL duplicates kubelet's chain holding the anti-martian rule for localhost node ports. */
export const KUBE_FIREWALL = 'KUBE-FIREWALL';

export const SVC_PREFIX = 'KUBE-SVC-';
export const SVL_PREFIX = 'KUBE-SVL-';
export const EXT_PREFIX = 'KUBE-EXT-';
export const FW_PREFIX = 'KUBE-FW-';
export const SEP_PREFIX = 'KUBE-SEP-';
/** XLB_PREFIX is the pre-1.24 kube-proxy "external load balancer" chain; only ever deleted (take-over). */
export const XLB_PREFIX = 'KUBE-XLB-';

const SERVICE_CHAIN_PREFIXES = [SVC_PREFIX, SVL_PREFIX, EXT_PREFIX, FW_PREFIX, SEP_PREFIX, XLB_PREFIX];

/** isServiceChainName: the chain is a per-service-port chain (ours, or an older kube-proxy's), safe to delete when unused. */
export function isServiceChainName(chain: string): boolean {
  for (const p of SERVICE_CHAIN_PREFIXES) if (chain.startsWith(p)) return true;
  return false;
}

const BASE32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';

/**
 * hash16 returns the first 16 characters of the RFC 4648 base32 encoding of
 * sha256(text): exactly the encoding of the digest's first 10 bytes (80 bits).
 */
export function hash16(text: string): string {
  const d = hash('sha256', text, 'buffer');
  let out = '';
  // Two groups of 5 bytes (40 bits), each 8 base32 characters: hi holds the
  // group's first byte, lo the other four.
  for (let g = 0; g < 10; g += 5) {
    const hi = d[g];
    const lo = ((d[g + 1] << 24) | (d[g + 2] << 16) | (d[g + 3] << 8) | d[g + 4]) >>> 0;
    out +=
      BASE32[hi >> 3] +
      BASE32[((hi & 7) << 2) | (lo >>> 30)] +
      BASE32[(lo >>> 25) & 31] +
      BASE32[(lo >>> 20) & 31] +
      BASE32[(lo >>> 15) & 31] +
      BASE32[(lo >>> 10) & 31] +
      BASE32[(lo >>> 5) & 31] +
      BASE32[lo & 31];
  }
  return out;
}

/**
 * ChainNames computes kube-proxy's per-service chain names. Service port
 * hashes are memoized here (two generations; rotate() after a full sync
 * forgets names unused since the previous rotation). Endpoint chain names are
 * memoized per service port instead (ServicePortRules.endpointChains), which
 * keeps lookups in small maps and lets a whole service's names go with it.
 */
export class ChainNames {
  #current = new Map<string, string>();
  #previous = new Map<string, string>();

  /** portHash is portProtoHash(servicePortName, lowercase protocol). */
  portHash(servicePortName: string, protocol: string): string {
    const key = servicePortName + protocol;
    let h = this.#current.get(key);
    if (h !== undefined) return h;
    h = (this.#previous.size > 0 ? this.#previous.get(key) : undefined) ?? flatString(hash16(key));
    this.#current.set(key, h);
    return h;
  }

  /** endpointChain is KUBE-SEP- for one endpoint ("ip:port" as Go's JoinHostPort prints it) of a service port. */
  endpointChain(servicePortName: string, protocol: string, endpoint: string): string {
    // Flat: a name is held from sync to sync (memoized per service port).
    return flatString(SEP_PREFIX + hash16(servicePortName + protocol + endpoint));
  }

  /** rotate starts a new generation; names unused for a whole generation are dropped. */
  rotate(): void {
    this.#previous = this.#current;
    this.#current = new Map();
  }

  get size(): number {
    return this.#current.size + this.#previous.size;
  }
}

/** ServicePortChains are the five per-service-port chain names of one service port. */
export interface ServicePortChains {
  /** cluster: KUBE-SVC-, endpoints for "Cluster" traffic policy. */
  readonly cluster: string;
  /** local: KUBE-SVL-, endpoints for "Local" traffic policy. */
  readonly local: string;
  /** external: KUBE-EXT-, entry for node port / external IP / LB traffic. */
  readonly external: string;
  /** firewall: KUBE-FW-, loadBalancerSourceRanges filter. */
  readonly firewall: string;
}

/** servicePortChains names the chains of a service port (protocol in lower case, as kube-proxy hashes it). */
export function servicePortChains(names: ChainNames, servicePortName: string, protocol: string): ServicePortChains {
  const h = names.portHash(servicePortName, protocol);
  // Flat: the names are held by the sync's cache until the port changes.
  return { cluster: flatString(SVC_PREFIX + h), local: flatString(SVL_PREFIX + h), external: flatString(EXT_PREFIX + h), firewall: flatString(FW_PREFIX + h) };
}

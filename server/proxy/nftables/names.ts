import { hash } from 'node:crypto';

/**
 * kube-proxy's nftables names (pkg/proxy/nftables/proxier.go). Everything
 * lives in one table, so the names carry no "kube-" prefix. Per-service-port
 * chains and sets are a prefix plus hashAndTruncate("ns/name/proto/port"
 * [+ "__ip/port"]); the "/" they contain tells them from the fixed chains.
 */

/** KUBE_PROXY_TABLE is the table's name in both families (`ip kube-proxy`, `ip6 kube-proxy`). */
export const KUBE_PROXY_TABLE = 'kube-proxy';
/** TABLE_COMMENT is the comment kube-proxy gives its table. */
export const TABLE_COMMENT = 'rules for kube-proxy';

// Base chains: "<type>-<hook>" (the pre-DNAT filter chains say so).
export const FILTER_PREROUTING_PRE_DNAT = 'filter-prerouting-pre-dnat';
export const FILTER_OUTPUT_PRE_DNAT = 'filter-output-pre-dnat';
export const FILTER_INPUT = 'filter-input';
export const FILTER_FORWARD = 'filter-forward';
export const FILTER_OUTPUT = 'filter-output';
export const NAT_PREROUTING = 'nat-prerouting';
export const NAT_OUTPUT = 'nat-output';
export const NAT_POSTROUTING = 'nat-postrouting';

// Regular fixed chains.
export const SERVICES = 'services';
export const SERVICE_ENDPOINTS_CHECK = 'service-endpoints-check';
export const NODEPORT_ENDPOINTS_CHECK = 'nodeport-endpoints-check';
export const REJECT_CHAIN = 'reject-chain';
export const CLUSTER_IPS_CHECK = 'cluster-ips-check';
export const FIREWALL_CHECK = 'firewall-check';
export const MARK_FOR_MASQUERADE = 'mark-for-masquerade';
export const MASQUERADING = 'masquerading';

// Sets and verdict maps.
export const CLUSTER_IPS = 'cluster-ips';
export const NODEPORT_IPS = 'nodeport-ips';
export const SERVICE_IPS = 'service-ips';
export const SERVICE_NODEPORTS = 'service-nodeports';
export const NO_ENDPOINT_SERVICES = 'no-endpoint-services';
export const NO_ENDPOINT_NODEPORTS = 'no-endpoint-nodeports';
export const FIREWALL_IPS = 'firewall-ips';

/** The maps and sets every service port writes elements into, in the order kproxy lists them. */
export const ELEMENT_SETS = [CLUSTER_IPS, SERVICE_IPS, SERVICE_NODEPORTS, FIREWALL_IPS, NO_ENDPOINT_SERVICES, NO_ENDPOINT_NODEPORTS] as const;
export type ElementSet = (typeof ELEMENT_SETS)[number];

// Per-service-port prefixes.
export const CLUSTER_POLICY_PREFIX = 'service-';
export const LOCAL_POLICY_PREFIX = 'local-';
export const EXTERNAL_PREFIX = 'external-';
export const ENDPOINT_PREFIX = 'endpoint-';
export const FIREWALL_PREFIX = 'firewall-';
export const AFFINITY_PREFIX = 'affinity-';

/**
 * NAME_LENGTH_MAX is nftables' limit on chain and set names (NFT_NAME_MAXLEN,
 * knftables' NameLengthMax); the longest prefix is 16 characters with its hyphen.
 */
export const NAME_LENGTH_MAX = 256;
const PREFIX_LENGTH_MAX = 16;
/** NAME_BASE_LENGTH_MAX: what hashAndTruncate may return (upstream chainNameBaseLengthMax). */
export const NAME_BASE_LENGTH_MAX = NAME_LENGTH_MAX - PREFIX_LENGTH_MAX;

const BASE32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';

/** hash8 is the first 8 characters of base32(sha256(text)): the encoding of the digest's first 5 bytes. */
function hash8(text: string): string {
  const d = hash('sha256', text, 'buffer');
  const lo = ((d[1] << 24) | (d[2] << 16) | (d[3] << 8) | d[4]) >>> 0;
  return (
    BASE32[d[0] >> 3] +
    BASE32[((d[0] & 7) << 2) | (lo >>> 30)] +
    BASE32[(lo >>> 25) & 31] +
    BASE32[(lo >>> 20) & 31] +
    BASE32[(lo >>> 15) & 31] +
    BASE32[(lo >>> 10) & 31] +
    BASE32[(lo >>> 5) & 31] +
    BASE32[lo & 31]
  );
}

/**
 * NFT_COMMENT_MAX: nft 1.0.6 refuses a comment longer than 128 bytes
 * (NFTNL_UDATA_COMMENT_MAXLEN): "comment too long, 128 characters maximum
 * allowed", and the whole transaction with it.
 */
export const NFT_COMMENT_MAX = 128;

/**
 * elementComment is a map element's comment: the service port's name
 * ("ns/name:port", up to 63 + 1 + 63 + 1 + 63 = 191 characters: a port name is a DNS-1123 label), cut to
 * NFT_COMMENT_MAX as kube-proxy cuts it (kubernetes/kubernetes #139516):
 * before that, one Service with long names failed every sync of the node.
 * Names are ASCII, so characters are bytes.
 */
export function elementComment(servicePortName: string): string {
  return servicePortName.length > NFT_COMMENT_MAX ? servicePortName.slice(0, NFT_COMMENT_MAX) : servicePortName;
}

/**
 * hashAndTruncate prefixes name with 8 characters of its own hash and cuts the
 * result to NAME_BASE_LENGTH_MAX ("..." marks a cut): the hash keeps a cut
 * name unique, and tells apart endpoint chains that differ in one digit.
 */
export function hashAndTruncate(name: string): string {
  const out = `${hash8(name)}-${name}`;
  return out.length > NAME_BASE_LENGTH_MAX ? out.slice(0, NAME_BASE_LENGTH_MAX - 3) + '...' : out;
}

/**
 * servicePortNameBase is "HASH-ns/name/proto/port", e.g. "ULMVA6XW-ns1/svc1/tcp/p80".
 * Namespace, Service and port names are [a-z0-9-] and protocols tcp|udp|sctp,
 * so all of them are legal in nftables names; "/" separates them.
 */
export function servicePortNameBase(namespace: string, service: string, protocol: string, portName: string): string {
  return hashAndTruncate(`${namespace}/${service}/${protocol}/${portName}`);
}

/**
 * endpointNameBase is "HASH-ns/name/proto/port__ip/port", e.g.
 * "5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80". An IPv6 address has its ":"
 * replaced with "." (colons are not allowed in names). endpoint is
 * kube-proxy's Endpoint.String(): "ip:port" or "[ip]:port".
 */
export function endpointNameBase(namespace: string, service: string, protocol: string, portName: string, endpoint: string): string {
  const colon = endpoint.lastIndexOf(':');
  let ip = endpoint.slice(0, colon);
  if (ip.startsWith('[')) ip = ip.slice(1, -1);
  const port = endpoint.slice(colon + 1);
  return hashAndTruncate(`${namespace}/${service}/${protocol}/${portName}__${ip.replaceAll(':', '.')}/${port}`);
}

/** ServicePortNames are one service port's chain names (kube-proxy's servicePortInfo). */
export interface ServicePortNames {
  readonly clusterPolicy: string;
  readonly localPolicy: string;
  readonly external: string;
  readonly firewall: string;
}

/** servicePortNames names the chains of one service port. */
export function servicePortNames(namespace: string, service: string, protocol: string, portName: string): ServicePortNames {
  const base = servicePortNameBase(namespace, service, protocol, portName);
  return {
    clusterPolicy: CLUSTER_POLICY_PREFIX + base,
    localPolicy: LOCAL_POLICY_PREFIX + base,
    external: EXTERNAL_PREFIX + base,
    firewall: FIREWALL_PREFIX + base,
  };
}

/** isServiceChainName: a per-service-port or endpoint chain (only those names hold a "/"). */
export function isServiceChainName(name: string): boolean {
  return name.includes('/');
}

/** isAffinitySetName: a per-endpoint ClientIP affinity set. */
export function isAffinitySetName(name: string): boolean {
  return name.startsWith(AFFINITY_PREFIX);
}

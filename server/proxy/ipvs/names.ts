import type { IpsetSpec, IpsetType } from '../../kernel/ipset.ts';
import type { IPFamily } from '../../net/ip.ts';

/**
 * kube-proxy's IPVS-mode names (pkg/proxy/ipvs/proxier.go and ipset.go): the
 * dummy link, the iptables chains and the ipsets with their types and the
 * comments its rules carry. A node moving between kube-proxy and kproxy keeps
 * every object in place.
 */

/** DUMMY_DEVICE holds every service address so the kernel takes their packets as local. */
export const DUMMY_DEVICE = 'kube-ipvs0';

export const KUBE_SERVICES = 'KUBE-SERVICES';
export const KUBE_POSTROUTING = 'KUBE-POSTROUTING';
export const KUBE_MARK_MASQ = 'KUBE-MARK-MASQ';
/** KUBE_NODE_PORT exists in nat (masquerade decisions) and filter (health check ports). */
export const KUBE_NODE_PORT = 'KUBE-NODE-PORT';
export const KUBE_LOAD_BALANCER = 'KUBE-LOAD-BALANCER';
export const KUBE_FORWARD = 'KUBE-FORWARD';
export const KUBE_PROXY_FIREWALL = 'KUBE-PROXY-FIREWALL';
export const KUBE_SOURCE_RANGES_FIREWALL = 'KUBE-SOURCE-RANGES-FIREWALL';
/** KUBE_IPVS_FILTER keeps service addresses from exposing the node's own ports (kubernetes#72236). */
export const KUBE_IPVS_FILTER = 'KUBE-IPVS-FILTER';
/** KUBE_IPVS_OUT_FILTER keeps the node from reaching LB IPs whose source ranges exclude it (kubernetes#119656). */
export const KUBE_IPVS_OUT_FILTER = 'KUBE-IPVS-OUT-FILTER';

export const NAT_CHAINS = [KUBE_SERVICES, KUBE_POSTROUTING, KUBE_NODE_PORT, KUBE_LOAD_BALANCER, KUBE_MARK_MASQ] as const;
export const FILTER_CHAINS = [KUBE_FORWARD, KUBE_NODE_PORT, KUBE_PROXY_FIREWALL, KUBE_SOURCE_RANGES_FIREWALL, KUBE_IPVS_FILTER, KUBE_IPVS_OUT_FILTER] as const;

/** The ipsets, by the names kube-proxy gives them for IPv4. */
export const SET = {
  loopBack: 'KUBE-LOOP-BACK',
  clusterIP: 'KUBE-CLUSTER-IP',
  externalIP: 'KUBE-EXTERNAL-IP',
  externalIPLocal: 'KUBE-EXTERNAL-IP-LOCAL',
  loadBalancer: 'KUBE-LOAD-BALANCER',
  loadBalancerFW: 'KUBE-LOAD-BALANCER-FW',
  loadBalancerLocal: 'KUBE-LOAD-BALANCER-LOCAL',
  loadBalancerSourceIP: 'KUBE-LOAD-BALANCER-SOURCE-IP',
  loadBalancerSourceCIDR: 'KUBE-LOAD-BALANCER-SOURCE-CIDR',
  nodePortTCP: 'KUBE-NODE-PORT-TCP',
  nodePortLocalTCP: 'KUBE-NODE-PORT-LOCAL-TCP',
  nodePortUDP: 'KUBE-NODE-PORT-UDP',
  nodePortLocalUDP: 'KUBE-NODE-PORT-LOCAL-UDP',
  nodePortSCTP: 'KUBE-NODE-PORT-SCTP-HASH',
  nodePortLocalSCTP: 'KUBE-NODE-PORT-LOCAL-SCTP-HASH',
  healthCheckNodePort: 'KUBE-HEALTH-CHECK-NODE-PORT',
  ipvsIPs: 'KUBE-IPVS-IPS',
} as const;

export type SetKey = keyof typeof SET;

/** IpsetInfo is one of IPVS mode's sets: kube-proxy's type and the comment its iptables rules carry. */
export interface IpsetInfo {
  readonly key: SetKey;
  readonly type: IpsetType;
  readonly comment: string;
}

/** IPSETS lists the sets in kube-proxy's ipsetInfo order. */
export const IPSETS: readonly IpsetInfo[] = [
  { key: 'loopBack', type: 'hash:ip,port,ip', comment: 'Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose' },
  { key: 'clusterIP', type: 'hash:ip,port', comment: 'Kubernetes service cluster ip + port for masquerade purpose' },
  { key: 'externalIP', type: 'hash:ip,port', comment: 'Kubernetes service external ip + port for masquerade and filter purpose' },
  { key: 'externalIPLocal', type: 'hash:ip,port', comment: 'Kubernetes service external ip + port with externalTrafficPolicy=local' },
  { key: 'loadBalancer', type: 'hash:ip,port', comment: 'Kubernetes service lb portal' },
  { key: 'loadBalancerFW', type: 'hash:ip,port', comment: 'Kubernetes service load balancer ip + port for load balancer with sourceRange' },
  { key: 'loadBalancerLocal', type: 'hash:ip,port', comment: 'Kubernetes service load balancer ip + port with externalTrafficPolicy=local' },
  { key: 'loadBalancerSourceIP', type: 'hash:ip,port,ip', comment: 'Kubernetes service load balancer ip + port + source IP for packet filter purpose' },
  { key: 'loadBalancerSourceCIDR', type: 'hash:ip,port,net', comment: 'Kubernetes service load balancer ip + port + source cidr for packet filter purpose' },
  { key: 'nodePortTCP', type: 'bitmap:port', comment: 'Kubernetes nodeport TCP port for masquerade purpose' },
  { key: 'nodePortLocalTCP', type: 'bitmap:port', comment: 'Kubernetes nodeport TCP port with externalTrafficPolicy=local' },
  { key: 'nodePortUDP', type: 'bitmap:port', comment: 'Kubernetes nodeport UDP port for masquerade purpose' },
  { key: 'nodePortLocalUDP', type: 'bitmap:port', comment: 'Kubernetes nodeport UDP port with externalTrafficPolicy=local' },
  { key: 'nodePortSCTP', type: 'hash:ip,port', comment: "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'" },
  { key: 'nodePortLocalSCTP', type: 'hash:ip,port', comment: "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'" },
  { key: 'healthCheckNodePort', type: 'bitmap:port', comment: 'Kubernetes health check node port' },
  { key: 'ipvsIPs', type: 'hash:ip', comment: 'Addresses on the ipvs interface' },
];

/** LEGACY_SETS are names older kube-proxy versions created (SCTP node ports as bitmaps); only ever destroyed. */
export const LEGACY_SETS = ['KUBE-NODE-PORT-SCTP', 'KUBE-NODE-PORT-LOCAL-SCTP'];

/**
 * setName is a set's name in a family: IPv6 sets are "KUBE-6-..." (cut to the
 * kernel's 31 characters), so both families' sets live side by side, as kube-proxy names them.
 */
export function setName(key: SetKey, family: IPFamily): string {
  const name: string = SET[key];
  if (family === 'IPv4') return name;
  return name.replace(/^KUBE-/, 'KUBE-6-').slice(0, 31);
}

/** setSpec is how a set of IPVS mode is created in a family. */
export function setSpec(info: IpsetInfo, family: IPFamily): IpsetSpec {
  return { name: setName(info.key, family), type: info.type, family: info.type === 'bitmap:port' ? null : family === 'IPv6' ? 'inet6' : 'inet' };
}

/** allSetNames are every set name kproxy or kube-proxy may have made in IPVS mode (both families, legacy). */
export function allSetNames(): string[] {
  const out = new Set<string>();
  for (const i of IPSETS) for (const f of ['IPv4', 'IPv6'] as const) out.add(setName(i.key, f));
  for (const n of LEGACY_SETS) {
    out.add(n);
    out.add(n.replace(/^KUBE-/, 'KUBE-6-'));
  }
  return [...out];
}

/**
 * plan: the test cluster's addresses, in one place so manifests, topology and
 * tests agree on them. See topology.ts for the picture.
 */

export interface Pod {
  readonly name: string;
  readonly ip: string;
  /** ip6: the pod's IPv6 address (a dual-stack cluster gives every pod both). */
  readonly ip6: string;
  /** node: the Kubernetes node name the pod runs on. */
  readonly node: string;
}

export const CLIENT_IP = '10.0.0.2';
/** OTHER_CLIENT_IP: the client's second address (a source outside a load balancer's allowed range). */
export const OTHER_CLIENT_IP = '10.0.0.3';
export const NODE_A = { name: 'node-a', ip: '10.0.0.10', podCIDR: '10.244.0.0/24', podGateway: '10.244.0.1' } as const;
export const NODE_B = { name: 'node-b', ip: '10.0.1.11', podCIDR: '10.244.1.0/24', podGateway: '10.244.1.1' } as const;
/** NODE_A_TO_B: node-a's address on its link to node-b (the source node-b's pods see after masquerade). */
export const NODE_A_TO_B = '10.0.1.10';
export const EXTERNAL_IP = '10.0.0.20';
export const LB_IP = '10.0.0.21';
export const CLUSTER_CIDR = '10.244.0.0/16';

/**
 * The IPv6 half of a dual-stack test cluster (TestCluster.create({ ipv6: true })):
 * the same links carry ULA addresses (fd00::/8), added with nodad so they work
 * at once instead of after duplicate address detection.
 */
export const CLIENT_IP6 = 'fd00::2';
export const OTHER_CLIENT_IP6 = 'fd00::3';
export const NODE_A6 = { ip: 'fd00::10', podCIDR: 'fd00:10:244::/64', podGateway: 'fd00:10:244::1' } as const;
export const NODE_B6 = { ip: 'fd00:1::11', podCIDR: 'fd00:10:244:1::/64', podGateway: 'fd00:10:244:1::1' } as const;
export const NODE_A_TO_B6 = 'fd00:1::10';
export const EXTERNAL_IP6 = 'fd00::20';
export const LB_IP6 = 'fd00::21';
export const CLUSTER_CIDR6 = 'fd00:10:244::/56';
export const POD_TCP_PORT = 8080;
export const POD_UDP_PORT = 9053;
/** POD_BULK_PORT: the pods' bulk-transfer port (backend-server.ts --bulk). */
export const POD_BULK_PORT = 8090;

export const PODS = {
  a0: { name: 'a0', ip: '10.244.0.11', ip6: 'fd00:10:244::11', node: NODE_A.name },
  a1: { name: 'a1', ip: '10.244.0.12', ip6: 'fd00:10:244::12', node: NODE_A.name },
  a2: { name: 'a2', ip: '10.244.0.13', ip6: 'fd00:10:244::13', node: NODE_A.name },
  b0: { name: 'b0', ip: '10.244.1.11', ip6: 'fd00:10:244:1::11', node: NODE_B.name },
  b1: { name: 'b1', ip: '10.244.1.12', ip6: 'fd00:10:244:1::12', node: NODE_B.name },
} as const satisfies Record<string, Pod>;
export type PodName = keyof typeof PODS;

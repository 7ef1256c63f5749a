/**
 * plan: the test cluster's addresses, in one place so manifests, topology and
 * tests agree on them. See topology.ts for the picture.
 */

export interface Pod {
  readonly name: string;
  readonly ip: string;
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
export const POD_TCP_PORT = 8080;
export const POD_UDP_PORT = 9053;

export const PODS = {
  a0: { name: 'a0', ip: '10.244.0.11', node: NODE_A.name },
  a1: { name: 'a1', ip: '10.244.0.12', node: NODE_A.name },
  a2: { name: 'a2', ip: '10.244.0.13', node: NODE_A.name },
  b0: { name: 'b0', ip: '10.244.1.11', node: NODE_B.name },
  b1: { name: 'b1', ip: '10.244.1.12', node: NODE_B.name },
} as const satisfies Record<string, Pod>;
export type PodName = keyof typeof PODS;

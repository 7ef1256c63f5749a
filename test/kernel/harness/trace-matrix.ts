import type { TraceFrom, TraceVerdict } from '../../../server/dashboard/protocol.ts';
import { ready, tcpPort, type EndpointSpec, type ServiceSpec } from './manifests.ts';
import { CLIENT_IP, EXTERNAL_IP, LB_IP, NODE_A, OTHER_CLIENT_IP, PODS, POD_UDP_PORT, type PodName } from './plan.ts';

/**
 * The packet tracer's behaviour matrix: the Services of the test cluster and
 * one packet per row, with what must happen to it. The kernel tier sends each
 * row's packet for real with the kernel's own tracing on and compares
 * (tracer-agrees.test.ts); the unit tier traces the same rows over rule sets
 * recorded from that cluster (server/trace/testdata, recorded by
 * test/kernel/record-trace-testdata.ts).
 */
const { a0, a1, a2, b0, b1 } = PODS;

export const HEALTH_CHECK_NODE_PORT = 32100;

export const MATRIX_SERVICES: readonly { spec: ServiceSpec; endpoints: EndpointSpec[] | null }[] = [
  { spec: { name: 'spread', clusterIP: '10.96.0.10', ports: tcpPort(80) }, endpoints: ready(a0, a1, a2, b0) },
  { spec: { name: 'empty', clusterIP: '10.96.0.11', ports: tcpPort(80) }, endpoints: null },
  { spec: { name: 'nodeport', type: 'NodePort', clusterIP: '10.96.0.12', ports: tcpPort(80, 30080) }, endpoints: ready(a0, b0) },
  { spec: { name: 'external', clusterIP: '10.96.0.13', externalIPs: [EXTERNAL_IP], ports: tcpPort(8000) }, endpoints: ready(a1) },
  {
    spec: { name: 'lb', type: 'LoadBalancer', clusterIP: '10.96.0.14', loadBalancerIP: LB_IP, loadBalancerSourceRanges: [`${CLIENT_IP}/32`], ports: tcpPort(80, 30084) },
    endpoints: ready(a2),
  },
  { spec: { name: 'etp-local', type: 'NodePort', externalTrafficPolicy: 'Local', clusterIP: '10.96.0.15', ports: tcpPort(80, 30082) }, endpoints: ready(a0, b0, b1) },
  { spec: { name: 'etp-remote', type: 'NodePort', externalTrafficPolicy: 'Local', clusterIP: '10.96.0.16', ports: tcpPort(80, 30083) }, endpoints: ready(b0) },
  { spec: { name: 'itp-remote', internalTrafficPolicy: 'Local', clusterIP: '10.96.0.23', ports: tcpPort(80) }, endpoints: ready(b0, b1) },
  { spec: { name: 'sticky', sessionAffinity: 'ClientIP', clusterIP: '10.96.0.18', ports: tcpPort(80) }, endpoints: ready(a0, a1, a2) },
  { spec: { name: 'dns', clusterIP: '10.96.0.20', ports: [{ name: 'dns', protocol: 'UDP', port: 53, targetPort: POD_UDP_PORT }] }, endpoints: ready(a1, a2) },
  {
    spec: {
      name: 'health',
      type: 'LoadBalancer',
      externalTrafficPolicy: 'Local',
      clusterIP: '10.96.0.25',
      loadBalancerIP: '10.0.0.22',
      healthCheckNodePort: HEALTH_CHECK_NODE_PORT,
      ports: tcpPort(80, 30085),
    },
    endpoints: ready(a1),
  },
];

/** SERVICE_CIDR: the ServiceCIDR object of the cluster (nftables mode drops its unallocated addresses). */
export const SERVICE_CIDR = '10.96.0.0/16';

/** Where a row's packet is sent from: the client namespace (from one of its two addresses), node-a itself, or a pod. */
export type Sender = { readonly ns: 'client'; readonly ip: string } | { readonly ns: 'node-a'; readonly ip: string } | { readonly ns: PodName; readonly ip: string };

export interface MatrixRow {
  readonly name: string;
  readonly proto: 'tcp' | 'udp';
  readonly from: TraceFrom;
  readonly sender: Sender;
  readonly dst: string;
  readonly port: number;
  /** verdict per mode (iptables and nftables differ only where kube-proxy's modes do). */
  readonly verdict: { readonly iptables: TraceVerdict; readonly nftables: TraceVerdict };
  /** backends: the pods a dnat verdict may reach. */
  readonly backends?: readonly PodName[];
}

const client = (ip = CLIENT_IP): Sender => ({ ns: 'client', ip });
const both = (v: TraceVerdict) => ({ iptables: v, nftables: v });

export const MATRIX_ROWS: readonly MatrixRow[] = [
  { name: 'cluster-ip', proto: 'tcp', from: 'external', sender: client(), dst: '10.96.0.10', port: 80, verdict: both('dnat'), backends: ['a0', 'a1', 'a2', 'b0'] },
  { name: 'cluster-ip-from-pod', proto: 'tcp', from: 'pod', sender: { ns: 'a2', ip: a2.ip }, dst: '10.96.0.10', port: 80, verdict: both('dnat'), backends: ['a0', 'a1', 'a2', 'b0'] },
  { name: 'cluster-ip-from-node', proto: 'tcp', from: 'node', sender: { ns: 'node-a', ip: NODE_A.ip }, dst: '10.96.0.10', port: 80, verdict: both('dnat'), backends: ['a0', 'a1', 'a2', 'b0'] },
  { name: 'node-port', proto: 'tcp', from: 'external', sender: client(), dst: NODE_A.ip, port: 30080, verdict: both('dnat'), backends: ['a0', 'b0'] },
  { name: 'no-endpoints', proto: 'tcp', from: 'external', sender: client(), dst: '10.96.0.11', port: 80, verdict: both('reject') },
  { name: 'etp-local-with-local-endpoint', proto: 'tcp', from: 'external', sender: client(), dst: NODE_A.ip, port: 30082, verdict: both('dnat'), backends: ['a0'] },
  { name: 'etp-local-without-local-endpoint', proto: 'tcp', from: 'external', sender: client(), dst: NODE_A.ip, port: 30083, verdict: both('drop') },
  { name: 'itp-local-without-local-endpoint', proto: 'tcp', from: 'pod', sender: { ns: 'a0', ip: a0.ip }, dst: '10.96.0.23', port: 80, verdict: both('drop') },
  { name: 'source-range-allowed', proto: 'tcp', from: 'external', sender: client(), dst: LB_IP, port: 80, verdict: both('dnat'), backends: ['a2'] },
  { name: 'source-range-blocked', proto: 'tcp', from: 'external', sender: client(OTHER_CLIENT_IP), dst: LB_IP, port: 80, verdict: both('drop') },
  { name: 'external-ip', proto: 'tcp', from: 'external', sender: client(), dst: EXTERNAL_IP, port: 8000, verdict: both('dnat'), backends: ['a1'] },
  { name: 'affinity', proto: 'tcp', from: 'external', sender: client(), dst: '10.96.0.18', port: 80, verdict: both('dnat'), backends: ['a0', 'a1', 'a2'] },
  { name: 'udp', proto: 'udp', from: 'external', sender: client(), dst: '10.96.0.20', port: 53, verdict: both('dnat'), backends: ['a1', 'a2'] },
  // kube-proxy's iptables mode leaves a cluster IP's other ports alone; its nftables mode rejects them (cluster-ips-check).
  { name: 'unknown-port', proto: 'tcp', from: 'external', sender: client(), dst: '10.96.0.10', port: 81, verdict: { iptables: 'none', nftables: 'reject' } },
  // iptables mode accepts health check node ports in filter KUBE-NODEPORTS; nftables mode has no such rule.
  { name: 'health-check-node-port', proto: 'tcp', from: 'external', sender: client(), dst: NODE_A.ip, port: HEALTH_CHECK_NODE_PORT, verdict: { iptables: 'accept', nftables: 'none' } },
  { name: 'not-a-service', proto: 'tcp', from: 'external', sender: client(), dst: NODE_A.ip, port: 22, verdict: both('none') },
];

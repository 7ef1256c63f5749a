/**
 * dataplane measures what the rules cost a packet: TCP connect time from a
 * client namespace, through the node namespace running kproxy, to a backend
 * namespace, via a service that sorts last in KUBE-SERVICES (so its SYN meets
 * every other service's rule first; iptables matches linearly) and straight to
 * the backend's pod IP (which walks KUBE-SERVICES without a match).
 *
 *   client 192.168.200.2 ── node 192.168.200.1 | 10.64.255.1 ── backend 10.64.255.2:8080
 */
import { join } from 'node:path';
import type { EndpointSlice, Service } from '../../server/proxy/kube-objects.ts';
import { Agent } from './daemon.ts';
import { writeAtomically } from './manifests.ts';
import { createNetns, deleteNetns, sh, vethPair } from './netns.ts';
import { percentiles, type Percentiles } from './stats.ts';

export const PROBE_IP = '10.111.255.254';
const BACKEND_IP = '10.64.255.2';
const BACKEND_PORT = 8080;

/** writeProbe adds the probe service ("zzz-probe/probe" sorts after every generated one). */
export function writeProbe(dir: string): void {
  const svc: Service = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'probe', namespace: 'zzz-probe' },
    spec: { clusterIP: PROBE_IP, ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: BACKEND_PORT }] },
  };
  const slice: EndpointSlice = {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: 'probe-1', namespace: 'zzz-probe', labels: { 'kubernetes.io/service-name': 'probe' } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: BACKEND_PORT, protocol: 'TCP' }],
    endpoints: [{ addresses: [BACKEND_IP], conditions: { ready: true }, nodeName: 'node-1' }],
  };
  writeAtomically(dir, 'probe.json', JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [svc, slice] }));
}

export interface DataPlane {
  readonly client: Agent;
  readonly backend: Agent;
  close(): void;
}

/** wireDataPlane makes the client and backend namespaces and links them to the node namespace. */
export async function wireDataPlane(nodeNs: string): Promise<DataPlane> {
  const clientNs = createNetns('client');
  const backendNs = createNetns('backend');
  vethPair(nodeNs, 'kb-c', '192.168.200.1/24', clientNs, 'kb-n', '192.168.200.2/24');
  vethPair(nodeNs, 'kb-b', '10.64.255.1/24', backendNs, 'kb-n', `${BACKEND_IP}/24`);
  sh('ip', ['netns', 'exec', nodeNs, 'sysctl', '-q', '-w', 'net.ipv4.ip_forward=1']);
  sh('ip', ['-n', clientNs, 'route', 'add', '10.96.0.0/12', 'via', '192.168.200.1']);
  sh('ip', ['-n', clientNs, 'route', 'add', '10.64.0.0/10', 'via', '192.168.200.1']);
  sh('ip', ['-n', backendNs, 'route', 'add', 'default', 'via', '10.64.255.1']);
  const client = new Agent(clientNs);
  const backend = new Agent(backendNs);
  await backend.call({ op: 'listen', port: BACKEND_PORT });
  return {
    client,
    backend,
    close() {
      client.stop();
      backend.stop();
      deleteNetns(clientNs);
      deleteNetns(backendNs);
    },
  };
}

export interface ConnectTimes {
  /** viaService: null before kproxy programmed the service. */
  readonly viaService: Percentiles | null;
  readonly toPod: Percentiles;
  readonly failures: number;
}

async function times(dp: DataPlane, host: string, port: number, count: number): Promise<{ p: Percentiles; failures: number }> {
  const r = (await dp.client.call({ op: 'connect', host, port, count }, 600_000)) as unknown as { times: number[]; failures: number };
  return { p: percentiles(r.times), failures: r.failures };
}

/** measureConnects opens count connections straight to the pod and, once programmed, count through the probe service. */
export async function measureConnects(dp: DataPlane, count: number, viaService = true): Promise<ConnectTimes> {
  await times(dp, BACKEND_IP, BACKEND_PORT, 50); // warm up ARP and neighbour entries
  const pod = await times(dp, BACKEND_IP, BACKEND_PORT, count);
  const svc = viaService ? await times(dp, PROBE_IP, 80, count) : null;
  return { viaService: svc?.p ?? null, toPod: pod.p, failures: (svc?.failures ?? 0) + pod.failures };
}

export const PROBE_FILE = (dir: string) => join(dir, 'probe.json');

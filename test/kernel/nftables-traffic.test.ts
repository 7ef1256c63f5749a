import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { waitFor } from '../wait.ts';
import { diagnosed } from './harness/diagnostics.ts';
import { ipBatch } from './harness/netns.ts';
import { nodeObject, ready, serviceCIDRObject, tcpPort, type EndpointSpec, type ServiceSpec } from './harness/manifests.ts';
import { CLIENT_IP, EXTERNAL_IP, LB_IP, NODE_A, NODE_A_TO_B, NODE_B, OTHER_CLIENT_IP, PODS, POD_UDP_PORT } from './harness/plan.ts';
import { TestCluster } from './harness/topology.ts';

/**
 * kproxy's nftables mode with real packets: the daemon on node-a programs the
 * `ip kube-proxy` table from a manifest folder (with a ServiceCIDR), and a
 * client namespace, the node itself and pods connect through it to backend
 * pods on node-a and node-b. Each backend answers with its name and the source
 * address it saw. One row per feature of the behaviour matrix (SCTP is not in
 * this kernel; its rules are loaded by the golden tables' kernel test).
 */
const { a0, a1, a2, b0, b1 } = PODS;

const spread: ServiceSpec = { name: 'spread', clusterIP: '10.96.0.10', ports: tcpPort(80) };
const empty: ServiceSpec = { name: 'empty', clusterIP: '10.96.0.11', ports: tcpPort(80) };
const nodePort: ServiceSpec = { name: 'nodeport', type: 'NodePort', clusterIP: '10.96.0.12', ports: tcpPort(80, 30080) };
const external: ServiceSpec = { name: 'external', clusterIP: '10.96.0.13', externalIPs: [EXTERNAL_IP], ports: tcpPort(8000) };
const lb: ServiceSpec = { name: 'lb', type: 'LoadBalancer', clusterIP: '10.96.0.14', loadBalancerIP: LB_IP, loadBalancerSourceRanges: [`${CLIENT_IP}/32`], ports: tcpPort(80, 30084) };
const etpLocal: ServiceSpec = { name: 'etp-local', type: 'NodePort', externalTrafficPolicy: 'Local', clusterIP: '10.96.0.15', ports: tcpPort(80, 30082) };
const etpRemote: ServiceSpec = { name: 'etp-remote', type: 'NodePort', externalTrafficPolicy: 'Local', clusterIP: '10.96.0.16', ports: tcpPort(80, 30083) };
const itpLocal: ServiceSpec = { name: 'itp-local', internalTrafficPolicy: 'Local', clusterIP: '10.96.0.17', ports: tcpPort(80) };
const itpRemote: ServiceSpec = { name: 'itp-remote', internalTrafficPolicy: 'Local', clusterIP: '10.96.0.23', ports: tcpPort(80) };
const sticky: ServiceSpec = { name: 'sticky', sessionAffinity: 'ClientIP', clusterIP: '10.96.0.18', ports: tcpPort(80) };
const self: ServiceSpec = { name: 'self', clusterIP: '10.96.0.19', ports: tcpPort(80) };
const dns: ServiceSpec = { name: 'dns', clusterIP: '10.96.0.20', ports: [{ name: 'dns', protocol: 'UDP', port: 53, targetPort: POD_UDP_PORT }] };
const shrink: ServiceSpec = { name: 'shrink', clusterIP: '10.96.0.21', ports: tcpPort(80) };
const draining: ServiceSpec = { name: 'draining', clusterIP: '10.96.0.22', ports: tcpPort(80) };
const zoned: ServiceSpec = { name: 'zoned', clusterIP: '10.96.0.24', ports: tcpPort(80) };
const drainingEndpoints = (withReady: boolean): EndpointSpec[] => [
  ...(withReady ? [{ pod: a0 }] : []),
  { pod: a1, ready: false, serving: true, terminating: true },
  { pod: a2, ready: false, serving: false, terminating: true },
];
/** UNALLOCATED: inside the ServiceCIDR, held by no Service. */
const UNALLOCATED = '10.96.0.99';

/** DROP_WAIT_MS: how long a dropped connection attempt is given before it counts as dropped (SYN retransmits after 1 s). */
const DROP_WAIT_MS = 900;

describe.skipIf(!tiers().kernel.ok)('nftables mode with real packets', () => {
  let cluster: TestCluster | undefined;
  const spec = (body: (c: TestCluster) => Promise<void>) => () => diagnosed(cluster, () => body(cluster!));

  beforeAll(async () => {
    cluster = await TestCluster.create();
    const m = cluster.manifests;
    m.write('nodes', [nodeObject(NODE_A.name, NODE_A.ip, NODE_A.podCIDR, { zone: 'zone-a' }), nodeObject(NODE_B.name, NODE_B.ip, NODE_B.podCIDR, { zone: 'zone-b' })]);
    m.write('service-cidr', [serviceCIDRObject('kubernetes', ['10.96.0.0/16'])]);
    m.writeService(spread, ready(a0, a1, a2, b0));
    m.writeService(empty, null);
    m.writeService(nodePort, ready(a0, b0));
    m.writeService(external, ready(a1));
    m.writeService(lb, ready(a2));
    m.writeService(etpLocal, ready(a0, b0, b1));
    m.writeService(etpRemote, ready(b0));
    m.writeService(itpLocal, ready(a0, a1, b0, b1));
    m.writeService(itpRemote, ready(b0, b1));
    m.writeService(sticky, ready(a0, a1, a2));
    m.writeService(self, ready(a0));
    m.writeService(dns, ready(a1, a2));
    m.writeService(shrink, ready(a0, a1));
    m.writeService(draining, drainingEndpoints(true));
    m.writeService(zoned, [
      { pod: a0, zone: 'zone-a', forZones: ['zone-a'] },
      { pod: a1, zone: 'zone-a', forZones: ['zone-a'] },
      { pod: b0, zone: 'zone-b', forZones: ['zone-b'] },
      { pod: b1, zone: 'zone-b', forZones: ['zone-b'] },
    ]);
    await cluster.startKproxy('nft', ['--proxy-mode', 'nftables']);
  });

  afterAll(async () => {
    await cluster?.destroy();
  });

  it(
    'programs the kube-proxy table and no iptables rules',
    spec(async (c) => {
      expect(await c.nftTable()).toContain('chain service-');
      expect(await c.iptablesSave('nft')).not.toMatch(/KUBE-SVC-/);
    }),
  );

  it(
    'a cluster IP spreads connections across every endpoint, on this node and on the other (numgen random)',
    spec(async (c) => {
      const t = await c.client().tcp({ host: spread.clusterIP, port: 80 }, 60);
      expect(t.outcomes).toEqual({ ok: 60 });
      expect(t.backends).toEqual(['a0', 'a1', 'a2', 'b0']);
    }),
  );

  it(
    'a client outside the pod network is masqueraded; a pod keeps its own address',
    spec(async (c) => {
      const outside = await c.client().tcp({ host: spread.clusterIP, port: 80 }, 30);
      for (const a of outside.attempts) expect(a.peer).toBe(a.name === 'b0' ? NODE_A_TO_B : NODE_A.podGateway);
      const fromPod = await c.client('a2').tcp({ host: spread.clusterIP, port: 80 }, 30);
      // a2 reaching itself is hairpin-masqueraded; every other backend sees a2.
      for (const a of fromPod.attempts) expect(a.peer).toBe(a.name === 'a2' ? NODE_A.podGateway : a2.ip);
    }),
  );

  it(
    'a cluster IP without endpoints is refused at once (reject-chain), not left to time out',
    spec(async (c) => {
      const t = await c.client().tcp({ host: empty.clusterIP, port: 80, timeoutMs: 3000 }, 3);
      expect(t.outcomes).toEqual({ refused: 3 });
      expect(Math.max(...t.attempts.map((a) => a.ms))).toBeLessThan(250);
    }),
  );

  it(
    'a cluster IP on a port no Service uses is refused; an unallocated address of the ServiceCIDR is dropped',
    spec(async (c) => {
      const wrongPort = await c.client().tcp({ host: spread.clusterIP, port: 81, timeoutMs: 3000 });
      expect(wrongPort.outcomes).toEqual({ refused: 1 });
      // Beyond node-a lies the client (its default route): there an unallocated service
      // address and one outside the ServiceCIDR both exist and would refuse a connection.
      await ipBatch(c.ns.client, [`addr add ${UNALLOCATED}/32 dev lo`, 'addr add 10.98.0.1/32 dev lo']);
      const pod = c.client('a0');
      expect((await pod.tcp({ host: '10.98.0.1', port: 80, timeoutMs: 2000 })).outcomes).toEqual({ refused: 1 });
      // Inside the ServiceCIDR node-a drops it (cluster-ips-check) instead of routing it on.
      expect((await pod.tcp({ host: UNALLOCATED, port: 80, timeoutMs: DROP_WAIT_MS })).outcomes).toEqual({ timeout: 1 });
    }),
  );

  it(
    "a node port answers on the node's primary IP and masquerades the client to the node",
    spec(async (c) => {
      const t = await c.client().tcp({ host: NODE_A.ip, port: 30080 }, 30);
      expect(t.outcomes).toEqual({ ok: 30 });
      expect(t.backends).toEqual(['a0', 'b0']);
      for (const a of t.attempts) expect(a.peer).toBe(a.name === 'a0' ? NODE_A.podGateway : NODE_A_TO_B);
    }),
  );

  it(
    "node ports answer neither on localhost nor on the node's other addresses (nodePortAddresses: primary)",
    spec(async (c) => {
      const localhost = await c.client('node-a').tcp({ host: '127.0.0.1', port: 30080, timeoutMs: 2000 });
      expect(localhost.outcomes).toEqual({ refused: 1 });
      const other = await c.client().tcp({ host: EXTERNAL_IP, port: 30080, timeoutMs: 2000 });
      expect(other.outcomes).toEqual({ refused: 1 });
      // The node itself reaches a cluster IP.
      const clusterIP = await c.client('node-a').tcp({ host: spread.clusterIP, port: 80 }, 20);
      expect(clusterIP.outcomes).toEqual({ ok: 20 });
    }),
  );

  it(
    'an external IP routed to the node reaches its service',
    spec(async (c) => {
      const t = await c.client().tcp({ host: EXTERNAL_IP, port: 8000 }, 5);
      expect(t.outcomes).toEqual({ ok: 5 });
      expect(t.backends).toEqual(['a1']);
    }),
  );

  it(
    'a load balancer IP accepts sources inside loadBalancerSourceRanges and drops the others (firewall-check, before DNAT)',
    spec(async (c) => {
      const allowed = await c.client().tcp({ host: LB_IP, port: 80, from: CLIENT_IP }, 5);
      expect(allowed.outcomes).toEqual({ ok: 5 });
      expect(allowed.backends).toEqual(['a2']);
      const outside = await c.client().tcp({ host: LB_IP, port: 80, from: OTHER_CLIENT_IP, timeoutMs: DROP_WAIT_MS });
      expect(outside.outcomes).toEqual({ timeout: 1 });
      // Only the LB IP is fenced: the cluster IP and the node port take that source.
      expect((await c.client().tcp({ host: lb.clusterIP, port: 80, from: OTHER_CLIENT_IP })).backends).toEqual(['a2']);
      expect((await c.client().tcp({ host: NODE_A.ip, port: 30084, from: OTHER_CLIENT_IP })).backends).toEqual(['a2']);
    }),
  );

  it(
    "externalTrafficPolicy Local keeps the client's source IP and uses only this node's endpoints",
    spec(async (c) => {
      const t = await c.client().tcp({ host: NODE_A.ip, port: 30082 }, 20);
      expect(t.outcomes).toEqual({ ok: 20 });
      expect(t.backends).toEqual(['a0']);
      expect(t.peers).toEqual([CLIENT_IP]);
    }),
  );

  it(
    'externalTrafficPolicy Local drops node port traffic while this node has no endpoint; cluster IP traffic still works',
    spec(async (c) => {
      const t = await c.client().tcp({ host: NODE_A.ip, port: 30083, timeoutMs: DROP_WAIT_MS });
      expect(t.outcomes).toEqual({ timeout: 1 });
      expect((await c.client().tcp({ host: etpRemote.clusterIP, port: 80 }, 3)).backends).toEqual(['b0']);
    }),
  );

  it(
    'externalTrafficPolicy Local lets pods and the node itself reach every endpoint (short-circuit)',
    spec(async (c) => {
      const fromPod = await c.client('a1').tcp({ host: NODE_A.ip, port: 30083 }, 3);
      expect(fromPod.backends).toEqual(['b0']);
      expect(fromPod.peers).toEqual([a1.ip]);
      const fromNode = await c.client('node-a').tcp({ host: NODE_A.ip, port: 30083 }, 3);
      expect(fromNode.backends).toEqual(['b0']);
      expect(fromNode.peers).toEqual([NODE_A_TO_B]);
    }),
  );

  it(
    "internalTrafficPolicy Local sends cluster IP traffic only to this node's endpoints, and drops it when there are none",
    spec(async (c) => {
      const t = await c.client().tcp({ host: itpLocal.clusterIP, port: 80 }, 40);
      expect(t.outcomes).toEqual({ ok: 40 });
      expect(t.backends).toEqual(['a0', 'a1']);
      const none = await c.client('a0').tcp({ host: itpRemote.clusterIP, port: 80, timeoutMs: DROP_WAIT_MS });
      expect(none.outcomes).toEqual({ timeout: 1 });
    }),
  );

  it(
    'sessionAffinity ClientIP keeps each client on one backend (affinity sets)',
    spec(async (c) => {
      for (const from of [CLIENT_IP, OTHER_CLIENT_IP]) {
        const t = await c.client().tcp({ host: sticky.clusterIP, port: 80, from }, 20);
        expect(t.outcomes).toEqual({ ok: 20 });
        expect(t.backends).toHaveLength(1);
      }
    }),
  );

  it(
    "a pod reaching its own service is answered by itself, seeing the node's address (hairpin masquerade)",
    spec(async (c) => {
      const t = await c.client('a0').tcp({ host: self.clusterIP, port: 80 }, 3);
      expect(t.outcomes).toEqual({ ok: 3 });
      expect(t.backends).toEqual(['a0']);
      expect(t.peers).toEqual([NODE_A.podGateway]);
    }),
  );

  it(
    'a UDP service answers from every endpoint',
    spec(async (c) => {
      const t = await c.client().udp({ host: dns.clusterIP, port: 53 }, 30);
      expect(t.outcomes).toEqual({ ok: 30 });
      expect(t.backends).toEqual(['a1', 'a2']);
    }),
  );

  it(
    "topology hints keep traffic in this node's zone",
    spec(async (c) => {
      const t = await c.client().tcp({ host: zoned.clusterIP, port: 80 }, 40);
      expect(t.outcomes).toEqual({ ok: 40 });
      expect(t.backends).toEqual(['a0', 'a1']);
    }),
  );

  it(
    'removing an endpoint from the watched manifests stops traffic to it (a partial sync)',
    spec(async (c) => {
      expect((await c.client().tcp({ host: shrink.clusterIP, port: 80 }, 30)).backends).toEqual(['a0', 'a1']);
      c.manifests.writeService(shrink, ready(a0));
      // A round of 20 connections misses a still-programmed a1 with probability 2^-20.
      await waitFor(async () => !(await c.client().tcp({ host: shrink.clusterIP, port: 80 }, 20)).backends.includes('a1'), {
        timeoutMs: 10_000,
        intervalMs: 0,
        what: 'a1 to stop answering for shrink',
      });
      const after = await c.client().tcp({ host: shrink.clusterIP, port: 80 }, 40);
      expect(after.outcomes).toEqual({ ok: 40 });
      expect(after.backends).toEqual(['a0']);
    }),
  );

  it(
    'terminating endpoints that still serve take traffic only once no endpoint is ready',
    spec(async (c) => {
      expect((await c.client().tcp({ host: draining.clusterIP, port: 80 }, 20)).backends).toEqual(['a0']);
      c.manifests.writeService(draining, drainingEndpoints(false));
      await waitFor(async () => (await c.client().tcp({ host: draining.clusterIP, port: 80 })).backends.includes('a1'), {
        timeoutMs: 10_000,
        what: 'the serving terminating endpoint a1 to take over',
      });
      const fallback = await c.client().tcp({ host: draining.clusterIP, port: 80 }, 20);
      expect(fallback.outcomes).toEqual({ ok: 20 });
      expect(fallback.backends).toEqual(['a1']);
    }),
  );
});

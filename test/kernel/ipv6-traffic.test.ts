import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { waitFor } from '../wait.ts';
import { diagnosed } from './harness/diagnostics.ts';
import { HEALTHZ_PORT, type Flavor } from './harness/kproxy.ts';
import { ready, tcpPort, type ServiceSpec } from './harness/manifests.ts';
import { nsExec } from './harness/netns.ts';
import { CLIENT_IP6, NODE_A, NODE_A6, NODE_A_TO_B6, PODS, POD_UDP_PORT } from './harness/plan.ts';
import { TestCluster } from './harness/topology.ts';

/**
 * IPv6 and dual-stack with real packets, in both iptables flavours and in
 * nftables mode: a
 * dual-stack cluster (every link, pod and node has an IPv4 and an IPv6
 * address, see harness/plan.ts) where kproxy runs one proxier per family,
 * writing iptables and ip6tables (or the ip and ip6 kube-proxy tables). Every case connects over IPv6; the
 * dual-stack ones over both families at once.
 */
const { a0, a1, a2, b0, b1 } = PODS;

const spread: ServiceSpec = { name: 'spread6', clusterIP: 'fd00:10:96::10', ports: tcpPort(80) };
const dual: ServiceSpec = { name: 'dual', clusterIP: '10.96.0.40', clusterIPs: ['10.96.0.40', 'fd00:10:96::40'], ports: tcpPort(80) };
const empty: ServiceSpec = { name: 'empty6', clusterIP: 'fd00:10:96::11', ports: tcpPort(80) };
const nodePort: ServiceSpec = { name: 'nodeport6', type: 'NodePort', clusterIP: 'fd00:10:96::12', ports: tcpPort(80, 30180) };
const etpLocal: ServiceSpec = { name: 'etp-local6', type: 'NodePort', externalTrafficPolicy: 'Local', clusterIP: 'fd00:10:96::15', ports: tcpPort(80, 30182) };
const sticky: ServiceSpec = { name: 'sticky6', sessionAffinity: 'ClientIP', clusterIP: 'fd00:10:96::18', ports: tcpPort(80) };
const dns: ServiceSpec = { name: 'dns6', clusterIP: 'fd00:10:96::20', ports: [{ name: 'dns', protocol: 'UDP', port: 53, targetPort: POD_UDP_PORT }] };
const shrink: ServiceSpec = { name: 'shrink', clusterIP: '10.96.0.41', clusterIPs: ['10.96.0.41', 'fd00:10:96::41'], ports: tcpPort(80) };

/** DROP_WAIT_MS: how long a connection is given before it counts as not answered. */
const DROP_WAIT_MS = 900;

/**
 * ruleLines: the rules and map elements of a family naming a service, without
 * counters, sorted. Chain headers are left out: nftables mode flushes a stale
 * chain at once and deletes it in a later sync (as kube-proxy), and a flushed
 * chain that nothing jumps to any more carries no traffic.
 */
function ruleLines(rules: string, service: string): string[] {
  return rules
    .split('\n')
    .map((l) => l.trim().replace(/ counter packets \d+ bytes \d+/g, ''))
    .filter((l) => l.includes(service) && !l.startsWith('chain '))
    .sort();
}

/** Mode is one way kproxy programs the node: iptables in either flavour, or nftables (tables ip and ip6 kube-proxy). */
interface Mode {
  readonly name: string;
  readonly flavor: Flavor;
  readonly args: readonly string[];
  /** rules lists what the node holds for one family (iptables-save, or the family's nftables table). */
  rules(c: TestCluster, family: 'IPv4' | 'IPv6'): Promise<string>;
}
const iptablesMode = (flavor: Flavor): Mode => ({ name: `iptables mode (${flavor})`, flavor, args: [], rules: (c, family) => c.iptablesSave(flavor, family) });
const nftablesMode: Mode = {
  name: 'nftables mode',
  flavor: 'nft',
  args: ['--proxy-mode', 'nftables'],
  rules: async (c, family) => (await nsExec(c.ns.nodeA, ['nft', 'list', 'table', family === 'IPv6' ? 'ip6' : 'ip', 'kube-proxy'])).stdout,
};

describe.skipIf(!tiers().kernel.ok).each([iptablesMode('nft'), iptablesMode('legacy'), nftablesMode])('IPv6 and dual-stack in $name with real packets', (mode) => {
  let cluster: TestCluster | undefined;
  const spec = (body: (c: TestCluster) => Promise<void>) => () => diagnosed(cluster, () => body(cluster!));

  beforeAll(async () => {
    cluster = await TestCluster.create({ ipv6: true });
    const m = cluster.manifests;
    m.writeService(spread, ready(a0, a1, b0));
    m.writeService(dual, ready(a0, b0));
    m.writeService(empty, null);
    m.writeService(nodePort, ready(a0, b0));
    m.writeService(etpLocal, ready(a1, b0, b1));
    m.writeService(sticky, ready(a0, a1, a2));
    m.writeService(dns, ready(a1, a2));
    m.writeService(shrink, ready(a0, a1));
    await cluster.startKproxy(mode.flavor, mode.args);
  });

  afterAll(async () => {
    await cluster?.destroy();
  });

  it(
    'runs one proxier per family: healthz reports both, the IPv6 tables hold the IPv6 services',
    spec(async (c) => {
      const h = await c.kproxy.curl(`http://${NODE_A.ip}:${HEALTHZ_PORT}/healthz`);
      expect(h.status).toBe(200);
      const body = JSON.parse(h.body) as { status: Record<string, { healthy: boolean }> };
      expect(Object.keys(body.status).sort()).toEqual(['IPv4', 'IPv6']);
      expect(body.status.IPv6.healthy).toBe(true);
      const v6 = await mode.rules(c, 'IPv6');
      expect(v6).toContain(spread.clusterIP);
      expect(v6).toContain('kpt/spread6');
      const v4 = await mode.rules(c, 'IPv4');
      expect(v4).not.toContain('spread6');
      expect(v4).toContain('kpt/dual');
      expect(v4).toContain('10.96.0.40');
    }),
  );

  it(
    'an IPv6 cluster IP spreads connections across every IPv6 endpoint, on this node and the other',
    spec(async (c) => {
      const t = await c.client().tcp({ host: spread.clusterIP, port: 80 }, 60);
      expect(t.outcomes).toEqual({ ok: 60 });
      expect(t.backends).toEqual(['a0', 'a1', 'b0']);
    }),
  );

  it(
    'a dual-stack Service answers on both of its cluster IPs at once',
    spec(async (c) => {
      const [v4, v6] = await Promise.all([c.client('a2').tcpFor({ host: '10.96.0.40', port: 80 }, 1500), c.client().tcpFor({ host: 'fd00:10:96::40', port: 80 }, 1500)]);
      expect(Object.keys(v4.outcomes)).toEqual(['ok']);
      expect(Object.keys(v6.outcomes)).toEqual(['ok']);
      expect(v4.backends).toEqual(['a0', 'b0']);
      expect(v6.backends).toEqual(['a0', 'b0']);
      // Each family reached the pods over its own addresses: the backends saw an IPv4 and an IPv6 client.
      expect(v4.peers.every((p) => !p.includes(':'))).toBe(true);
      expect(v6.peers.every((p) => p.includes(':'))).toBe(true);
    }),
  );

  // The REJECT answers every SYN with ICMPv6 port unreachable, but this kernel's
  // TCP (seen on 6.18) fails a connecting IPv6 socket only on the unreachable
  // for its retransmitted SYN, 1 s later (IPv4 fails on the first one): so
  // "refused within one SYN retransmit" rather than the IPv4 test's 250 ms.
  // Measured with plain ip6tables REJECT outside kproxy too: 2 unreachables per connect.
  it(
    'an IPv6 cluster IP without endpoints is refused (ICMPv6 port unreachable), not left to time out',
    spec(async (c) => {
      const t = await c.client().tcp({ host: empty.clusterIP, port: 80, timeoutMs: 3000 }, 3);
      expect(t.outcomes).toEqual({ refused: 3 });
      console.info(`[measured] IPv6 connections to a service without endpoints refused within ${t.attempts.map((a) => Math.round(a.ms)).join(', ')} ms`);
      expect(Math.max(...t.attempts.map((a) => a.ms))).toBeLessThan(2000);
    }),
  );

  it(
    'a node port answers on the node IPv6 address and masquerades the client to the node',
    spec(async (c) => {
      const t = await c.client().tcp({ host: NODE_A6.ip, port: 30180 }, 30);
      expect(t.outcomes).toEqual({ ok: 30 });
      expect(t.backends).toEqual(['a0', 'b0']);
      for (const a of t.attempts) expect(a.peer).toBe(a.name === 'a0' ? NODE_A6.podGateway : NODE_A_TO_B6);
    }),
  );

  it(
    "externalTrafficPolicy Local over IPv6: only this node's endpoint answers, and it sees the client's own address",
    spec(async (c) => {
      const t = await c.client().tcp({ host: NODE_A6.ip, port: 30182, from: CLIENT_IP6 }, 20);
      expect(t.outcomes).toEqual({ ok: 20 });
      expect(t.backends).toEqual(['a1']);
      expect(t.peers).toEqual([CLIENT_IP6]);
    }),
  );

  it(
    'ClientIP affinity over IPv6 keeps a client on one endpoint',
    spec(async (c) => {
      const t = await c.client().tcp({ host: sticky.clusterIP, port: 80 }, 20);
      expect(t.outcomes).toEqual({ ok: 20 });
      expect(t.backends).toHaveLength(1);
    }),
  );

  it(
    'UDP over IPv6 reaches the endpoints of a DNS-like service',
    spec(async (c) => {
      const t = await c.client().udp({ host: dns.clusterIP, port: 53 }, 20);
      expect(t.outcomes).toEqual({ ok: 20 });
      expect(t.backends).toEqual(['a1', 'a2']);
    }),
  );

  it(
    'removing the IPv6 family from a Service removes its IPv6 rules and leaves its IPv4 rules untouched',
    spec(async (c) => {
      const before4 = ruleLines(await mode.rules(c, 'IPv4'), 'kpt/shrink');
      expect(before4.length).toBeGreaterThan(0);
      expect(ruleLines(await mode.rules(c, 'IPv6'), 'kpt/shrink').length).toBeGreaterThan(0);
      expect((await c.client().tcp({ host: 'fd00:10:96::41', port: 80 }, 3)).outcomes).toEqual({ ok: 3 });
      c.manifests.writeService({ ...shrink, clusterIPs: ['10.96.0.41'], ipFamilyPolicy: 'SingleStack' }, ready(a0, a1));
      await waitFor(async () => ruleLines(await mode.rules(c, 'IPv6'), 'kpt/shrink').length === 0, { timeoutMs: 10_000, intervalMs: 100, what: 'the IPv6 rules of kpt/shrink to go' });
      expect(ruleLines(await mode.rules(c, 'IPv4'), 'kpt/shrink')).toEqual(before4);
      const v6 = await c.client().tcp({ host: 'fd00:10:96::41', port: 80, timeoutMs: DROP_WAIT_MS }, 1);
      expect(v6.outcomes.ok).toBeUndefined();
      expect((await c.client('a2').tcp({ host: '10.96.0.41', port: 80 }, 5)).outcomes).toEqual({ ok: 5 });
    }),
  );

  it(
    '--cleanup removes the IPv6 rules too',
    spec(async (c) => {
      await c.kproxy.stop();
      const r = await c.kproxy.command(['--cleanup']);
      expect(r.code).toBe(0);
      for (const bin of ['ip6tables-nft-save', 'ip6tables-legacy-save', 'iptables-nft-save']) {
        const save = await nsExec(c.ns.nodeA, [bin]);
        expect(save.stdout, bin).not.toMatch(/KUBE-/);
      }
      expect((await nsExec(c.ns.nodeA, ['nft', 'list', 'tables'])).stdout).not.toContain('kube-proxy');
    }),
  );
});

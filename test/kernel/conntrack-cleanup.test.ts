import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseFlowLine } from '../../server/kernel/conntrack.ts';
import { tiers } from '../tiers.ts';
import { waitFor } from '../wait.ts';
import { ADDR, CLI, CtNet, writeAtomically, type Proc } from './conntrack-net.ts';

/**
 * Stale UDP conntrack entries on the real kernel. A client keeps sending from
 * one source port to a UDP service; the service's endpoint is replaced in the
 * manifest the daemon follows. The old backend keeps answering, so without
 * the cleanup the client's entry (refreshed by every packet) would keep it
 * pinned there; with it, the next packet is DNATed afresh, to the new backend.
 * An idle flow to another service, through the very same backend address,
 * keeps its entry.
 */

const DNS_VIP = '10.96.0.10';
const SYSLOG_VIP = '10.96.0.20';
const NODE_PORT = 30053;

function manifest(dnsEndpoint: string): string {
  const slice = (svc: string, ip: string, port: { name: string; port: number }) => `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: ${svc}-1, namespace: default, labels: {kubernetes.io/service-name: ${svc}}}
addressType: IPv4
endpoints: [{addresses: ["${ip}"], conditions: {ready: true, serving: true, terminating: false}}]
ports: [{name: ${port.name}, port: ${port.port}, protocol: UDP}]
`;
  return [
    `apiVersion: v1
kind: Service
metadata: {name: dns, namespace: default}
spec:
  type: NodePort
  clusterIP: ${DNS_VIP}
  ports: [{name: dns, port: 53, targetPort: 5353, nodePort: ${NODE_PORT}, protocol: UDP}]
`,
    slice('dns', dnsEndpoint, { name: 'dns', port: 5353 }),
    `apiVersion: v1
kind: Service
metadata: {name: syslog, namespace: default}
spec:
  clusterIP: ${SYSLOG_VIP}
  ports: [{name: syslog, port: 514, protocol: UDP}]
`,
    slice('syslog', ADDR.b1, { name: 'syslog', port: 514 }),
  ].join('---\n');
}

/** answers reads a client's JSON lines: who answered, when. */
function answers(p: Proc): { t: number; from: string }[] {
  return p.out.map((l) => JSON.parse(l.text) as { t: number; from: string });
}

let net: CtNet | null = null;
afterEach(async () => {
  await net?.down();
  net = null;
});

/** Scenario is a running network: the daemon, the clients sending to dns, the idle syslog client. */
interface Scenario {
  readonly net: CtNet;
  readonly daemon: Proc;
  readonly viaVip: Proc;
  readonly viaNodePort: Proc;
  readonly file: string;
  log(): string;
}

/** start builds the network, starts the daemon (with env, e.g. a PATH without conntrack) and the dns clients on b1. */
async function start(n: CtNet, flavor: 'nft' | 'legacy', env?: NodeJS.ProcessEnv): Promise<Scenario> {
  await n.up();
  const { node, client, b1, b2 } = n.ns;
  const dir = await n.tempDir();
  const file = join(dir, 'cluster.yaml');
  await writeAtomically(file, manifest(ADDR.b1));
  n.udpServer(b1, 'b1', [5353, 514]);
  n.udpServer(b2, 'b2', [5353]);
  const daemon = n.spawn(
    node,
    [
      process.execPath,
      CLI,
      '--source',
      `file:${dir}`,
      '--hostname-override',
      'node-a',
      '--cluster-cidr',
      '10.244.0.0/16',
      '--iptables-flavor',
      flavor,
      '--metrics-bind-address',
      '127.0.0.1:10249',
      '--healthz-bind-address',
      '127.0.0.1:10256',
    ],
    env,
  );
  const log = () => daemon.err.map((l) => l.text).join('\n');
  await waitFor(() => /synced fully/.test(log()), { timeoutMs: 60_000, what: `the first sync\n${log()}` });
  const viaVip = n.udpClient(client, { sport: 45000, dst: DNS_VIP, port: 53 });
  const viaNodePort = n.udpClient(client, { sport: 45001, dst: ADDR.node, port: NODE_PORT });
  await waitFor(() => answers(viaVip).length >= 5 && answers(viaNodePort).length >= 5, { what: 'answers from dns' });
  expect(new Set([...answers(viaVip), ...answers(viaNodePort)].map((a) => a.from))).toEqual(new Set(['b1:5353']));
  return { net: n, daemon, viaVip, viaNodePort, file, log };
}

describe.skipIf(!tiers().kernel.ok)('stale UDP conntrack entries on the real kernel', () => {
  for (const flavor of ['nft', 'legacy'] as const) {
    it(`iptables-${flavor}: after its endpoint is replaced, a sending client reaches the new endpoint; an unrelated flow's entry survives`, async () => {
      net = new CtNet(flavor);
      const { node, client } = net.ns;
      const s = await start(net, flavor);

      // The unrelated flow: a few packets to syslog through b1, then idle (nothing would make its entry again).
      const unrelated = net.udpClient(client, { sport: 46000, dst: SYSLOG_VIP, port: 514, count: 3 });
      await waitFor(() => answers(unrelated).length === 3, { what: 'answers from syslog' });
      // An entry is its tuples and its conntrack id (the timeout counts down, so it is left out).
      const syslogEntries = async () => {
        const out = await net!.exec(node, ['conntrack', '-L', '-p', 'udp', '--orig-dst', SYSLOG_VIP, '-o', 'id']);
        return out.split('\n').flatMap((l) => {
          const flow = parseFlowLine(l);
          return flow ? [{ ...flow, id: /id=(\d+)/.exec(l)?.[1] }] : [];
        });
      };
      const before = await syslogEntries();
      expect(before).toEqual([expect.objectContaining({ orig: expect.objectContaining({ sport: 46000, dport: 514 }), reply: expect.objectContaining({ src: ADDR.b1 }) })]);
      expect(before[0].id).toMatch(/^\d+$/);

      const changedAt = Date.now();
      await writeAtomically(s.file, manifest(ADDR.b2));
      const moved = (p: Proc) => answers(p).find((a) => a.t > changedAt && a.from === 'b2:5353');
      await waitFor(() => moved(s.viaVip) && moved(s.viaNodePort), { timeoutMs: 10_000, what: `both dns clients to reach b2\n${s.log()}` });
      const latencyMs = Math.max(moved(s.viaVip)!.t, moved(s.viaNodePort)!.t) - changedAt;
      process.stderr.write(`[conntrack-cleanup ${flavor}] manifest change to first answer from the new endpoint: ${latencyMs} ms\n`);

      // Once moved, the clients stay on b2: nothing sends them back to the old endpoint.
      const settledAt = Date.now();
      await waitFor(() => answers(s.viaVip).filter((a) => a.t > settledAt).length >= 5, { what: 'more answers' });
      expect(
        new Set(
          answers(s.viaVip)
            .filter((a) => a.t > settledAt)
            .map((a) => a.from),
        ),
      ).toEqual(new Set(['b2:5353']));

      // The idle syslog entry is the same entry (same conntrack id): it was never deleted.
      expect(await syslogEntries()).toEqual(before);

      const metrics = await net.exec(node, ['curl', '-s', 'http://127.0.0.1:10249/metrics']);
      const deleted = Number(/kubeproxy_conntrack_reconciler_deleted_entries_total\{ip_family="IPv4"\} (\d+)/.exec(metrics)?.[1]);
      expect(deleted).toBeGreaterThanOrEqual(2);
      expect(metrics).toMatch(/kproxy_conntrack_cleanup_enabled 1/);
      expect(s.log()).toMatch(/conntrack cleanup pass .*deleted=[1-9]/);
    });
  }

  it('control: without the conntrack binary the cleaner is off (one warning, metric 0) and the client stays pinned to the old endpoint', async () => {
    net = new CtNet('control');
    const path = await net.pathWithout('conntrack');
    const s = await start(net, 'nft', { ...process.env, PATH: path });
    const changedAt = Date.now();
    await writeAtomically(s.file, manifest(ADDR.b2));
    await waitFor(
      () =>
        s
          .log()
          .split('\n')
          .filter((l) => l.includes('synced partially')).length > 0,
      { what: `the sync of the change\n${s.log()}` },
    );
    // Ten times the latency measured with the cleaner on.
    await new Promise((r) => setTimeout(r, 4000));
    const after = answers(s.viaVip).filter((a) => a.t > changedAt);
    expect(after.length).toBeGreaterThan(20);
    expect(new Set(after.map((a) => a.from))).toEqual(new Set(['b1:5353']));
    // A new flow (new source port) does reach b2: the rules are right, only the old entry pins the client.
    const fresh = net.udpClient(net.ns.client, { sport: 45002, dst: DNS_VIP, port: 53, count: 3 });
    await waitFor(() => answers(fresh).length > 0, { what: 'an answer to a new flow' });
    expect(answers(fresh)[0].from).toBe('b2:5353');

    const warnings = s
      .log()
      .split('\n')
      .filter((l) => l.includes('conntrack cleanup disabled'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('conntrack is not installed');
    const metrics = await net.exec(net.ns.node, ['curl', '-s', 'http://127.0.0.1:10249/metrics']);
    expect(metrics).toMatch(/kproxy_conntrack_cleanup_enabled 0/);
  });
});

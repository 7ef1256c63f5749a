import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { ConntrackInfo, ServiceConntrack } from '../../server/dashboard/protocol.ts';
import { tiers } from '../tiers.ts';
import { waitFor } from '../wait.ts';
import { ADDR, CLI, CtNet, writeAtomically, type Proc } from './conntrack-net.ts';

/**
 * Conntrack counts on the real kernel: clients in their own namespace send
 * UDP to two services through a daemon in the node namespace; the dashboard
 * API counts each service's flows from the kernel's table (the per-service
 * route) and reads the node's total and limit from /proc.
 */

const DNS_VIP = '10.96.0.10';
const SYSLOG_VIP = '10.96.0.20';

const MANIFEST = `apiVersion: v1
kind: Service
metadata: {name: dns, namespace: default}
spec:
  clusterIP: ${DNS_VIP}
  ports: [{name: dns, port: 53, targetPort: 5353, protocol: UDP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: dns-1, namespace: default, labels: {kubernetes.io/service-name: dns}}
addressType: IPv4
endpoints: [{addresses: ["${ADDR.b1}"], conditions: {ready: true, serving: true, terminating: false}}]
ports: [{name: dns, port: 5353, protocol: UDP}]
---
apiVersion: v1
kind: Service
metadata: {name: syslog, namespace: default}
spec:
  clusterIP: ${SYSLOG_VIP}
  ports: [{name: syslog, port: 514, protocol: UDP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: syslog-1, namespace: default, labels: {kubernetes.io/service-name: syslog}}
addressType: IPv4
endpoints: [{addresses: ["${ADDR.b1}"], conditions: {ready: true, serving: true, terminating: false}}]
ports: [{name: syslog, port: 514, protocol: UDP}]
`;

const answered = (p: Proc) => p.out.length;

let net: CtNet | null = null;
afterEach(async () => {
  await net?.down();
  net = null;
});

describe.skipIf(!tiers().kernel.ok)('conntrack counts on the real kernel', () => {
  it('the API counts the tracked flows to each service frontend, and reads the node total and limit', async () => {
    net = new CtNet('count');
    await net.up();
    const { node, client, b1 } = net.ns;
    const dir = await net.tempDir();
    await writeAtomically(join(dir, 'cluster.yaml'), MANIFEST);
    net.udpServer(b1, 'b1', [5353, 514]);
    const daemon = net.spawn(node, [
      process.execPath,
      CLI,
      '--source',
      `file:${dir}`,
      '--hostname-override',
      'node-a',
      '--cluster-cidr',
      '10.244.0.0/16',
      '--iptables-flavor',
      'nft',
      '--metrics-bind-address',
      '127.0.0.1:10249',
      '--healthz-bind-address',
      '127.0.0.1:10256',
    ]);
    const log = () => daemon.err.map((l) => l.text).join('\n');
    await waitFor(() => /synced fully/.test(log()), { timeoutMs: 60_000, what: `the first sync\n${log()}` });

    // Three flows to dns (three source ports), one to syslog; each client stops after its answers.
    const dns = [45100, 45101, 45102].map((sport) => net!.udpClient(client, { sport, dst: DNS_VIP, port: 53, count: 2 }));
    const syslog = net.udpClient(client, { sport: 45200, dst: SYSLOG_VIP, port: 514, count: 2 });
    await waitFor(() => dns.every((p) => answered(p) === 2) && answered(syslog) === 2, { what: `answers from b1\n${log()}` });

    const api = async <T>(path: string): Promise<T> => JSON.parse(await net!.exec(node, ['curl', '-sS', '--max-time', '10', `http://127.0.0.1:10249/api/v1/${path}`])) as T;
    const counted = await api<ServiceConntrack>('services/default/dns/conntrack');
    expect(counted).toMatchObject({ service: 'default/dns', simulated: false, notCounted: 0 });
    expect(counted.frontends).toEqual([{ kind: 'clusterIP', portName: 'dns', vip: DNS_VIP, port: 53, protocol: 'UDP', count: 3, at: expect.any(Number), cached: false }]);
    // The kernel agrees: conntrack itself lists three flows there.
    const listed = await net.exec(node, ['conntrack', '-L', '-p', 'udp', '--orig-dst', DNS_VIP, '--orig-port-dst', '53']);
    expect(listed.trim().split('\n')).toHaveLength(3);
    expect((await api<ServiceConntrack>('services/default/syslog/conntrack')).frontends.map((f) => f.count)).toEqual([1]);
    // Asked again at once: the same listing answers (one listing per frontend per 5 s).
    expect((await api<ServiceConntrack>('services/default/dns/conntrack')).frontends[0]).toMatchObject({ count: 3, cached: true, at: counted.frontends[0].at });

    const { conntrack } = await api<{ conntrack: ConntrackInfo }>('conntrack');
    const max = Number((await net.exec(node, ['cat', '/proc/sys/net/netfilter/nf_conntrack_max'])).trim());
    expect(conntrack).toMatchObject({ max });
    expect(conntrack.error).toBeUndefined();
    // At least the four flows above (the namespace's table holds nothing else that outlives them).
    expect(conntrack.count).toBeGreaterThanOrEqual(4);
  }, 120_000);
});

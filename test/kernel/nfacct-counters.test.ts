import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { diagnosed } from './harness/diagnostics.ts';
import { METRICS_ADDRESS } from './harness/kproxy.ts';
import { ready, tcpPort, type ServiceSpec } from './harness/manifests.ts';
import { nsExec } from './harness/netns.ts';
import { PODS } from './harness/plan.ts';
import { TestCluster } from './harness/topology.ts';

/**
 * kube-proxy's nfacct counters on a live node: kproxy creates the two
 * accounting objects in its network namespace at start, its rules feed them
 * (-m nfacct), and /metrics reads them at each scrape. Real connections to a
 * node port on 127.0.0.1 from inside the node are counted by the kernel.
 */
const { a0 } = PODS;
const NODE_PORT = 30090;
const local: ServiceSpec = { name: 'local-np', type: 'NodePort', clusterIP: '10.96.0.40', ports: tcpPort(80, NODE_PORT) };

function sample(body: string, name: string): number | null {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(body);
  return m ? Number(m[1]) : null;
}

describe.skipIf(!tiers().kernel.ok)('nfacct packet counters (iptables mode, real packets)', () => {
  let cluster: TestCluster | undefined;
  const spec = (body: (c: TestCluster) => Promise<void>) => () => diagnosed(cluster, () => body(cluster!));
  const nfacctList = async (c: TestCluster): Promise<Map<string, number>> => {
    const r = await nsExec(c.ns.nodeA, ['nfacct', 'list']);
    expect(r.code).toBe(0);
    return new Map([...r.stdout.matchAll(/pkts = (\d+), bytes = \d+ \} = (\S+);/g)].map((m) => [m[2], Number(m[1])]));
  };
  const metrics = async (c: TestCluster): Promise<string> => {
    const r = await c.kproxy.curl(`http://${METRICS_ADDRESS}/metrics`);
    expect(r.status).toBe(200);
    return r.body;
  };

  beforeAll(async () => {
    cluster = await TestCluster.create();
    cluster.manifests.writeService(local, ready(a0));
    await cluster.startKproxy('nft');
  });

  afterAll(async () => {
    await cluster?.destroy();
  });

  it(
    "creates kube-proxy's two accounting objects in the node's namespace and names them in its rules",
    spec(async (c) => {
      const objects = await nfacctList(c);
      expect([...objects.keys()].sort()).toEqual(['ct_state_invalid_dropped_pkts', 'localhost_nps_accepted_pkts']);
      const save = await c.iptablesSave('nft');
      expect(save).toMatch(/-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name +ct_state_invalid_dropped_pkts -j DROP/);
      expect(save).toMatch(new RegExp(`-A KUBE-NODEPORTS .*-d 127\\.0\\.0\\.0/8 .*--dport ${NODE_PORT} -m nfacct --nfacct-name +localhost_nps_accepted_pkts -j KUBE-EXT-`));
    }),
  );

  it(
    'counts connections to a node port on 127.0.0.1 and exports the kernel counts on /metrics',
    spec(async (c) => {
      const before = (await nfacctList(c)).get('localhost_nps_accepted_pkts')!;
      const t = await c.client('node-a').tcp({ host: '127.0.0.1', port: NODE_PORT }, 5);
      expect(t.outcomes).toEqual({ ok: 5 });
      expect(t.backends).toEqual(['a0']);
      const kernel = await nfacctList(c);
      // The nat table sees the first packet of each connection: one count per connection.
      expect(kernel.get('localhost_nps_accepted_pkts')! - before).toBe(5);
      const body = await metrics(c);
      expect(body).toContain('# TYPE kubeproxy_iptables_localhost_nodeports_accepted_packets_total counter');
      expect(sample(body, 'kubeproxy_iptables_localhost_nodeports_accepted_packets_total')).toBe(kernel.get('localhost_nps_accepted_pkts'));
      expect(sample(body, 'kubeproxy_iptables_ct_state_invalid_dropped_packets_total')).toBe(kernel.get('ct_state_invalid_dropped_pkts'));
    }),
  );
});

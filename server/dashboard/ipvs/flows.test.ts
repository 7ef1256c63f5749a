import { describe, expect, it } from 'vitest';
import { categorizeEndpoints } from '../../proxy/topology.ts';
import type { KernelRule } from '../kernel-view.ts';
import { ipvsCluster, ipvsViewHarness } from './testing.ts';

async function port(id: string) {
  const h = ipvsViewHarness();
  const cluster = ipvsCluster();
  await h.sync(cluster.state);
  const sp = cluster.state.services.get(id)!;
  const eps = cluster.state.endpoints.get(id) ?? [];
  return { h, objects: h.view.servicePort(sp, eps, categorizeEndpoints(eps, sp, 'node-a', '')) };
}

const rule = (spec: string, target: string | null = null): KernelRule => ({ spec, target, packets: 0, bytes: 0 });

describe('IPVS Service page objects', () => {
  it('draws each way in through its set match and iptables glue to its virtual server', async () => {
    const { objects } = await port('ns1/web:http/TCP');
    expect(objects.flows.map((f) => [f.kind, f.address, f.path.join(' > '), f.policy, f.outcome])).toEqual([
      ['clusterIP', '10.96.0.1:80/TCP', 'KUBE-SERVICES > KUBE-CLUSTER-IP > TCP 10.96.0.1:80', 'Cluster', 'endpoints'],
      ['nodePort', '10.0.0.10:30080/TCP', 'KUBE-SERVICES > KUBE-NODE-PORT > KUBE-NODE-PORT-TCP > TCP 10.0.0.10:30080', 'Cluster', 'endpoints'],
      ['loadBalancerIP', '192.0.2.10:80/TCP', 'KUBE-SERVICES > KUBE-LOAD-BALANCER > KUBE-SOURCE-RANGES-FIREWALL > TCP 192.0.2.10:80', 'Cluster', 'endpoints'],
    ]);
    expect(objects.flows[2].note).toContain('only from 203.0.113.0/24');
    expect(objects.owned).toEqual([
      { table: 'ipvs', chain: 'TCP 10.96.0.1:80', role: 'cluster-ip' },
      { table: 'ipvs', chain: 'TCP 10.0.0.10:30080', role: 'node-port' },
      { table: 'ipvs', chain: 'TCP 192.0.2.10:80', role: 'load-balancer-ip' },
    ]);
    expect(objects.endpointObject('10.244.1.2:8080')).toBe('TCP 10.96.0.1:80');
    expect(objects.endpointObject('10.244.9.9:8080')).toBeNull();
  });

  it("picks the port's own set members and the iptables rules matching its sets", async () => {
    const { objects } = await port('ns1/web:http/TCP');
    const sets = objects.entryChains.filter((c) => c.table === 'ipsets').map((c) => c.chain);
    expect(sets).toEqual(['KUBE-LOOP-BACK', 'KUBE-CLUSTER-IP', 'KUBE-LOAD-BALANCER', 'KUBE-LOAD-BALANCER-FW', 'KUBE-LOAD-BALANCER-SOURCE-CIDR', 'KUBE-NODE-PORT-TCP']);
    expect(objects.isEntryRule(rule('10.96.0.1,tcp:80'))).toBe(true);
    expect(objects.isEntryRule(rule('10.96.0.10,udp:53'))).toBe(false);
    expect(objects.isEntryRule(rule('30080'))).toBe(true);
    expect(objects.isEntryRule(rule('-m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT', 'ACCEPT'))).toBe(true);
    expect(objects.isEntryRule(rule('-m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN', 'RETURN'))).toBe(false);
    expect(objects.isEntryRule(rule('-m addrtype --dst-type LOCAL -j KUBE-NODE-PORT', 'KUBE-NODE-PORT'))).toBe(true);
    expect(objects.isEntryRule(rule('-s 127.0.0.0/8 -j RETURN', 'RETURN'))).toBe(false);
  });

  it('refuses new connections of a port without endpoints at its virtual server', async () => {
    const { objects } = await port('ns1/dns:dns/UDP');
    expect(objects.flows).toEqual([
      {
        kind: 'clusterIP',
        address: '10.96.0.10:53/UDP',
        path: ['KUBE-SERVICES', 'KUBE-CLUSTER-IP', 'UDP 10.96.0.10:53'],
        policy: 'Cluster',
        outcome: 'reject',
        note: 'no real server takes new connections: IPVS answers them with ICMP port unreachable',
      },
    ]);
  });

  it('says when a Local policy without a local endpoint falls back to every endpoint', async () => {
    const { objects } = await port('ns1/ext:http/TCP');
    const ext = objects.flows.find((f) => f.kind === 'externalIP')!;
    expect(ext).toMatchObject({ path: ['KUBE-SERVICES', 'KUBE-EXTERNAL-IP-LOCAL', 'TCP 198.51.100.7:8080'], policy: 'Local', outcome: 'endpoints' });
    expect(ext.note).toMatch(/^externalTrafficPolicy Local and no endpoint on this node: falls back to every endpoint/);
  });

  it('counts draining real servers in the flow note', async () => {
    const h = ipvsViewHarness();
    const cluster = ipvsCluster();
    await h.sync(cluster.state);
    cluster.webEndpoints(['10.244.0.1']);
    await h.sync(cluster.state);
    const sp = cluster.state.services.get('ns1/web:http/TCP')!;
    const eps = cluster.state.endpoints.get(sp.id)!;
    const flows = h.view.servicePort(sp, eps, categorizeEndpoints(eps, sp, 'node-a', '')).flows;
    expect(flows[0].note).toBe('2 real servers draining at weight 0: no new connections, open ones go on until they end (15 min at most)');
  });

  it('has nothing to draw for a port no sync has programmed', async () => {
    const h = ipvsViewHarness();
    const cluster = ipvsCluster();
    const sp = cluster.state.services.get('ns1/web:http/TCP')!;
    const objects = h.view.servicePort(sp, [], categorizeEndpoints([], sp, 'node-a', ''));
    expect(objects.flows).toEqual([]);
    expect(objects.owned).toEqual([]);
  });
});

import { describe, expect, it } from 'vitest';
import { ipvsPort, realServer, webPort } from '../testing/fixtures.ts';
import { flowLayout, MAX_ENDPOINTS } from './flow-layout.ts';
import type { EndpointRow } from './protocol.ts';

describe('flowLayout', () => {
  it('draws each way in on the left, the chains it meets, and the endpoints with their share', () => {
    const pic = flowLayout(webPort());
    const byId = new Map(pic.nodes.map((n) => [n.id, n]));
    const entries = pic.nodes.filter((n) => n.kind === 'entry').map((n) => `${n.label} ${n.sub}`);
    expect(entries).toEqual(['Cluster IP 10.96.10.30:443/TCP', 'Node port node:30443/TCP', 'Load balancer IP 192.0.2.10:443/TCP']);
    const svc = byId.get('chain:KUBE-SVC-WEB')!;
    const ext = byId.get('chain:KUBE-EXT-WEB')!;
    expect(svc.sub).toBe('Cluster policy: all endpoints');
    // Columns follow the longest path: entry, KUBE-SERVICES, NODEPORTS/FW, EXT, SVC, endpoints.
    expect(byId.get('chain:KUBE-SERVICES')!.x).toBeLessThan(byId.get('chain:KUBE-NODEPORTS')!.x);
    expect(ext.x).toBeLessThan(svc.x);
    const eps = pic.nodes.filter((n) => n.kind === 'endpoint');
    expect(eps.map((n) => n.label)).toEqual(['10.244.0.31:8443', '10.244.1.32:8443']);
    expect(eps.every((n) => n.x > svc.x)).toBe(true);
    expect(pic.edges.filter((e) => e.label).map((e) => e.label)).toEqual(['50.0 %', '50.0 %']);
  });

  it('routes an edge that skips columns around the boxes in between', () => {
    const pic = flowLayout(webPort());
    const skip = pic.edges.find((e) => e.id === 'chain:KUBE-SERVICES->chain:KUBE-SVC-WEB')!;
    // One straight run (L) through each column it crosses: NODEPORTS/FW and EXT.
    expect(skip.d.match(/ L/g)).toHaveLength(2);
    const boxes = pic.nodes.filter((n) => n.kind === 'chain' && !['KUBE-SERVICES', 'KUBE-SVC-WEB'].includes(n.label));
    for (const m of skip.d.matchAll(/L([\d.]+),([\d.]+)/g)) {
      const y = Number(m[2]);
      expect(boxes.some((b) => Number(m[1]) >= b.x && Number(m[1]) <= b.x + b.w && y > b.y && y < b.y + b.h)).toBe(false);
    }
  });

  it('ends a refused flow in a REJECT box', () => {
    const pic = flowLayout(
      webPort({ flows: [{ kind: 'clusterIP', address: '10.96.10.80:80/TCP', path: ['KUBE-SERVICES'], policy: 'Cluster', outcome: 'reject', note: 'no endpoints' }], endpoints: [] }),
    );
    const refuse = pic.nodes.find((n) => n.kind === 'refuse')!;
    expect(refuse.label).toBe('REJECT');
    expect(refuse.tone).toBe('bad');
    expect(pic.edges.at(-1)!.tone).toBe('bad');
  });

  it(`draws at most ${MAX_ENDPOINTS} endpoints per chain and one box for the rest`, () => {
    const endpoints: EndpointRow[] = Array.from({ length: 20 }, (_, i) => ({ ...webPort().endpoints[0], key: `10.0.0.${i}:80`, clusterShare: 1 / 20 }));
    const pic = flowLayout(webPort({ endpoints }));
    expect(pic.nodes.filter((n) => n.kind === 'endpoint')).toHaveLength(MAX_ENDPOINTS);
    expect(pic.nodes.find((n) => n.kind === 'more')!.label).toBe(`+${20 - MAX_ENDPOINTS} more endpoints`);
  });
});

describe('flowLayout in IPVS mode', () => {
  it('leads each way in through its set match and glue to a virtual server, then to its real servers by weight share', () => {
    const pic = flowLayout(ipvsPort(), 'ipvs');
    const byId = new Map(pic.nodes.map((n) => [n.id, n]));
    expect(byId.get('chain:KUBE-CLUSTER-IP')!.sub).toBe('ipset match');
    expect(byId.get('chain:KUBE-LOAD-BALANCER')!.sub).toBe('ipset match → nat chain');
    expect(byId.get('chain:TCP 10.96.10.30:443')!.sub).toBe('virtual server · rr');
    const vs = byId.get('chain:TCP 10.96.10.30:443')!;
    const reals = pic.nodes.filter((n) => n.kind === 'endpoint');
    expect(reals.map((n) => [n.label, n.tone, n.sub]).sort()).toEqual([
      ['10.244.0.31:8443', 'ok', 'node-a · z1 · local'],
      ['10.244.1.32:8443', 'ok', 'node-b · z2'],
      ['10.244.1.33:8443', 'warn', 'node-b · z2 · draining'],
    ]);
    expect(reals.every((n) => n.x > vs.x && n.chain === 'TCP 10.96.10.30:443')).toBe(true);
    const fromVs = (name: string) => pic.edges.filter((e) => e.id.startsWith(`chain:${name}->`)).map((e) => `${e.label} ${e.tone}`);
    // The LB's virtual server gives the same shares: written once, on the cluster IP's edges.
    expect(fromVs('TCP 10.96.10.30:443')).toEqual(['50.0 % ok', '50.0 % ok', 'draining warn']);
    expect(fromVs('TCP 192.0.2.10:443')).toEqual([' ok', ' ok']);
  });

  it('names a set match that jumps to a chain of the same name as both', () => {
    const port = ipvsPort();
    const chains = port.chains
      .filter((c) => !(c.table === 'nat' && c.name === 'KUBE-LOAD-BALANCER'))
      .map((c) =>
        c.name === 'KUBE-SERVICES' ? { ...c, rules: [{ text: '-m set --match-set KUBE-LOAD-BALANCER dst,dst -j KUBE-LOAD-BALANCER', target: 'KUBE-LOAD-BALANCER', packets: 0, bytes: 0 }] } : c,
      );
    const pic = flowLayout({ ...port, chains }, 'ipvs');
    expect(pic.nodes.find((n) => n.id === 'chain:KUBE-LOAD-BALANCER')!.sub).toBe('ipset match → nat chain');
    expect(pic.nodes.find((n) => n.id === 'chain:KUBE-SOURCE-RANGES-FIREWALL')!.sub).toBe('');
  });

  it('writes a share again where another virtual server gives a real server a different one', () => {
    const port = ipvsPort();
    const chains = port.chains.map((c) => (c.name === 'TCP 192.0.2.10:443' ? { ...c, rules: [realServer('10.244.0.31:8443')] } : c));
    const pic = flowLayout({ ...port, chains }, 'ipvs');
    expect(pic.edges.filter((e) => e.id.startsWith('chain:TCP 192.0.2.10:443->')).map((e) => e.label)).toEqual(['100 %']);
  });

  it('draws a real server whose endpoint is gone, and a virtual server refusing new connections beside its draining ones', () => {
    const port = ipvsPort();
    const vs = { ...port.chains.find((c) => c.name === 'TCP 10.96.10.30:443')!, rules: [realServer('10.244.2.7:8443', { weight: 0, draining: true })] };
    const pic = flowLayout({ ...port, flows: [{ ...port.flows[0], outcome: 'reject', note: 'no real server takes new connections' }], chains: [vs] }, 'ipvs');
    expect(pic.nodes.find((n) => n.kind === 'refuse')!.label).toBe('REJECT');
    expect(pic.nodes.find((n) => n.kind === 'endpoint')).toMatchObject({ label: '10.244.2.7:8443', tone: 'warn', sub: 'endpoint gone · draining' });
  });

  it("falls back to the endpoints' shares before the virtual server is known", () => {
    const pic = flowLayout(ipvsPort({ chains: [] }), 'ipvs');
    expect(pic.nodes.filter((n) => n.kind === 'endpoint').map((n) => n.label)).toEqual(['10.244.0.31:8443', '10.244.1.32:8443']);
    expect(pic.edges.filter((e) => e.label).map((e) => e.label)).toEqual(['50.0 %', '50.0 %', '50.0 %', '50.0 %']);
  });
});

import { describe, expect, it } from 'vitest';
import { webPort } from '../testing/fixtures.ts';
import { flowLayout } from './flow-layout.ts';
import { isNftSet, isNftTable, nftJumps, nftLinkable, nftSub } from './nft-view.ts';
import type { ChainView, PortDetail } from './protocol.ts';

const SVC = 'service-HPJLA6DC-shop/web/tcp/https';
const EXT = 'external-HPJLA6DC-shop/web/tcp/https';
const FW = 'firewall-HPJLA6DC-shop/web/tcp/https';
const chain = (name: string, role: string, rules: string[]): ChainView => ({
  table: 'kube-proxy',
  name,
  role,
  from: 'kernel',
  packets: 0,
  bytes: 0,
  rules: rules.map((text) => ({ text, target: null, packets: 0, bytes: 0 })),
});

/** nftWebPort: shop/web in nftables mode (flows as NftablesView follows them through the maps). */
function nftWebPort(): PortDetail {
  const base = webPort();
  return {
    ...base,
    flows: [
      { kind: 'clusterIP', address: '10.96.10.30:443/TCP', path: ['@service-ips', SVC], policy: 'Cluster', outcome: 'endpoints' },
      { kind: 'nodePort', address: 'node:30443/TCP', path: ['@service-nodeports', EXT, SVC], policy: 'Cluster', outcome: 'endpoints' },
      { kind: 'loadBalancerIP', address: '192.0.2.10:443/TCP', path: ['@firewall-ips', FW, '@service-ips', EXT, SVC], policy: 'Cluster', outcome: 'endpoints', note: 'only from 203.0.113.0/24' },
    ],
    chains: [
      chain('@service-ips', 'entry', [`10.96.10.30 . tcp . 443 : goto ${SVC}`]),
      chain(FW, 'firewall', ['ip saddr != { 203.0.113.0/24 } drop']),
      chain(EXT, 'external', ['jump mark-for-masquerade', `goto ${SVC}`]),
      chain(SVC, 'service', ['ip saddr @affinity-A goto endpoint-A', 'numgen random mod 2 vmap { 0 : goto endpoint-A , 1 : goto endpoint-B }']),
    ],
  };
}

describe('nftables on the pages', () => {
  it('knows the kube-proxy tables of both families, their sets and maps, and which targets can be followed', () => {
    expect([isNftTable('kube-proxy'), isNftTable('ip6-kube-proxy'), isNftTable('nat')]).toEqual([true, true, false]);
    expect([isNftSet('@service-ips'), isNftSet('services')]).toEqual([true, false]);
    expect([nftLinkable('@service-ips'), nftLinkable(SVC), nftLinkable('drop'), nftLinkable('dnat'), nftLinkable(null)]).toEqual([true, true, false, false, false]);
    expect(nftJumps('numgen random mod 2 vmap { 0 : goto endpoint-A , 1 : goto endpoint-B }')).toEqual(['endpoint-A', 'endpoint-B']);
  });

  it('says what each box of a flow does: the maps, the firewall, and how the policy chain picks an endpoint', () => {
    const port = nftWebPort();
    expect(nftSub('@service-ips', 'entry', port.chains)).toBe('verdict map: service IPs');
    expect(nftSub(SVC, 'service', port.chains)).toBe('Cluster · affinity, numgen mod 2');
    expect(nftSub(FW, 'firewall', port.chains)).toBe('source ranges (before DNAT)');
    expect(nftSub('reject-chain', undefined, port.chains)).toBe('reject');
  });

  it('draws map element → firewall → map → external → service chain → endpoints', () => {
    const pic = flowLayout(nftWebPort(), 'nftables');
    const byId = new Map(pic.nodes.map((n) => [n.id, n]));
    const x = (name: string) => byId.get(`chain:${name}`)!.x;
    expect(x('@firewall-ips')).toBeLessThan(x(FW));
    expect(x(FW)).toBeLessThan(x('@service-ips'));
    expect(x('@service-ips')).toBeLessThan(x(EXT));
    expect(x(EXT)).toBeLessThan(x(SVC));
    expect(byId.get(`chain:${SVC}`)!.sub).toBe('Cluster · affinity, numgen mod 2');
    expect(pic.nodes.filter((n) => n.kind === 'endpoint').map((n) => n.label)).toEqual(['10.244.0.31:8443', '10.244.1.32:8443']);
  });
});

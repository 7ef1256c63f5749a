import { describe, expect, it } from 'vitest';
import { summary } from '../testing/fixtures.ts';
import { searchServices } from './search.ts';

const list = [
  summary('kube-system/kube-dns', { ports: ['53/UDP', '53/TCP'] }),
  summary('shop/api', { type: 'NodePort', clusterIP: '10.96.10.20', ports: ['80/TCP:30080'] }),
  summary('shop/web', { type: 'LoadBalancer', ips: ['192.0.2.10'], ports: ['443/TCP:30443'] }),
  summary('shop/payments', { warnings: ['no-endpoints'] }),
  summary('shop/catalog', { clusterIPs: ['10.96.10.80', 'fd00:10:96::80'] }),
  summary('shop/search', { clusterIPs: ['fd00:10:96::90'], ports: ['80/TCP:30180'] }),
];
const keys = (q: string, f?: Parameters<typeof searchServices>[2]) => searchServices(list, q, f).map((s) => s.key);

describe('searchServices', () => {
  it('matches every word anywhere: name, namespace, type, IPs, ports, ignoring case', () => {
    expect(keys('')).toHaveLength(6);
    expect(keys('SHOP')).toEqual(['shop/api', 'shop/web', 'shop/payments', 'shop/catalog', 'shop/search']);
    expect(keys('shop 443')).toEqual(['shop/web']);
    expect(keys('nodeport')).toEqual(['shop/api']);
    expect(keys('192.0.2')).toEqual(['shop/web']);
    expect(keys('53/udp')).toEqual(['kube-system/kube-dns']);
    expect(keys('shop nothing')).toEqual([]);
  });

  it('finds a Service by either of its cluster IPs, IPv6 ones by any part of their text', () => {
    expect(keys('fd00:10:96::80')).toEqual(['shop/catalog']);
    expect(keys('10.96.10.80')).toEqual(['shop/catalog']);
    expect(keys('fd00:10:96')).toEqual(['shop/catalog', 'shop/search']);
  });

  it('filters by IP family: a dual-stack Service is in both', () => {
    const fam = (f: 'IPv4' | 'IPv6') => searchServices(list, '', 'all', f).map((s) => s.key);
    expect(fam('IPv6')).toEqual(['shop/catalog', 'shop/search']);
    expect(fam('IPv4')).toEqual(['kube-system/kube-dns', 'shop/api', 'shop/web', 'shop/payments', 'shop/catalog']);
  });

  it('filters to services with warnings', () => {
    expect(keys('', 'warnings')).toEqual(['shop/payments']);
    expect(keys('', 'no-endpoints')).toEqual(['shop/payments']);
  });

  it('answers a keystroke over 10,000 services in well under a frame', () => {
    const big = Array.from({ length: 10_000 }, (_, i) => summary(`ns${i % 100}/svc-${i}`, { clusterIP: `172.16.${i >> 8}.${i & 255}` }));
    searchServices(big, 'warm');
    const t0 = performance.now();
    const found = searchServices(big, 'svc-9999');
    const ms = performance.now() - t0;
    expect(found.map((s) => s.key)).toEqual(['ns99/svc-9999']);
    expect(ms).toBeLessThan(50);
  });
});

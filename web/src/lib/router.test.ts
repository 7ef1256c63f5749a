import { describe, expect, it } from 'vitest';
import { href, parseRoute, type Route } from './router.svelte.ts';

describe('routes', () => {
  it('round-trips every page through the URL hash', () => {
    const routes: Route[] = [
      { page: 'overview' },
      { page: 'services', q: 'shop 443' },
      { page: 'service', namespace: 'kube-system', name: 'kube-dns' },
      { page: 'rules', table: 'nat', chain: 'KUBE-SVC-ABC', q: '10.96', drift: true },
      { page: 'rules', table: 'ip6-kube-proxy', chain: 'service-ULMVA6XW-ns1/svc1/tcp/p80', q: '', drift: false, rule: 3 },
      { page: 'trace', query: { proto: 'udp', src: '10.0.0.2:4000', dst: '[fd00::a]:53', from: 'pod' } },
      { page: 'syncs' },
      { page: 'actions' },
      { page: 'connections', q: 'shop/web 10.0.0.2' },
      { page: 'connections', q: '' },
    ];
    for (const r of routes) expect(parseRoute(href(r))).toEqual(r.page === 'rules' ? r : r);
  });

  it('reads unknown or empty hashes as the overview, and defaults the Rules page to nat', () => {
    expect(parseRoute('')).toEqual({ page: 'overview' });
    expect(parseRoute('#/nope')).toEqual({ page: 'overview' });
    expect(parseRoute('#/rules')).toEqual({ page: 'rules', table: 'nat', chain: null, q: '', drift: false });
    expect(parseRoute('#/trace')).toEqual({ page: 'trace', query: { proto: 'tcp', src: '', dst: '', from: '' } });
    // A rule number means something only inside a chain.
    expect(parseRoute('#/rules/nat?rule=2')).toEqual({ page: 'rules', table: 'nat', chain: null, q: '', drift: false });
  });
});

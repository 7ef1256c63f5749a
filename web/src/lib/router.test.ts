import { describe, expect, it } from 'vitest';
import { href, parseRoute, type Route } from './router.svelte.ts';

describe('routes', () => {
  it('round-trips every page through the URL hash', () => {
    const routes: Route[] = [
      { page: 'overview' },
      { page: 'services', q: 'shop 443' },
      { page: 'service', namespace: 'kube-system', name: 'kube-dns' },
      { page: 'rules', table: 'nat', chain: 'KUBE-SVC-ABC', q: '10.96', drift: true },
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
  });
});

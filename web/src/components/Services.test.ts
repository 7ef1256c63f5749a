import '@testing-library/svelte/vitest';
import { fireEvent, render, screen } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import { summary } from '../testing/fixtures.ts';
import Services from './Services.svelte';

const services = [
  summary('shop/api', { type: 'NodePort', ports: ['80/TCP:30080'] }),
  summary('shop/web', { type: 'LoadBalancer', ips: ['192.0.2.10'] }),
  summary('shop/payments', { warnings: ['no-endpoints'], endpoints: { total: 0, ready: 0, serving: 0, terminating: 0, local: 0 } }),
];

describe('Services page', () => {
  it('lists every service with a link to its page and its warnings', () => {
    render(Services, { props: { services } });
    const rows = screen.getAllByTestId('service-row');
    expect(rows.map((r) => r.getAttribute('href'))).toEqual(['#/services/shop/api', '#/services/shop/web', '#/services/shop/payments']);
    expect(rows[2].textContent).toContain('no endpoints');
    expect(screen.getByTestId('search-count').textContent).toMatch(/^3 services/);
  });

  it('narrows the list as the user types, and reports the query', async () => {
    const queries: string[] = [];
    render(Services, { props: { services, onquery: (q: string) => queries.push(q) } });
    await fireEvent.input(screen.getByTestId('service-search'), { target: { value: '192.0' } });
    expect(screen.getAllByTestId('service-row').map((r) => r.textContent)).toEqual([expect.stringContaining('web')]);
    expect(screen.getByTestId('search-count').textContent).toMatch(/^1 service/);
    expect(queries).toEqual(['192.0']);
    await fireEvent.input(screen.getByTestId('service-search'), { target: { value: 'nothing-like-this' } });
    expect(screen.queryAllByTestId('service-row')).toHaveLength(0);
    expect(screen.getByText(/No service matches/)).toBeTruthy();
  });

  it('renders only a window of a 10,000-service list', () => {
    const many = Array.from({ length: 10_000 }, (_, i) => summary(`ns/svc-${String(i).padStart(5, '0')}`));
    render(Services, { props: { services: many } });
    const shown = screen.getAllByTestId('service-row').length;
    expect(shown).toBeGreaterThan(5);
    expect(shown).toBeLessThan(60);
  });

  it('says so when there are no services yet', () => {
    render(Services, { props: { services: [] } });
    expect(screen.getByText('No services on this node yet')).toBeTruthy();
  });
});

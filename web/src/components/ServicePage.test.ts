import '@testing-library/svelte/vitest';
import { render, screen, within } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import { detail } from '../testing/fixtures.ts';
import ServicePage from './ServicePage.svelte';

describe('Service page', () => {
  it('shows the endpoints with their state and share, the flow picture, and the chains with their rules', () => {
    render(ServicePage, { props: { serviceKey: 'shop/web', detail: { key: 'shop/web', detail: detail() }, counters: null, now: 1_060_000 } });
    const rows = within(screen.getByTestId('endpoints')).getAllByRole('row').slice(1);
    expect(rows.map((r) => [...r.children].map((c) => [...c.childNodes].map((n) => n.textContent?.trim()).filter(Boolean).join(' ')).join(' '))).toEqual([
      expect.stringMatching(/^10\.244\.0\.31:8443 ready local node-a z1 50\.0 % – KUBE-SEP-AAAA$/),
      expect.stringMatching(/^10\.244\.1\.32:8443 ready node-b z2 50\.0 % – KUBE-SEP-BBBB$/),
      expect.stringMatching(/^10\.244\.1\.33:8443 terminating \(serving\) node-b z2 – – not used$/),
    ]);
    expect(screen.getByTestId('flow').querySelectorAll('g.node.entry')).toHaveLength(3);
    const chains = screen.getAllByTestId('chain');
    expect(chains.map((c) => c.querySelector('.name')?.textContent)).toEqual(['KUBE-SERVICES', 'KUBE-SVC-WEB', 'KUBE-SEP-AAAA']);
    expect(chains[1].textContent).toContain('Cluster policy');
    expect(screen.getByText(/counters from the kernel, read 2 s ago/)).toBeTruthy();
  });

  it('updates rule counters from live counters of the same service', async () => {
    const { rerender } = render(ServicePage, { props: { serviceKey: 'shop/web', detail: { key: 'shop/web', detail: detail() }, counters: null, now: 0 } });
    const svcRules = () => within(screen.getAllByTestId('chain')[1]).getAllByRole('row').slice(1).map((r) => r.children[3].textContent);
    expect(svcRules()).toEqual(['3', '2']);
    await rerender({
      counters: { service: 'shop/web', chains: [{ port: 'shop/web:https/TCP', table: 'nat', name: 'KUBE-SVC-WEB', packets: 0, bytes: 0, rules: [[1500, 9000], [2400, 100]] }] },
    });
    expect(svcRules()).toEqual(['1.5k', '2.4k']);
  });

  it('says when the service does not exist, and while it loads', () => {
    const { unmount } = render(ServicePage, { props: { serviceKey: 'shop/gone', detail: { key: 'shop/gone', detail: null }, counters: null, now: 0 } });
    expect(screen.getByText('No service shop/gone on this node')).toBeTruthy();
    unmount();
    render(ServicePage, { props: { serviceKey: 'shop/web', detail: null, counters: null, now: 0 } });
    expect(screen.getByText('Loading shop/web…')).toBeTruthy();
  });
});

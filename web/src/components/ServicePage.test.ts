import '@testing-library/svelte/vitest';
import { fireEvent, render, screen, waitFor, within } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import { Api } from '../lib/api.ts';
import type { ServiceConntrack } from '../lib/protocol.ts';
import { detail, ipvsPort } from '../testing/fixtures.ts';
import ServicePage from './ServicePage.svelte';

describe('Service page', () => {
  it('shows the endpoints with their state and share, the flow picture, and the chains with their rules', () => {
    render(ServicePage, { props: { serviceKey: 'shop/web', detail: { key: 'shop/web', detail: detail() }, counters: null, now: 1_060_000 } });
    const rows = within(screen.getByTestId('endpoints')).getAllByRole('row').slice(1);
    expect(
      rows.map((r) =>
        [...r.children]
          .map((c) =>
            [...c.childNodes]
              .map((n) => n.textContent?.trim())
              .filter(Boolean)
              .join(' '),
          )
          .join(' '),
      ),
    ).toEqual([
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

  it("links every way into a port to the Trace page, pre-filled (a node port on the node's address)", () => {
    render(ServicePage, { props: { serviceKey: 'shop/web', detail: { key: 'shop/web', detail: detail() }, counters: null, now: 0, nodeIPs: ['10.0.0.10'] } });
    const links = [...screen.getByTestId('trace-links').querySelectorAll('a')].map((a) => [a.textContent, a.getAttribute('href')]);
    expect(links).toEqual([
      ['10.96.10.30:443/TCP', '#/trace?proto=tcp&dst=10.96.10.30%3A443'],
      ['node:30443/TCP', '#/trace?proto=tcp&dst=10.0.0.10%3A30443'],
      ['192.0.2.10:443/TCP', '#/trace?proto=tcp&dst=192.0.2.10%3A443'],
    ]);
  });

  it('shows the health check node port: simulated under --dry-run, listening, or not open', () => {
    const page = (healthCheck: NonNullable<ReturnType<typeof detail>['healthCheck']>) =>
      render(ServicePage, { props: { serviceKey: 'shop/web', detail: { key: 'shop/web', detail: detail({ healthCheck }) }, counters: null, now: 0 } });
    let r = page({ port: 32100, open: true, simulated: true, addresses: ['0.0.0.0'], localEndpoints: 1, status: 200 });
    expect(screen.getByTestId('health-check').textContent?.replace(/\s+/g, ' ').trim()).toBe(
      'Health check node port 32100: simulated (--dry-run binds nothing on the host), would answer 200 (1 local endpoint)',
    );
    r.unmount();
    r = page({ port: 32100, open: true, simulated: false, addresses: ['10.0.0.10'], localEndpoints: 0, status: 503 });
    expect(screen.getByTestId('health-check').textContent?.replace(/\s+/g, ' ').trim()).toBe('Health check node port 32100: listening on 10.0.0.10, answers 503 (0 local endpoints)');
    r.unmount();
    page({ port: 32100, open: false, simulated: false, addresses: [], localEndpoints: 0, status: null });
    expect(screen.getByTestId('health-check').textContent).toMatch(/32100: not open/);
  });

  it('updates rule counters from live counters of the same service', async () => {
    const { rerender } = render(ServicePage, { props: { serviceKey: 'shop/web', detail: { key: 'shop/web', detail: detail() }, counters: null, now: 0 } });
    const svcRules = () =>
      within(screen.getAllByTestId('chain')[1])
        .getAllByRole('row')
        .slice(1)
        .map((r) => r.children[3].textContent);
    expect(svcRules()).toEqual(['3', '2']);
    await rerender({
      counters: {
        service: 'shop/web',
        chains: [
          {
            port: 'shop/web:https/TCP',
            table: 'nat',
            name: 'KUBE-SVC-WEB',
            packets: 0,
            bytes: 0,
            rules: [
              [1500, 9000],
              [2400, 100],
            ],
          },
        ],
      },
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

describe('Service page in IPVS mode', () => {
  const ipvsDetail = () => ({ key: 'shop/web', detail: detail({ ports: [ipvsPort()] }) });
  const cells = (row: Element) => [...row.children].map((c) => c.textContent?.replace(/\s+/g, ' ').trim());

  it('shows each virtual server with its scheduler and real servers (weights, shares, connections), draining ones marked', () => {
    render(ServicePage, { props: { serviceKey: 'shop/web', detail: ipvsDetail(), counters: null, now: 1_060_000, kind: 'ipvs' } });
    expect(screen.getByText(/Virtual servers, sets and rules/).textContent).toContain('(2 virtual servers)');
    const cards = screen.getAllByTestId('virtual-server');
    expect(cards.map((c) => c.querySelector('.name')?.textContent)).toEqual(['TCP 10.96.10.30:443', 'TCP 192.0.2.10:443']);
    expect(cards[0].textContent).toContain('cluster IP virtual server');
    expect(cards[0].textContent).toContain('round robin (rr)');
    expect(within(cards[0]).getByTestId('vs-totals').textContent).toBe('5 active · 9 inactive · 120 connections · 2.0/s');
    const rows = within(cards[0]).getAllByTestId('real-server').map(cells);
    expect(rows).toEqual([
      ['10.244.0.31:8443 Masq', 'node-alocal', '1', '50.0 %', '3', '4', '70', '1.5/s', '0', '0 B'],
      ['10.244.1.32:8443 Masq', 'node-b', '1', '50.0 %', '2', '5', '50', '–', '0', '0 B'],
      ['10.244.1.33:8443 Masq', 'node-b draining', '0', '0 %', '1', '0', '0', '–', '0', '0 B'],
    ]);
    expect(within(cards[0]).getByText('draining').getAttribute('title')).toMatch(/^weight 0 since 1 min ago/);
    expect(cards[0].textContent).toContain('1 real server draining');
    expect(cards[1].textContent).toContain('load balancer IP virtual server');
  });

  it("shows the port's set members and the rules matching its sets, after its virtual servers", () => {
    render(ServicePage, { props: { serviceKey: 'shop/web', detail: ipvsDetail(), counters: null, now: 1_060_000, kind: 'ipvs' } });
    const sets = screen.getAllByTestId('ipset');
    expect(sets.map((c) => [c.querySelector('.name')?.textContent, c.querySelector('.members')?.textContent])).toEqual([
      ['KUBE-CLUSTER-IP', '10.96.10.30,tcp:443'],
      ['KUBE-LOAD-BALANCER', '192.0.2.10,tcp:443'],
    ]);
    const glue = screen.getAllByTestId('chain');
    expect(glue.map((c) => c.querySelector('.name')?.textContent)).toEqual(['KUBE-SERVICES', 'KUBE-LOAD-BALANCER']);
    expect(glue[0].textContent).toContain('rules matching its sets');
    const order = [...document.querySelectorAll('[data-testid="virtual-server"], [data-testid="ipset"], [data-testid="chain"]')].map((e) => e.getAttribute('data-testid'));
    expect(order).toEqual(['virtual-server', 'virtual-server', 'ipset', 'ipset', 'chain', 'chain']);
    // The endpoint table links each endpoint to the virtual server that reaches it.
    const endpoints = within(screen.getByTestId('endpoints')).getAllByRole('row').slice(1);
    expect(endpoints[0].querySelector('a')?.textContent).toBe('TCP 10.96.10.30:443');
    expect(screen.getByTestId('flow').querySelectorAll('g.node.endpoint')).toHaveLength(3);
  });

  it('moves connection counts with live counters', async () => {
    const { rerender } = render(ServicePage, { props: { serviceKey: 'shop/web', detail: ipvsDetail(), counters: null, now: 1_060_000, kind: 'ipvs' } });
    const vs = ipvsPort().chains.find((c) => c.name === 'TCP 10.96.10.30:443')!;
    const reals = vs.rules.map((r, i) => ({ ...r.ipvs!, active: i === 1 ? 42 : r.ipvs!.active }));
    await rerender({
      counters: {
        service: 'shop/web',
        chains: [{ port: 'shop/web:https/TCP', table: 'ipvs', name: vs.name, packets: 0, bytes: 0, rules: vs.rules.map(() => [0, 0] as const), ipvs: { ...vs.ipvs!, active: 44 }, reals }],
      },
    });
    const card = screen.getAllByTestId('virtual-server')[0];
    expect(within(card).getByTestId('vs-totals').textContent).toMatch(/^44 active/);
    expect(cells(within(card).getAllByTestId('real-server')[1])[4]).toBe('42');
  });

  it('keeps the iptables layout when the mode is not IPVS', () => {
    render(ServicePage, { props: { serviceKey: 'shop/web', detail: { key: 'shop/web', detail: detail() }, counters: null, now: 1_060_000 } });
    expect(screen.queryByTestId('virtual-server')).toBeNull();
    expect(screen.getByText(/Chains and rules/)).toBeTruthy();
  });
});

describe('Service page conntrack count', () => {
  const counts: ServiceConntrack = {
    service: 'shop/web',
    simulated: false,
    notCounted: 0,
    frontends: [
      { kind: 'clusterIP', portName: 'https', vip: '10.96.10.30', port: 443, protocol: 'TCP', count: 1520, at: 1_058_000, cached: false },
      {
        kind: 'loadBalancerIP',
        portName: 'https',
        vip: '192.0.2.10',
        port: 443,
        protocol: 'TCP',
        count: null,
        at: null,
        cached: false,
        error: { code: 'KPROXY_ERR_CONNTRACK', message: 'listing conntrack flows failed (exit 1)' },
      },
    ],
  };
  /** server answers the conntrack route with the given responses in turn, and records the URLs asked. */
  function server(...answers: { status: number; body: unknown }[]) {
    const urls: string[] = [];
    const api = new Api(
      () => 'tok',
      async (url) => {
        urls.push(url);
        const a = answers.shift()!;
        return new Response(JSON.stringify(a.body), { status: a.status });
      },
    );
    return { api, urls };
  }
  const page = (api: Api | null, serviceKey = 'shop/web') => render(ServicePage, { props: { serviceKey, detail: { key: serviceKey, detail: detail() }, counters: null, now: 1_060_000, api } });
  const cells = (row: Element) => [...row.children].map((c) => c.textContent?.replace(/\s+/g, ' ').trim());

  it('counts on request only, and shows each frontend with its count, age, and error', async () => {
    const { api, urls } = server({ status: 200, body: counts });
    page(api);
    expect(urls).toEqual([]);
    expect(screen.queryByTestId('conntrack-counts')).toBeNull();
    await fireEvent.click(screen.getByRole('button', { name: 'Count conntrack entries' }));
    await waitFor(() => expect(screen.getByTestId('conntrack-counts')).toBeTruthy());
    expect(urls).toEqual(['api/v1/services/shop/web/conntrack']);
    const rows = within(screen.getByTestId('conntrack-counts')).getAllByRole('row').slice(1).map(cells);
    expect(rows).toEqual([
      ['10.96.10.30:443/TCP', 'cluster IP · https', '1,520', '2 s ago'],
      ['192.0.2.10:443/TCP', 'load balancer IP · https', '–', 'listing conntrack flows failed (exit 1) [KPROXY_ERR_CONNTRACK]'],
    ]);
    expect(screen.queryByRole('alert')).toBeNull();
  });

  it('says when the node refused the count (429) and keeps the last counts; a later count succeeds', async () => {
    const { api } = server(
      { status: 200, body: { ...counts, frontends: [counts.frontends[0]] } },
      { status: 429, body: { error: { code: 'KPROXY_ERR_RATE_LIMITED', message: 'too many conntrack counts are running on this node; try again in a few seconds' } } },
      { status: 200, body: { ...counts, simulated: true, notCounted: 3, frontends: [{ ...counts.frontends[0], count: 0, cached: true }] } },
    );
    page(api);
    const button = screen.getByRole('button', { name: 'Count conntrack entries' });
    await fireEvent.click(button);
    await waitFor(() => expect(screen.getByTestId('conntrack-counts')).toBeTruthy());
    await fireEvent.click(button);
    await waitFor(() => expect(screen.getByRole('alert').textContent).toBe('Rate limited: too many conntrack counts are running on this node; try again in a few seconds'));
    expect(cells(within(screen.getByTestId('conntrack-counts')).getAllByRole('row')[1])[2]).toBe('1,520');
    await fireEvent.click(button);
    await waitFor(() => expect(cells(within(screen.getByTestId('conntrack-counts')).getAllByRole('row')[1]).slice(2)).toEqual(['0', '2 s ago (cached)']));
    expect(screen.queryByRole('alert')).toBeNull();
    expect(screen.getByText(/3 more frontends not counted/)).toBeTruthy();
    expect(screen.getByText(/--dry-run: the table is kproxy's simulated one/)).toBeTruthy();
  });

  it('shows a failed request as an error, and has no button without an API', async () => {
    const { api } = server({ status: 503, body: { error: { code: 'KPROXY_ERR_CONNTRACK', message: 'conntrack counts are not available in this run (service shop/web)' } } });
    const { unmount } = page(api);
    await fireEvent.click(screen.getByRole('button', { name: 'Count conntrack entries' }));
    await waitFor(() => expect(screen.getByRole('alert').textContent).toBe('Counting failed: conntrack counts are not available in this run (service shop/web)'));
    unmount();
    page(null);
    expect(screen.queryByTestId('conntrack')).toBeNull();
  });

  it('forgets the counts when the page shows another service', async () => {
    const { api, urls } = server({ status: 200, body: counts });
    const { rerender } = page(api);
    await fireEvent.click(screen.getByRole('button', { name: 'Count conntrack entries' }));
    await waitFor(() => expect(screen.getByTestId('conntrack-counts')).toBeTruthy());
    await rerender({ serviceKey: 'shop/api', detail: { key: 'shop/api', detail: detail() } });
    expect(screen.queryByTestId('conntrack-counts')).toBeNull();
    expect(urls).toHaveLength(1);
  });
});

import '@testing-library/svelte/vitest';
import { fireEvent, render, screen, waitFor } from '@testing-library/svelte';
import { describe, expect, it, vi } from 'vitest';
import { Api } from '../lib/api.ts';
import type { ConnectionRow, RelayPortFacts } from '../lib/protocol.ts';
import Connections from './Connections.svelte';
import RelayCard from './RelayCard.svelte';

const relay: RelayPortFacts = {
  sockets: [
    { pool: 'cluster', port: 32771, rotation: ['10.244.0.12:8080', '10.244.1.11:8080', '10.244.0.11:8080'], affinityClients: 0 },
    { pool: 'local', port: 32772, rotation: [], affinityClients: 2 },
  ],
  active: 5,
  total: 30,
  bytesToEndpoint: 3072,
  bytesToClient: 1_048_576,
  retries: 1,
  refused: { no_endpoints: 0, limit_total: 3 },
  rate: { conns: 2.5, bytes: 2048 },
  endpoints: [
    { key: '10.244.0.11:8080', serving: true, active: 3, total: 20, bytesToEndpoint: 2048, bytesToClient: 700_000, connectFailures: 0, share: 2 / 3, rate: { conns: 2, bytes: 1024 } },
    { key: '10.244.1.11:8080', serving: false, active: 2, total: 10, bytesToEndpoint: 1024, bytesToClient: 348_576, connectFailures: 1, share: 1 / 3, rate: null },
  ],
  claims: ['10.0.0.10:30080/TCP'],
  problems: [],
};

describe('RelayCard (userspace mode, a service port)', () => {
  it("shows the proxy sockets' rotation, each endpoint's live figures and the balancing distribution", () => {
    render(RelayCard, { props: { relay } });
    const sockets = screen.getByTestId('relay-sockets').textContent!;
    expect(sockets).toContain(':32771');
    expect(sockets).toContain('10.244.0.12:8080 → 10.244.1.11:8080 → 10.244.0.11:8080');
    expect(sockets).toContain('no endpoint: connections are reset');
    const rows = screen.getByTestId('relay-endpoints').querySelectorAll('tbody tr');
    expect(rows).toHaveLength(2);
    expect(rows[0].textContent).toContain('66.7 %');
    expect(rows[0].textContent).toContain('2.0/s');
    expect(rows[1].textContent).toContain('left, draining');
    // Bars are drawn relative to the largest share.
    const bars = [...screen.getByTestId('relay-endpoints').querySelectorAll<HTMLElement>('.bar')].map((b) => b.style.width);
    expect(bars).toEqual(['100%', '50%']);
    const facts = screen.getByTestId('relay').textContent!;
    expect(facts).toContain('5 open now');
    expect(facts).toContain('3 refused: limit total');
    expect(facts).toContain('1 connect retry');
    expect(facts).toContain('10.0.0.10:30080/TCP');
  });
});

const row = (i: number): ConnectionRow => ({
  id: i,
  protocol: 'TCP',
  service: 'shop/web',
  servicePort: 'shop/web:http',
  pool: 'cluster',
  client: `10.0.0.2:${40000 + i}`,
  endpoint: '10.244.0.11:8080',
  startedAt: 1_000,
  bytesToEndpoint: 100,
  bytesToClient: 2048,
  halfClosed: false,
  drainingSince: i === 1 ? 900 : null,
});

describe('Connections page', () => {
  it('asks for a window of the open connections for the search and lists them, draining ones marked', async () => {
    const asked: string[] = [];
    const api = new Api(
      () => 't',
      async (url) => {
        asked.push(url);
        const q = new URL(url, 'http://x/').searchParams;
        const total = q.get('q') ? 2 : 5000;
        const offset = Number(q.get('offset'));
        const rows = Array.from({ length: Math.min(Number(q.get('limit')), total - offset) }, (_, k) => row(offset + k));
        return new Response(JSON.stringify({ at: 5_000, open: 5000, total, offset, rows }), { status: 200, headers: { 'content-type': 'application/json' } });
      },
    );
    const queries: string[] = [];
    const { rerender } = render(Connections, { props: { api, query: '', onquery: (q: string) => queries.push(q), now: 5_000, refreshMs: 60_000 } });
    await waitFor(() => expect(screen.getByTestId('connections-count').textContent).toContain('5,000 open'));
    const shown = screen.getAllByTestId('connection-row');
    // Virtualised: a window of rows, not 5,000.
    expect(shown.length).toBeGreaterThan(3);
    expect(shown.length).toBeLessThan(60);
    expect(shown[0].textContent).toContain('10.0.0.2:40000');
    expect(shown[0].textContent).toContain('4.0 s');
    expect(shown[1].textContent).toContain('draining');
    expect(asked[0]).toBe('api/v1/connections?q=&offset=0&limit=200');

    vi.useFakeTimers();
    try {
      await fireEvent.input(screen.getByLabelText('Search connections'), { target: { value: ' shop/web ' } });
      vi.advanceTimersByTime(300);
    } finally {
      vi.useRealTimers();
    }
    expect(queries).toEqual(['shop/web']);
    await rerender({ api, query: 'shop/web', onquery: () => {}, now: 5_000, refreshMs: 60_000 });
    await waitFor(() => expect(screen.getByTestId('connections-count').textContent).toContain('2 of 5,000 match'));
    expect(asked.at(-1)).toBe('api/v1/connections?q=shop%2Fweb&offset=0&limit=200');
  });

  it('says so when the relay carries nothing, and shows an error the API gave', async () => {
    const api = new Api(
      () => 't',
      async () => new Response(JSON.stringify({ at: 1, open: 0, total: 0, offset: 0, rows: [] }), { status: 200 }),
    );
    render(Connections, { props: { api, query: '', onquery: () => {}, now: 1, refreshMs: 60_000 } });
    await waitFor(() => expect(screen.getByText('No open connections')).toBeTruthy());
    const failing = new Api(
      () => 't',
      async () => new Response(JSON.stringify({ error: { code: 'KPROXY_ERR_NOT_FOUND', message: 'the iptables mode relays no connections (only the userspace mode does)' } }), { status: 404 }),
    );
    render(Connections, { props: { api: failing, query: '', onquery: () => {}, now: 1, refreshMs: 60_000 } });
    await waitFor(() => expect(screen.getByRole('alert').textContent).toContain('relays no connections'));
  });
});

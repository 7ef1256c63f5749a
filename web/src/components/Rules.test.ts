import '@testing-library/svelte/vitest';
import { render, screen } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import { Api } from '../lib/api.ts';
import type { Row, RowsPage } from '../lib/protocol.ts';
import { realServer } from '../testing/fixtures.ts';
import Rules from './Rules.svelte';

/** server answers /tables and the rows of one table, like the daemon in IPVS mode. */
function server(rows: Record<string, Row[]>) {
  return new Api(
    () => 'tok',
    async (url) => {
      if (url === 'api/v1/tables') {
        const tables = Object.entries(rows).map(([name, r]) => ({ name, chains: r.filter((x) => x.t === 'c').length, rules: r.filter((x) => x.t === 'r').length }));
        return Response.json({ kernel: { kind: 'ipvs', simulated: true, readAt: 1, readMs: 1, rules: 0, chains: 0, driftCount: 0 }, tables });
      }
      const m = /^api\/v1\/tables\/([^/]+)\/rows/.exec(url);
      const all = rows[m![1]];
      const page: RowsPage = { table: m![1], readAt: 1, total: all.length, offset: 0, rows: all };
      return Response.json(page);
    },
  );
}

const vsRow = (chain: string, rules: number, active: number): Row => ({
  t: 'c',
  chain,
  policy: 'rr persistent 600',
  packets: 0,
  bytes: 0,
  rules,
  ipvs: {
    protocol: 'TCP',
    address: '10.96.10.10',
    port: 80,
    scheduler: 'rr',
    persistence: 600,
    flags: [],
    active,
    inactive: 1,
    conns: 9,
    inPackets: 0,
    outPackets: 0,
    inBytes: 0,
    outBytes: 0,
    rate: { conns: 0.5, packets: 1, bytes: 1 },
  },
});
const rsRow = (chain: string, i: number, key: string, over = {}): Row => {
  const r = realServer(key, over);
  return { t: 'r', chain, i, spec: r.text, target: null, packets: r.packets, bytes: r.bytes, ipvs: r.ipvs };
};

const TABLES = {
  ipvs: [vsRow('TCP 10.96.10.10:80', 2, 3), rsRow('TCP 10.96.10.10:80', 0, '10.244.0.11:8080', { active: 3 }), rsRow('TCP 10.96.10.10:80', 1, '10.244.1.12:8080', { weight: 0, draining: true })],
  ipsets: [
    { t: 'c', chain: 'KUBE-CLUSTER-IP', policy: 'hash:ip,port family inet', packets: 0, bytes: 0, rules: 1 },
    { t: 'r', chain: 'KUBE-CLUSTER-IP', i: 0, spec: '10.96.10.10,tcp:80', target: null, packets: 0, bytes: 0 },
  ] satisfies Row[],
  nat: [{ t: 'c', chain: 'KUBE-SERVICES', policy: null, packets: 0, bytes: 0, rules: 0 }] satisfies Row[],
};

const route = (table: string) => ({ page: 'rules' as const, table, chain: null, q: '', drift: false });
const text = (el: Element) => [...el.children].map((c) => c.textContent?.replace(/\s+/g, ' ').trim());

describe('Rules page in IPVS mode', () => {
  it('lists virtual servers with their settings and real servers with weight, connections and rate', async () => {
    render(Rules, { props: { api: server(TABLES), route: route('ipvs'), drift: null, kernelReadAt: 1, now: 2, go: () => {} } });
    const header = await screen.findByTestId('chain-row');
    expect(text(header)).toEqual(['TCP 10.96.10.10:80 rr persistent 600 · 2 real servers', '', '3', '1', '0.5/s', '0', '0 B']);
    expect(document.querySelector('.rhead')!.textContent).toContain('Virtual server / real server');
    const reals = screen.getAllByTestId('real-server-row');
    expect(reals.map(text)).toEqual([
      ['1→ 10.244.0.11:8080 Masq', '1', '3', '0', '–', '0', '0 B'],
      ['2→ 10.244.1.12:8080 Masqdraining', '0', '0', '0', '–', '0', '0 B'],
    ]);
    expect(reals[1].classList.contains('draining')).toBe(true);
    expect((await screen.findAllByRole('tab')).map((t) => t.textContent?.trim().split(' ')[0])).toEqual(['ipvs', 'ipsets', 'nat']);
  });

  it('lists each set with its type and its members, without counters', async () => {
    render(Rules, { props: { api: server(TABLES), route: route('ipsets'), drift: null, kernelReadAt: 1, now: 2, go: () => {} } });
    const header = await screen.findByTestId('chain-row');
    expect(text(header)).toEqual(['KUBE-CLUSTER-IP hash:ip,port family inet · 1 member']);
    expect(document.querySelector('.rhead')!.textContent).toBe('Set / member');
    expect(document.querySelector('.r.list.rule')!.textContent).toBe('110.96.10.10,tcp:80');
  });

  it('keeps the iptables columns for nat and filter', async () => {
    render(Rules, { props: { api: server(TABLES), route: route('nat'), drift: null, kernelReadAt: 1, now: 2, go: () => {} } });
    await screen.findByTestId('chain-row');
    expect([...document.querySelector('.rhead')!.children].map((c) => c.textContent)).toEqual(['Chain / rule', 'Jumps to', 'Packets', 'Bytes']);
  });
});

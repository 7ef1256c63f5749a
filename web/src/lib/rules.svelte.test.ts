import { describe, expect, it } from 'vitest';
import type { Row } from './protocol.ts';
import { PAGE, TableView, type RowsSource } from './rules.svelte.ts';

/** source serves a table of n rule rows (chain header every 10th) and records each request. */
function source(n: number) {
  const requests: string[] = [];
  const all: Row[] = Array.from({ length: n }, (_, i) =>
    i % 10 === 0
      ? { t: 'c', chain: `C${i / 10}`, policy: null, packets: 0, bytes: 0, rules: 9 }
      : { t: 'r', chain: `C${Math.floor(i / 10)}`, i: (i % 10) - 1, spec: `-j X${i}`, target: null, packets: i, bytes: 0 },
  );
  const src: RowsSource = {
    async rows(table, offset, limit, q, drift) {
      requests.push(`${table} ${offset} ${limit} ${q} ${drift}`);
      const rows = all.filter((r) => !q || (r.t === 'r' ? r.spec.includes(q) : r.chain.includes(q)));
      return { table, readAt: 1, total: rows.length, offset, rows: rows.slice(offset, offset + limit) };
    },
    async chainRow(_t, chain) {
      const i = all.findIndex((r) => r.t === 'c' && r.chain === chain);
      return i < 0 ? null : i;
    },
  };
  return { src, requests };
}

describe('TableView', () => {
  it('loads the first page, then only the pages scrolled into view, once each', async () => {
    const { src, requests } = setup(100_000);
    const v = new TableView(src);
    await v.show('nat', '', false);
    expect(v.total).toBe(100_000);
    expect(v.row(0)).toMatchObject({ t: 'c', chain: 'C0' });
    expect(v.row(PAGE)).toBeUndefined();
    await v.ensure(50_000, 50_040);
    await v.ensure(50_010, 50_050);
    expect(v.row(50_001)).toMatchObject({ t: 'r', spec: '-j X50001' });
    expect(requests).toEqual(['nat 0 200  false', 'nat 50000 200  false']);
  });

  it("starts over when the filter changes, and finds a chain's header row", async () => {
    const { src } = setup(1000);
    const v = new TableView(src);
    await v.show('nat', '', false);
    const first = v.version;
    await v.show('nat', 'X99', false);
    expect(v.total).toBe(10);
    expect(v.version).toBeGreaterThan(first);
    expect(await v.locate('C5')).toBe(50);
  });
});

describe('TableView with a slow server', () => {
  it('ignores a page that arrives after the view moved on to another filter', async () => {
    const resolvers: (() => void)[] = [];
    const slow: RowsSource = {
      rows: (table, offset, _limit, q) =>
        new Promise((resolve) => resolvers.push(() => resolve({ table, readAt: 1, total: q ? 1 : 500, offset, rows: [{ t: 'c', chain: q || 'ALL', policy: null, packets: 0, bytes: 0, rules: 0 }] }))),
      chainRow: async () => null,
    };
    const v = new TableView(slow);
    const a = v.show('nat', '', false);
    const b = v.show('nat', 'KUBE-SVC', false);
    resolvers[1]();
    await b;
    resolvers[0]();
    await a;
    expect(v.total).toBe(1);
    expect(v.row(0)).toMatchObject({ chain: 'KUBE-SVC' });
  });
});

function setup(n: number) {
  return source(n);
}

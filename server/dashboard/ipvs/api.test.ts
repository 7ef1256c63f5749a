import { afterEach, describe, expect, it } from 'vitest';
import type { RowsPage, ServiceDetail } from '../protocol.ts';
import { watchedCounters } from '../service-detail.ts';
import { testDashboard, type TestDashboard } from '../testing.ts';

const AUTH = { host: 'localhost:10249', authorization: 'Bearer t0ken' };

describe('dashboard API in IPVS mode', () => {
  let t: TestDashboard;
  afterEach(async () => t?.close());

  const get = async <T>(url: string): Promise<T> => {
    const res = await t.app.inject({ url, headers: AUTH });
    expect(res.statusCode, url).toBe(200);
    return res.json() as T;
  };

  it('lists the IPVS tables first, then the nat and filter rules of the mode', async () => {
    t = await testDashboard({ token: 't0ken', mode: 'ipvs' });
    const res = await get<{ kernel: { kind: string }; tables: { name: string; chains: number; rules: number }[] }>('/api/v1/tables');
    expect(res.kernel.kind).toBe('ipvs');
    expect(res.tables.map((x) => x.name)).toEqual(['ipvs', 'ipsets', 'addresses', 'nat', 'filter']);
    const status = await get<{ overview: { mode: string; counts: { rulesByTable: Record<string, number> } } }>('/api/v1/status');
    expect(status.overview.mode).toBe('ipvs');
    expect(Object.keys(status.overview.counts.rulesByTable)).toEqual(['virtual-servers', 'real-servers', 'ipset-entries', 'nat', 'filter']);
  });

  it('pages the ipvs table with each virtual server and real server figures, and finds a virtual server by name', async () => {
    t = await testDashboard({ token: 't0ken', mode: 'ipvs' });
    t.ipvs!.ipvs.setConnections('10.96.10.10:80/TCP', '10.244.1.12:8080', 7, 2);
    const chain = encodeURIComponent('TCP 10.96.10.10:80');
    const at = await get<{ row: number }>(`/api/v1/tables/ipvs/chains/${chain}`);
    const page = await get<RowsPage>(`/api/v1/tables/ipvs/rows?offset=${at.row}&limit=4`);
    expect(page.rows[0]).toMatchObject({ t: 'c', chain: 'TCP 10.96.10.10:80', policy: 'rr', rules: 3, ipvs: { scheduler: 'rr', active: 7, inactive: 2 } });
    expect(page.rows.slice(1).map((r) => (r.t === 'r' ? [r.spec, r.ipvs?.active] : null))).toEqual([
      ['-> 10.244.0.11:8080 Masq weight 1', 0],
      ['-> 10.244.1.12:8080 Masq weight 1', 7],
      ['-> 10.244.1.13:8080 Masq weight 1', 0],
    ]);
    const members = await get<RowsPage>('/api/v1/tables/ipsets/rows?q=10.96.10.10&limit=20');
    expect(members.rows.map((r) => (r.t === 'c' ? `set ${r.chain} ${r.policy}` : r.spec))).toEqual([
      'set KUBE-CLUSTER-IP hash:ip,port family inet',
      '10.96.10.10,tcp:80',
      'set KUBE-IPVS-IPS hash:ip family inet',
      '10.96.10.10',
    ]);
  });

  it('serves a Service page with its virtual servers, sets and glue rules, and live counters with connection counts', async () => {
    t = await testDashboard({ token: 't0ken', mode: 'ipvs' });
    await get('/api/v1/tables');
    const d = await get<ServiceDetail>('/api/v1/services/shop/frontend');
    const port = d.ports[0];
    expect(port.flows.map((f) => f.path.at(-1))).toEqual(['TCP 10.96.10.10:80']);
    expect(port.chains.map((c) => `${c.table}/${c.name}/${c.role}`)).toEqual([
      'ipsets/KUBE-LOOP-BACK/entry',
      'ipsets/KUBE-CLUSTER-IP/entry',
      'nat/KUBE-SERVICES/entry',
      'nat/KUBE-POSTROUTING/entry',
      'filter/KUBE-IPVS-FILTER/entry',
      'ipvs/TCP 10.96.10.10:80/cluster-ip',
    ]);
    const vs = port.chains.at(-1)!;
    expect(vs).toMatchObject({ from: 'kernel', ipvs: { scheduler: 'rr', address: '10.96.10.10', port: 80 } });
    expect(vs.rules.map((r) => r.ipvs?.weight)).toEqual([1, 1, 1]);
    expect(port.endpoints.find((e) => e.key === '10.244.1.12:8080')!.object).toBe('TCP 10.96.10.10:80');

    t.ipvs!.ipvs.setConnections('10.96.10.10:80/TCP', '10.244.1.12:8080', 4, 1);
    await t.settle(10_000);
    await get('/api/v1/tables');
    await t.settle(0);
    const live = watchedCounters((await t.dashboard.detail('shop/frontend'))!);
    const c = live.chains.find((x) => x.table === 'ipvs')!;
    expect(c.ipvs).toMatchObject({ active: 4, inactive: 1 });
    expect(c.reals!.map((r) => r?.active)).toEqual([0, 4, 0]);
  });

  it("offers the intended objects as one download in the tools' formats", async () => {
    t = await testDashboard({ token: 't0ken', mode: 'ipvs' });
    const res = await t.app.inject({ url: '/api/v1/restore-input/intended', headers: AUTH });
    expect(res.statusCode).toBe(200);
    expect(res.body).toMatch(/^# ipvsadm -Sn\n-A -t /);
    expect(res.body).toContain('\n# ipset save\ncreate KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\n');
    const last = await t.app.inject({ url: '/api/v1/restore-input/last', headers: AUTH });
    expect(last.body).toMatch(/^# ip -batch -\n/);
  });
});

import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inflateSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeAccessReviewer } from '../auth/access-review-fake.ts';
import { flushMicrotasks } from '../../clock-fake.ts';
import type { ConntrackRunner } from '../../kernel/conntrack.ts';
import { SimulatedConntrack, natFlow } from '../../kernel/conntrack-simulated.ts';
import type { ActionResult, RowsPage, ServiceConntrack, ServiceDetail, ServiceSummary } from '../protocol.ts';
import { HeavyReads } from '../heavy-reads.ts';
import { makeService } from '../../proxy/testing.ts';
import { testDashboard, type TestDashboard } from '../testing.ts';

const HOST = { host: 'localhost:10249' };
const TOKEN = 's3cret-token';
const AUTH = { ...HOST, authorization: `Bearer ${TOKEN}` };

describe('dashboard API (/api/v1)', () => {
  let t: TestDashboard;
  afterEach(async () => t?.close());

  it('refuses every API route without the token, with a WWW-Authenticate challenge', async () => {
    t = await testDashboard({ token: TOKEN });
    for (const url of [
      '/api/v1/status',
      '/api/v1/services',
      '/api/v1/services/shop/frontend',
      '/api/v1/services/shop/frontend/conntrack',
      '/api/v1/tables',
      '/api/v1/syncs',
      '/api/v1/restore-input/last',
    ]) {
      const res = await t.app.inject({ url, headers: HOST });
      expect(res.statusCode, url).toBe(401);
      expect(res.headers['www-authenticate']).toMatch(/^Bearer/);
      expect(res.json().error.code).toBe('KPROXY_ERR_AUTH_REQUIRED');
    }
    const wrong = await t.app.inject({ url: '/api/v1/status', headers: { ...HOST, authorization: 'Bearer nope' } });
    expect(wrong.statusCode).toBe(401);
    expect(wrong.json().error.code).toBe('KPROXY_ERR_AUTH_FAILED');
    expect(t.dashboard.counters().authFailures).toMatchObject({ invalid: 1 });
    expect(t.log.lines('warn').join('\n')).toMatch(/dashboard sign-in refused: the bearer token is not the dashboard token reason=invalid from=/);
    const post = await t.app.inject({ method: 'POST', url: '/api/v1/actions/resync', headers: HOST });
    expect(post.statusCode).toBe(401);
    expect(t.daemon.proxy.lastRecord?.trigger).toBe('startup');
    // The Overview counts the wrong token, not the requests that carried none (a browser's first visit).
    const status = await t.app.inject({ url: '/api/v1/status', headers: AUTH });
    expect(status.json().overview.stream).toMatchObject({ refusedSignIns: 1 });
  });

  it('never locks the real token out: after five wrong tokens from an address its wrong tokens get 429, the right one still reads and acts', async () => {
    t = await testDashboard({ token: TOKEN });
    const from = { remoteAddress: '198.51.100.9' };
    for (let i = 0; i < 5; i++) {
      const res = await t.app.inject({ url: '/api/v1/status', headers: { ...HOST, authorization: `Bearer guess-${i}` }, ...from });
      expect(res.statusCode).toBe(401);
    }
    const throttled = await t.app.inject({ url: '/api/v1/status', headers: { ...HOST, authorization: 'Bearer guess-5' }, ...from });
    expect(throttled.statusCode).toBe(429);
    expect(throttled.json().error.code).toBe('KPROXY_ERR_RATE_LIMITED');
    expect((await t.app.inject({ url: '/api/v1/status', headers: AUTH, ...from })).statusCode).toBe(200);
    const act = await t.app.inject({ method: 'POST', url: '/api/v1/actions/resync', headers: { ...AUTH, 'content-type': 'application/json' }, payload: '{}', ...from });
    expect(act.statusCode).toBe(200);
    expect(t.dashboard.counters().authFailures).toMatchObject({ invalid: 5, throttled: 1 });
  });

  it("keeps kube-proxy's /metrics, /healthz, /proxyMode and /configz open without a token", async () => {
    t = await testDashboard({ token: TOKEN });
    for (const url of ['/metrics', '/healthz', '/proxyMode', '/configz']) {
      expect((await t.app.inject({ url, headers: HOST })).statusCode, url).toBe(200);
    }
  });

  it('serves status, the service list with search, and a service page with endpoints, chains and flows', async () => {
    t = await testDashboard({ token: TOKEN });
    const status = (await t.app.inject({ url: '/api/v1/status', headers: AUTH })).json();
    expect(status.viewer).toEqual({ authMode: 'token', user: 'token', canAct: true });
    expect(status.overview).toMatchObject({ node: 'node-a', mode: 'iptables', paused: false, counts: { services: 10 }, conntrack: null });
    // The daemon's own memory, as /metrics reports it (process_resident_memory_bytes, nodejs_heap_size_*).
    const { rssBytes, heapUsedBytes, heapTotalBytes } = status.overview.memory;
    expect(heapUsedBytes).toBeGreaterThan(0);
    expect(heapTotalBytes).toBeGreaterThanOrEqual(heapUsedBytes);
    expect(rssBytes).toBeGreaterThan(heapUsedBytes);

    const all = (await t.app.inject({ url: '/api/v1/services', headers: AUTH })).json().services as ServiceSummary[];
    expect(all.map((s) => s.key)).toEqual([...all.map((s) => s.key)].sort());
    const found = (await t.app.inject({ url: '/api/v1/services?q=fronT', headers: AUTH })).json().services as ServiceSummary[];
    expect(found.map((s) => s.key)).toEqual(['shop/frontend']);
    const byIP = (await t.app.inject({ url: '/api/v1/services?q=10.96.10.10', headers: AUTH })).json().services as ServiceSummary[];
    expect(byIP.map((s) => s.key)).toEqual(['shop/frontend']);
    const payments = all.find((s) => s.key === 'shop/payments')!;
    expect(payments.warnings).toContain('no-endpoints');

    const res = await t.app.inject({ url: '/api/v1/services/shop/frontend', headers: AUTH });
    expect(res.statusCode).toBe(200);
    const d = res.json() as ServiceDetail;
    const port = d.ports[0];
    expect(port.endpoints.filter((e) => e.clusterShare !== null).map((e) => e.clusterShare)).toEqual([1 / 3, 1 / 3, 1 / 3]);
    const terminating = port.endpoints.find((e) => e.terminating)!;
    expect(terminating.clusterShare).toBeNull();
    expect(port.flows[0]).toMatchObject({ kind: 'clusterIP', address: '10.96.10.10:80/TCP', outcome: 'endpoints' });
    const svcChain = port.flows[0].path[1];
    expect(port.chains.map((c) => c.name)).toContain(svcChain);
    const entry = port.chains.find((c) => c.role === 'entry')!;
    expect(entry.rules.every((r) => r.text.includes('shop/frontend:http'))).toBe(true);
    expect(port.chains.filter((c) => c.role === 'endpoint')).toHaveLength(3);

    expect((await t.app.inject({ url: '/api/v1/services/shop/nope', headers: AUTH })).statusCode).toBe(404);
  });

  it('pages through a table, jumps to a chain and searches rules', async () => {
    t = await testDashboard({ token: TOKEN });
    const tables = (await t.app.inject({ url: '/api/v1/tables', headers: AUTH })).json();
    expect(tables.tables.map((x: { name: string }) => x.name)).toEqual(expect.arrayContaining(['filter', 'nat']));
    const first = (await t.app.inject({ url: '/api/v1/tables/nat/rows?offset=0&limit=3', headers: AUTH })).json() as RowsPage;
    expect(first.rows).toHaveLength(3);
    expect(first.rows[0]).toMatchObject({ t: 'c', chain: 'PREROUTING' });
    const second = (await t.app.inject({ url: `/api/v1/tables/nat/rows?offset=3&limit=3`, headers: AUTH })).json() as RowsPage;
    expect(second.offset).toBe(3);
    expect(second.total).toBe(first.total);

    const jump = (await t.app.inject({ url: '/api/v1/tables/nat/chains/KUBE-SERVICES', headers: AUTH })).json();
    const at = (await t.app.inject({ url: `/api/v1/tables/nat/rows?offset=${jump.row}&limit=1`, headers: AUTH })).json() as RowsPage;
    expect(at.rows[0]).toMatchObject({ t: 'c', chain: 'KUBE-SERVICES' });

    const search = (await t.app.inject({ url: '/api/v1/tables/nat/rows?q=10.96.10.10&limit=50', headers: AUTH })).json() as RowsPage;
    const rules = search.rows.filter((r) => r.t === 'r');
    expect(rules.length).toBeGreaterThan(0);
    expect(rules.every((r) => r.t === 'r' && r.spec.includes('10.96.10.10'))).toBe(true);
    expect(search.rows[0].t).toBe('c');

    expect((await t.app.inject({ url: '/api/v1/tables/nope/rows', headers: AUTH })).statusCode).toBe(404);
    expect((await t.app.inject({ url: '/api/v1/tables/nat/rows?limit=100000', headers: AUTH })).statusCode).toBe(400);
  });

  it('offers the last restore input, the last failed one and the intended rules as downloads', async () => {
    t = await testDashboard({ token: TOKEN });
    const last = await t.app.inject({ url: '/api/v1/restore-input/last', headers: AUTH });
    expect(last.statusCode).toBe(200);
    expect(last.headers['content-disposition']).toBe('attachment; filename="kproxy-node-a-sync-1.rules"');
    expect(last.body).toMatch(/^\*filter\n/);
    expect((await t.app.inject({ url: '/api/v1/restore-input/failed', headers: AUTH })).statusCode).toBe(404);

    t.kernel.restoreHook = () => 'iptables-restore: line 12 failed';
    t.daemon.proxy.requestFullSync('resync');
    await t.settle(1000);
    const failed = await t.app.inject({ url: '/api/v1/restore-input/failed', headers: AUTH });
    expect(failed.statusCode).toBe(200);
    expect(failed.body).toMatch(/^# sync 2 failed: .*line 12 failed/);
    const syncs = (await t.app.inject({ url: '/api/v1/syncs', headers: AUTH })).json().syncs;
    expect(syncs.map((s: { seq: number; input?: string }) => [s.seq, s.input])).toEqual([
      [1, 'last'],
      [2, 'failed'],
    ]);

    const intended = await t.app.inject({ url: '/api/v1/restore-input/intended', headers: AUTH });
    expect(intended.body).toContain(':KUBE-SERVICES - [0:0]');
  });

  it('reports drift once two kernel reads show a rule kproxy wrote is gone', async () => {
    t = await testDashboard({ token: TOKEN });
    await t.app.inject({ url: '/api/v1/tables', headers: AUTH });
    const detail = (await t.app.inject({ url: '/api/v1/services/shop/frontend', headers: AUTH })).json() as ServiceDetail;
    const svc = detail.ports[0].chains.find((c) => c.role === 'service')!;
    await t.kernel.deleteRule('nat', svc.name, splitSpec(svc.rules[0].text));
    await t.settle(5000);
    await t.app.inject({ url: '/api/v1/tables', headers: AUTH });
    await t.settle(0);
    expect((await t.app.inject({ url: '/api/v1/drift', headers: AUTH })).json().total).toBe(0);
    await t.settle(5000);
    await t.app.inject({ url: '/api/v1/tables', headers: AUTH });
    await t.settle(0);
    const drift = (await t.app.inject({ url: '/api/v1/drift', headers: AUTH })).json();
    expect(drift.findings).toEqual([expect.objectContaining({ table: 'nat', chain: svc.name, kind: 'missing-rule', detail: svc.rules[0].text })]);
    const onlyDrift = (await t.app.inject({ url: '/api/v1/tables/nat/rows?drift=true', headers: AUTH })).json() as RowsPage;
    expect(onlyDrift.rows[0]).toMatchObject({ t: 'c', chain: svc.name, drift: 'missing-rule' });
  });

  it('serves the built app at / with security headers, and says so when it is not built', async () => {
    const web = mkdtempSync(join(tmpdir(), 'kpt-web-'));
    try {
      mkdirSync(join(web, 'assets'));
      writeFileSync(join(web, 'index.html'), '<!doctype html><title>kproxy</title>');
      writeFileSync(join(web, 'assets', 'app-1234.js'), 'console.log(1)');
      t = await testDashboard({ token: TOKEN, webRoot: web });
      const index = await t.app.inject({ url: '/', headers: HOST });
      expect(index.statusCode).toBe(200);
      expect(index.body).toContain('<title>kproxy</title>');
      expect(index.headers['content-security-policy']).toContain("frame-ancestors 'none'");
      expect(index.headers['cache-control']).toBe('no-cache');
      const asset = await t.app.inject({ url: '/assets/app-1234.js', headers: HOST });
      expect(asset.headers['cache-control']).toContain('immutable');
      expect((await t.app.inject({ url: '/nope', headers: HOST })).statusCode).toBe(404);
      await t.close();
      t = await testDashboard({ token: TOKEN });
      expect((await t.app.inject({ url: '/', headers: HOST })).body).toContain('npm run build');
    } finally {
      rmSync(web, { recursive: true, force: true });
    }
  });
});

describe('dashboard actions', () => {
  let t: TestDashboard;
  afterEach(async () => t?.close());

  const post = (action: string, body: object = {}, headers: Record<string, string> = AUTH) =>
    t.app.inject({ method: 'POST', url: `/api/v1/actions/${action}`, headers: { ...headers, 'content-type': 'application/json' }, payload: JSON.stringify(body) });

  it('resync forces a full sync, is audited with a log line and an Event naming who, and is rate-limited', async () => {
    t = await testDashboard({ token: TOKEN });
    const res = await post('resync');
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ action: 'resync', ok: true, user: 'token' } satisfies Partial<ActionResult>);
    await t.settle(1000);
    expect(t.daemon.proxy.lastRecord).toMatchObject({ seq: 2, trigger: 'resync', full: true, ok: true });
    const event = t.events.recent().find((e) => e.reason === 'DashboardResync')!;
    expect(event).toMatchObject({ type: 'Normal', action: 'Resync', regarding: { kind: 'Node', name: 'node-a' } });
    expect(event.note).toMatch(/^resync by "token" from .+ \(dashboard\): done: full sync requested/);
    expect(t.log.lines('info').some((l) => /dashboard action action=resync user=token .*outcome=done/.test(l))).toBe(true);

    const again = await post('resync');
    expect(again.statusCode).toBe(429);
    expect(again.headers['retry-after']).toBe('9');
    expect(again.json().error).toEqual({ code: 'KPROXY_ERR_RATE_LIMITED', message: 'resync was asked less than 10 s after the previous one; try again in 9 s' });
    expect(t.log.lines('warn').some((l) => /dashboard action action=resync .*outcome=refused/.test(l))).toBe(true);
    await t.settle(9_000);
    expect((await post('resync')).statusCode).toBe(200);
  });

  it('with auth off, refuses writes a page of another site could send: no JSON body, or a browser saying it comes from elsewhere', async () => {
    t = await testDashboard();
    const empty = await t.app.inject({ method: 'POST', url: '/api/v1/actions/pause', headers: HOST });
    expect(empty.statusCode).toBe(415);
    expect(empty.json().error.code).toBe('KPROXY_ERR_MEDIA_TYPE_UNSUPPORTED');
    const form = await t.app.inject({ method: 'POST', url: '/api/v1/actions/pause', headers: { ...HOST, 'content-type': 'text/plain' }, payload: '' });
    expect(form.statusCode).toBe(415);
    expect(t.daemon.proxy.paused).toBe(false);
    const crossSite = await post('pause', {}, { ...HOST, 'sec-fetch-site': 'cross-site' });
    expect(crossSite.statusCode).toBe(403);
    expect(crossSite.json().error.code).toBe('KPROXY_ERR_ORIGIN_REJECTED');
    expect((await t.app.inject({ url: '/api/v1/status', headers: { ...HOST, 'sec-fetch-site': 'same-site' } })).statusCode).toBe(403);
    expect(t.daemon.proxy.paused).toBe(false);
    // The dashboard's own page and a script without browser headers pass.
    expect((await post('pause', {}, { ...HOST, 'sec-fetch-site': 'same-origin', origin: 'http://localhost:10249' })).statusCode).toBe(200);
    expect(t.daemon.proxy.paused).toBe(true);
    expect((await post('resume', {}, HOST)).statusCode).toBe(200);
  });

  it('refuses an action from another origin, even with the token', async () => {
    t = await testDashboard({ token: TOKEN });
    const res = await post('resync', undefined, { ...AUTH, origin: 'http://evil.example' });
    expect(res.statusCode).toBe(403);
    expect(res.json().error.code).toBe('KPROXY_ERR_ORIGIN_REJECTED');
    expect((await post('resync', undefined, { ...AUTH, origin: 'http://localhost:10249' })).statusCode).toBe(200);
  });

  it('cleanup with pause removes the rules and keeps them off until resume puts them back', async () => {
    t = await testDashboard({ token: TOKEN });
    const has = () => t.kernel.chains('nat').some((c) => c.startsWith('KUBE-SVC-'));
    expect(has()).toBe(true);
    const res = await post('cleanup', { pause: true });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ action: 'cleanup', ok: true, paused: true });
    expect(res.json().message).toMatch(/^removed .*nat \d+.*rules stay off until resumed/);
    expect(has()).toBe(false);
    await t.settle(60_000);
    expect(has()).toBe(false);
    const warning = t.events.recent().find((e) => e.reason === 'DashboardCleanup')!;
    expect(warning.type).toBe('Warning');

    const resumed = await post('resume');
    expect(resumed.json()).toMatchObject({ ok: true, paused: false });
    await t.settle(1000);
    expect(has()).toBe(true);
    expect(t.daemon.proxy.lastRecord).toMatchObject({ trigger: 'resume', full: true, ok: true });
  });

  it('refuses a resync while paused', async () => {
    t = await testDashboard({ token: TOKEN });
    expect((await post('pause')).statusCode).toBe(200);
    const res = await post('resync');
    expect(res.statusCode).toBe(409);
    expect(res.json().error).toEqual({ code: 'KPROXY_ERR_SYNCS_PAUSED', message: 'syncs are paused: resume to sync' });
    // Everyone watching sees it as the last action.
    expect((await t.app.inject({ url: '/api/v1/status', headers: AUTH })).json().lastAction).toMatchObject({ action: 'resync', ok: false, message: 'syncs are paused: resume to sync' });
  });

  it('answers a failed action with its code only; the detail goes to the log and the audit Event', async () => {
    t = await testDashboard({ token: TOKEN });
    t.daemon.cleanup = async () => {
      throw new Error('EACCES: permission denied, open /run/xtables.lock');
    };
    const res = await post('cleanup');
    expect(res.statusCode).toBe(500);
    const { error } = res.json();
    expect(error.code).toBe('KPROXY_ERR_CLEANUP_FAILED');
    expect(error.message).toMatch(/^kproxy could not answer this request \(KPROXY_ERR_CLEANUP_FAILED\); the kproxy log on this node has the details \(request req-\d+\)$/);
    expect(res.body).not.toMatch(/EACCES|xtables/);
    expect(t.log.lines('error').some((l) => l.includes('dashboard request failed: cleanup failed: EACCES: permission denied, open /run/xtables.lock'))).toBe(true);
    const event = t.events.recent().find((e) => e.reason === 'DashboardCleanup')!;
    expect(event).toMatchObject({ type: 'Warning', note: expect.stringMatching(/: failed: cleanup failed: EACCES/) });
  });
});

describe('dashboard delegated auth (TokenReview + SubjectAccessReview)', () => {
  let t: TestDashboard;
  afterEach(async () => t?.close());

  it('lets a user with get on nodes/kproxy view, and only one with update act', async () => {
    const reviewer = new FakeAccessReviewer();
    reviewer.users.set('alice-token', { username: 'alice', groups: ['devs'] });
    reviewer.users.set('bob-token', { username: 'bob', groups: ['sre'] });
    reviewer.allow('alice', 'get').allow('bob', 'get').allow('bob', 'update');
    t = await testDashboard({ reviewer });
    const as = (token: string) => ({ ...HOST, authorization: `Bearer ${token}` });

    const alice = await t.app.inject({ url: '/api/v1/whoami', headers: as('alice-token') });
    expect(alice.json()).toEqual({ authMode: 'delegated', user: 'alice', canAct: false });
    const denied = await t.app.inject({ method: 'POST', url: '/api/v1/actions/resync', headers: { ...as('alice-token'), 'content-type': 'application/json' }, payload: '{}' });
    expect(denied.statusCode).toBe(403);
    expect(denied.json().error.message).toBe('user "alice" may not update nodes/kproxy node-a (SubjectAccessReview)');

    const bob = await t.app.inject({ method: 'POST', url: '/api/v1/actions/resync', headers: { ...as('bob-token'), 'content-type': 'application/json' }, payload: '{}' });
    expect(bob.statusCode).toBe(200);
    expect(t.events.recent().find((e) => e.reason === 'DashboardResync')!.note).toMatch(/^resync by "bob"/);

    expect((await t.app.inject({ url: '/api/v1/status', headers: as('mallory-token') })).statusCode).toBe(401);
  });

  it('caches review answers, and fails closed (503) when the API server cannot be asked', async () => {
    const reviewer = new FakeAccessReviewer();
    reviewer.users.set('alice-token', { username: 'alice', groups: [] });
    reviewer.allow('alice', 'get');
    t = await testDashboard({ reviewer });
    const headers = { ...HOST, authorization: 'Bearer alice-token' };
    for (let i = 0; i < 5; i++) expect((await t.app.inject({ url: '/api/v1/status', headers })).statusCode).toBe(200);
    expect(reviewer.tokenReviews).toBe(1);
    expect(reviewer.accessReviews).toBe(2);
    reviewer.failing = true;
    reviewer.users.set('carol-token', { username: 'carol', groups: [] });
    const res = await t.app.inject({ url: '/api/v1/status', headers: { ...HOST, authorization: 'Bearer carol-token' } });
    expect(res.statusCode).toBe(503);
    // The client learns the code, never the API server's address; the log has it.
    expect(res.json().error.code).toBe('KPROXY_ERR_AUTH_UNAVAILABLE');
    expect(res.body).not.toMatch(/10\.0\.0\.1|ECONNREFUSED/);
    expect(t.log.lines('error').some((l) => /cannot check the bearer token with the API server: .*ECONNREFUSED 10\.0\.0\.1:6443/.test(l))).toBe(true);
  });
});

describe('dashboard budgets for expensive reads', () => {
  let t: TestDashboard;
  afterEach(async () => t?.close());

  it('runs a limited number of heavy reads at once, queues a few, and refuses the rest with 429 and Retry-After', async () => {
    t = await testDashboard({ token: TOKEN, heavy: new HeavyReads({ maxRunning: 1, maxQueued: 1 }) });
    let release = () => {};
    const gate = new Promise<void>((r) => (release = r));
    const real = t.dashboard.detail.bind(t.dashboard);
    let started = 0;
    t.dashboard.detail = async (key) => {
      started++;
      await gate;
      return real(key);
    };
    const first = t.app.inject({ url: '/api/v1/services/shop/frontend', headers: AUTH });
    const second = t.app.inject({ url: '/api/v1/services/shop/web', headers: AUTH });
    for (let i = 0; i < 50 && started === 0; i++) await flushMicrotasks();
    expect(started).toBe(1);
    const third = await t.app.inject({ url: '/api/v1/restore-input/intended', headers: AUTH });
    expect(third.statusCode).toBe(429);
    expect(third.headers['retry-after']).toBe('1');
    expect(third.json().error).toMatchObject({ code: 'KPROXY_ERR_RATE_LIMITED' });
    // Cheap reads are not held up.
    expect((await t.app.inject({ url: '/api/v1/status', headers: AUTH })).statusCode).toBe(200);
    release();
    expect((await first).statusCode).toBe(200);
    expect((await second).statusCode).toBe(200);
    expect(started).toBe(2);
    expect((await t.app.inject({ url: '/api/v1/restore-input/intended', headers: AUTH })).statusCode).toBe(200);
    expect(t.dashboard.counters().refused.reads).toBe(1);
    expect((await t.app.inject({ url: '/api/v1/status', headers: AUTH })).json().overview.stream).toMatchObject({ refusedRequests: 1 });
  });

  it('formats the intended rules once for downloads that run at the same time', async () => {
    t = await testDashboard({ token: TOKEN, heavy: new HeavyReads({ maxRunning: 3 }) });
    const format = t.dashboard.provider.formatIntended.bind(t.dashboard.provider);
    let formats = 0;
    let release = () => {};
    const gate = new Promise<void>((r) => (release = r));
    t.dashboard.provider.formatIntended = async (tables) => {
      formats++;
      await gate;
      return format(tables);
    };
    const pending = [1, 2, 3].map(() => t.app.inject({ url: '/api/v1/restore-input/intended', headers: AUTH }));
    for (let i = 0; i < 50; i++) await flushMicrotasks();
    release();
    const bodies = await Promise.all(pending);
    expect(bodies.map((b) => b.statusCode)).toEqual([200, 200, 200]);
    expect(new Set(bodies.map((b) => b.body)).size).toBe(1);
    expect(formats).toBe(1);
  });

  it('keeps the intended rules formatted until they change, deflated to a client that takes it and text to one that does not', async () => {
    t = await testDashboard({ token: TOKEN });
    const format = t.dashboard.provider.formatIntended.bind(t.dashboard.provider);
    let formats = 0;
    t.dashboard.provider.formatIntended = async (tables) => {
      formats++;
      return format(tables);
    };
    const plain = await t.app.inject({ url: '/api/v1/restore-input/intended', headers: AUTH });
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(plain.body).toContain(':KUBE-SERVICES - [0:0]');
    const deflated = await t.app.inject({ url: '/api/v1/restore-input/intended', headers: { ...AUTH, 'accept-encoding': 'gzip, deflate, br' } });
    expect(deflated.headers['content-encoding']).toBe('deflate');
    expect(deflated.headers.vary).toBe('accept-encoding');
    expect(Number(deflated.headers['content-length'])).toBe(deflated.rawPayload.length);
    expect(inflateSync(deflated.rawPayload).toString('utf8')).toBe(plain.body);
    expect((await t.app.inject({ url: '/api/v1/restore-input/intended', headers: { ...AUTH, 'accept-encoding': 'deflate;q=0, gzip' } })).headers['content-encoding']).toBeUndefined();
    expect(formats).toBe(1);

    // A sync that changes the rules: the next download formats them again.
    t.source.handlers!.onService(null, makeService('shop', 'added', { clusterIP: '10.96.30.30', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }));
    await t.settle(2000);
    const after = await t.app.inject({ url: '/api/v1/restore-input/intended', headers: AUTH });
    expect(formats).toBe(2);
    expect(after.body).not.toBe(plain.body);
  });

  it('sends the last restore input deflated as it keeps it, and a failed one with its error first', async () => {
    t = await testDashboard({ token: TOKEN });
    const text = (await t.app.inject({ url: '/api/v1/restore-input/last', headers: AUTH })).body;
    const last = await t.app.inject({ url: '/api/v1/restore-input/last', headers: { ...AUTH, 'accept-encoding': 'deflate' } });
    // A small node's input is kept as text: sent as text whatever the client takes.
    expect(last.headers['content-encoding']).toBeUndefined();
    expect(last.body).toBe(text);
  });
});

describe('dashboard errors at the HTTP boundary', () => {
  let t: TestDashboard;
  afterEach(async () => t?.close());

  it('answers a failure inside a route with its code and a generic message; the detail goes to the log', async () => {
    t = await testDashboard({ token: TOKEN });
    t.dashboard.detail = async () => {
      throw new Error('EACCES: permission denied, open /etc/kproxy/secret (api.cluster.internal:6443)');
    };
    const res = await t.app.inject({ url: '/api/v1/services/shop/frontend', headers: AUTH });
    expect(res.statusCode).toBe(500);
    const { error } = res.json();
    expect(error.code).toBe('KPROXY_ERR_INTERNAL');
    expect(error.message).toMatch(/^kproxy could not answer this request \(KPROXY_ERR_INTERNAL\); the kproxy log on this node has the details \(request req-\d+\)$/);
    expect(res.body).not.toMatch(/secret|6443|EACCES/);
    const line = t.log.lines('error').find((l) => l.includes('dashboard request failed'))!;
    expect(line).toMatch(/EACCES: permission denied, open \/etc\/kproxy\/secret .*code=KPROXY_ERR_INTERNAL method=GET url=\/api\/v1\/services\/shop\/frontend/);
  });

  it("gives fastify's own 400, 413 and 415 the dashboard's error shape", async () => {
    t = await testDashboard({ token: TOKEN });
    const invalid = await t.app.inject({ url: '/api/v1/tables/nat/rows?limit=100000', headers: AUTH });
    expect(invalid.statusCode).toBe(400);
    expect(invalid.json()).toEqual({ error: { code: 'KPROXY_ERR_REQUEST_INVALID', message: 'querystring/limit must be <= 2000' } });

    const json = { ...AUTH, 'content-type': 'application/json' };
    const badJson = await t.app.inject({ method: 'POST', url: '/api/v1/actions/pause', headers: json, payload: '{"pause":' });
    expect(badJson.statusCode).toBe(400);
    expect(badJson.json().error.code).toBe('KPROXY_ERR_REQUEST_INVALID');

    const big = await t.app.inject({ method: 'POST', url: '/api/v1/actions/pause', headers: json, payload: JSON.stringify({ pause: true, pad: 'x'.repeat(2048) }) });
    expect(big.statusCode).toBe(413);
    expect(Object.keys(big.json())).toEqual(['error']);
    expect(big.json().error.code).toBe('KPROXY_ERR_REQUEST_TOO_LARGE');

    const xml = await t.app.inject({ method: 'POST', url: '/api/v1/actions/pause', headers: { ...AUTH, 'content-type': 'application/xml' }, payload: '<pause/>' });
    expect(xml.statusCode).toBe(415);
    expect(xml.json().error.code).toBe('KPROXY_ERR_MEDIA_TYPE_UNSUPPORTED');
    expect(t.daemon.proxy.paused).toBe(false);
  });

  it('answers every error under /api/ in the one shape, never stored: unknown routes, other methods, a URL fastify cannot decode, bodies too large or of another type', async () => {
    t = await testDashboard({ token: TOKEN });
    const json = { ...AUTH, 'content-type': 'application/json' };
    const cases = [
      { method: 'GET', url: '/api/v1/nope', status: 404, code: 'KPROXY_ERR_NOT_FOUND', message: '/api/v1/nope: no such API route' },
      { method: 'GET', url: '/api/v2/status', status: 404, code: 'KPROXY_ERR_NOT_FOUND', message: '/api/v2/status: no such API route' },
      { method: 'DELETE', url: '/api/v1/status', status: 405, code: 'KPROXY_ERR_METHOD_NOT_ALLOWED', message: 'DELETE /api/v1/status: this API route answers GET, HEAD', allow: 'GET, HEAD' },
      { method: 'GET', url: '/api/v1/actions/resync', status: 405, code: 'KPROXY_ERR_METHOD_NOT_ALLOWED', message: 'GET /api/v1/actions/resync: this API route answers POST', allow: 'POST' },
      { method: 'GET', url: '/api/v1/services/shop/frontend/nope', status: 404, code: 'KPROXY_ERR_NOT_FOUND', message: '/api/v1/services/shop/frontend/nope: no such API route' },
      { method: 'GET', url: '/api/v1/status%zz', status: 400, code: 'KPROXY_ERR_REQUEST_INVALID', message: "'/api/v1/status%zz' is not a valid url component" },
      { method: 'POST', url: '/api/v1/nope', headers: json, payload: JSON.stringify({ pad: 'x'.repeat(32 * 1024) }), status: 413, code: 'KPROXY_ERR_REQUEST_TOO_LARGE' },
      { method: 'POST', url: '/api/v1/actions/pause', headers: { ...AUTH, 'content-type': 'application/xml' }, payload: '<pause/>', status: 415, code: 'KPROXY_ERR_MEDIA_TYPE_UNSUPPORTED' },
    ] as const;
    for (const c of cases) {
      const res = await t.app.inject({ method: c.method, url: c.url, headers: 'headers' in c ? c.headers : AUTH, ...('payload' in c ? { payload: c.payload } : {}) });
      const what = `${c.method} ${c.url}`;
      expect(res.statusCode, what).toBe(c.status);
      expect(res.headers['content-type'], what).toBe('application/json; charset=utf-8');
      expect(res.headers['cache-control'], what).toBe('no-store');
      expect(res.headers['x-content-type-options'], what).toBe('nosniff');
      expect(Object.keys(res.json()), what).toEqual(['error']);
      expect(res.json().error, what).toMatchObject({ code: c.code, ...('message' in c ? { message: c.message } : {}) });
      if ('allow' in c) expect(res.headers.allow, what).toBe(c.allow);
    }
    // Outside /api/ a URL fastify cannot decode gets kube-proxy's plain-text 400; other paths keep theirs.
    const metrics = await t.app.inject({ url: '/metrics%zz', headers: HOST });
    expect([metrics.statusCode, metrics.headers['content-type'], metrics.body]).toEqual([400, 'text/plain; charset=utf-8', '400 Bad Request\n']);
    expect(metrics.headers['cache-control']).toBeUndefined();
  });

  it('marks every API answer, errors included, as not to be stored', async () => {
    t = await testDashboard({ token: TOKEN });
    for (const [url, headers, status] of [
      ['/api/v1/status', AUTH, 200],
      ['/api/v1/status', HOST, 401],
      ['/api/v1/services/shop/nope', AUTH, 404],
      ['/api/v1/restore-input/last', AUTH, 200],
    ] as const) {
      const res = await t.app.inject({ url, headers });
      expect(res.statusCode, url).toBe(status);
      expect(res.headers['cache-control'], url).toBe('no-store');
    }
  });
});

/** splitSpec turns a listed rule back into words for SimulatedIptables.deleteRule. */
function splitSpec(spec: string): string[] {
  return [...spec.matchAll(/"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2]);
}

/** GatedRunner holds every conntrack listing until release(): a count that is still running. */
class GatedRunner implements ConntrackRunner {
  readonly table = new SimulatedConntrack();
  listings = 0;
  release: () => void = () => {};
  readonly #gate = new Promise<void>((r) => (this.release = r));
  run(args: readonly string[]) {
    return this.table.run(args);
  }
  async stream(args: readonly string[], onLine: (line: string) => boolean | void) {
    this.listings++;
    await this.#gate;
    return this.table.stream(args, onLine);
  }
}

describe('conntrack counts in the dashboard API', () => {
  let t: TestDashboard;
  afterEach(async () => t?.close());
  const get = (url: string) => t.app.inject({ url, headers: AUTH });

  it("reads the node total and limit through the daemon's one conntrack counter", async () => {
    t = await testDashboard({ token: TOKEN });
    expect((await get('/api/v1/conntrack')).json().conntrack).toEqual({ count: 1234, max: 262144, readAt: t.clock.now() });
    t.sysctl.values.delete('net/netfilter/nf_conntrack_count');
    await t.settle(1000);
    const unreadable = (await get('/api/v1/conntrack')).json().conntrack;
    expect(unreadable).toMatchObject({ count: null, max: 262144 });
    expect(unreadable.error).toMatch(/cannot read sysctl net\/netfilter\/nf_conntrack_count/);
    // The Overview carries the same reading.
    expect((await get('/api/v1/status')).json().overview.conntrack).toEqual(unreadable);
  });

  it('counts the flows to each frontend of a service (cluster IP and LB IP with the port), cached for 5 s', async () => {
    t = await testDashboard({ token: TOKEN });
    const tcp = { protocol: 'tcp' as const, endpoint: '10.244.0.31', targetPort: 8443 };
    t.conntrack.add(
      natFlow({ ...tcp, client: '10.0.0.2', clientPort: 40001, vip: '10.96.10.30', port: 443 }),
      natFlow({ ...tcp, client: '10.0.0.3', clientPort: 40002, vip: '10.96.10.30', port: 443 }),
      natFlow({ ...tcp, client: '198.51.100.7', clientPort: 40003, vip: '192.0.2.10', port: 443 }),
      // Not this service's frontends: another port, another protocol, another address.
      natFlow({ ...tcp, client: '10.0.0.2', clientPort: 40004, vip: '10.96.10.30', port: 80 }),
      natFlow({ protocol: 'udp', client: '10.0.0.2', clientPort: 40005, vip: '10.96.10.30', port: 443, endpoint: '10.244.0.31' }),
      natFlow({ ...tcp, client: '10.0.0.2', clientPort: 40006, vip: '10.96.10.10', port: 443 }),
    );
    const res = await get('/api/v1/services/shop/web/conntrack');
    expect(res.statusCode).toBe(200);
    const at = t.clock.now();
    expect(res.json()).toEqual({
      service: 'shop/web',
      simulated: true,
      notCounted: 0,
      frontends: [
        { kind: 'clusterIP', portName: 'https', vip: '10.96.10.30', port: 443, protocol: 'TCP', count: 2, at, cached: false },
        { kind: 'loadBalancerIP', portName: 'https', vip: '192.0.2.10', port: 443, protocol: 'TCP', count: 1, at, cached: false },
      ],
    } satisfies ServiceConntrack);
    expect(t.conntrack.calls).toEqual([
      ['-L', '-f', 'ipv4', '-p', 'tcp', '--orig-dst', '10.96.10.30', '--orig-port-dst', '443'],
      ['-L', '-f', 'ipv4', '-p', 'tcp', '--orig-dst', '192.0.2.10', '--orig-port-dst', '443'],
    ]);

    t.conntrack.add(natFlow({ ...tcp, client: '10.0.0.4', clientPort: 40007, vip: '10.96.10.30', port: 443 }));
    await t.settle(4999);
    const cached = (await get('/api/v1/services/shop/web/conntrack')).json() as ServiceConntrack;
    expect(cached.frontends.map((f) => [f.count, f.cached, f.at])).toEqual([
      [2, true, at],
      [1, true, at],
    ]);
    expect(t.conntrack.calls).toHaveLength(2);
    await t.settle(1);
    const fresh = (await get('/api/v1/services/shop/web/conntrack')).json() as ServiceConntrack;
    expect(fresh.frontends.map((f) => [f.count, f.cached])).toEqual([
      [3, false],
      [1, false],
    ]);

    // External IPs count too (shop/partner-api has 192.0.2.20).
    const partner = (await get('/api/v1/services/shop/partner-api/conntrack')).json() as ServiceConntrack;
    expect(partner.frontends.map((f) => `${f.kind} ${f.vip}:${f.port}/${f.protocol}`)).toEqual(['clusterIP 10.96.10.40:8080/TCP', 'externalIP 192.0.2.20:8080/TCP']);
  });

  it('answers 404 for a service this node does not have, before listing anything', async () => {
    t = await testDashboard({ token: TOKEN });
    const res = await get('/api/v1/services/shop/nope/conntrack');
    expect(res.statusCode).toBe(404);
    expect(res.json().error).toEqual({ code: 'KPROXY_ERR_NOT_FOUND', message: 'no service shop/nope on this node' });
    expect(t.conntrack.calls).toEqual([]);
  });

  it("answers 429 with Retry-After while the counter's queue is full, and counts again once it drained", async () => {
    const runner = new GatedRunner();
    t = await testDashboard({ token: TOKEN, conntrack: { runner, maxQueued: 1 } });
    const first = get('/api/v1/services/shop/frontend/conntrack');
    for (let i = 0; i < 20 && runner.listings === 0; i++) await flushMicrotasks();
    expect(runner.listings).toBe(1);
    const refused = await get('/api/v1/services/shop/cache/conntrack');
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBe('5');
    expect(refused.json().error.code).toBe('KPROXY_ERR_RATE_LIMITED');
    expect(refused.json().error.message).toMatch(/^too many conntrack counts are running on this node; try again in a few seconds/);
    runner.release();
    expect(((await first).json() as ServiceConntrack).frontends).toMatchObject([{ vip: '10.96.10.10', port: 80, count: 0 }]);
    expect((await get('/api/v1/services/shop/cache/conntrack')).statusCode).toBe(200);
  });

  it("shows a failed listing as that frontend's error, logs it and counts it; the other frontends still count", async () => {
    t = await testDashboard({ token: TOKEN });
    t.conntrack.add(natFlow({ protocol: 'tcp', client: '10.0.0.2', clientPort: 1, vip: '192.0.2.10', port: 443, endpoint: '10.244.0.31' }));
    t.conntrack.onCall = (args) => {
      if (args.includes('10.96.10.30')) throw new Error('conntrack v1.4.7 (conntrack-tools): Operation failed: Operation not permitted');
    };
    const res = await get('/api/v1/services/shop/web/conntrack');
    expect(res.statusCode).toBe(200);
    const [cluster, lb] = (res.json() as ServiceConntrack).frontends;
    expect(cluster).toMatchObject({ vip: '10.96.10.30', count: null, at: null, cached: false, error: { code: 'KPROXY_ERR_CONNTRACK' } });
    expect(cluster.error!.message).toContain('Operation not permitted');
    expect(lb).toMatchObject({ vip: '192.0.2.10', count: 1 });
    expect(t.log.lines('warn').some((l) => /counting conntrack entries failed service=shop\/web frontend=10\.96\.10\.30:443\/TCP .*Operation not permitted/.test(l))).toBe(true);

    t.conntrack.onCall = null;
    t.conntrack.missing = true;
    await t.settle(5000);
    const missing = (await get('/api/v1/services/shop/web/conntrack')).json() as ServiceConntrack;
    expect(missing.frontends.map((f) => f.error?.code)).toEqual(['KPROXY_ERR_COMMAND_NOT_FOUND', 'KPROXY_ERR_COMMAND_NOT_FOUND']);
  });
});

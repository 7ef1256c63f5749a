import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../clock-fake.ts';
import { FakeAccessReviewer } from './access-review-fake.ts';
import { dashboardAttributes } from './access-review.ts';
import { MemoryLog } from '../../log.ts';
import { bearerFromHeader, DashboardAuth, reviewKey } from './auth.ts';
import { bindHostKind, boundToLoopback, isLoopbackBind, isLoopbackHost, loopbackHostHeader, sameOrigin, tokenFromProtocols } from './request-checks.ts';

describe('DashboardAuth', () => {
  const clock = new FakeClock();

  it('with the static token: right token is user "token" who may act; anything else is refused', async () => {
    const auth = new DashboardAuth({ token: 'abc123', reviewer: null, nodeName: 'n', clock });
    expect(auth.mode).toBe('token');
    expect(await auth.check('abc123', 'act')).toEqual({ ok: true, viewer: { authMode: 'token', user: 'token', canAct: true } });
    for (const c of [null, '', 'abc12', 'abc1234', 'ABC123']) {
      const r = await auth.check(c, 'view');
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.error.statusCode).toBe(401);
    }
  });

  it('with auth off everyone is "anonymous" and may act (the listener is loopback only)', async () => {
    const auth = new DashboardAuth({ token: null, reviewer: null, nodeName: 'n', clock });
    expect(auth.enabled).toBe(false);
    expect(await auth.check(null, 'act')).toEqual({ ok: true, viewer: { authMode: 'off', user: 'anonymous', canAct: true } });
  });

  it('delegated: TokenReview names the user, SubjectAccessReview decides view and act, answers are cached for a minute', async () => {
    const r = new FakeAccessReviewer();
    r.users.set('t1', { username: 'alice', groups: ['g'] });
    r.allow('alice', 'get');
    const auth = new DashboardAuth({ token: null, reviewer: r, nodeName: 'node-a', clock });
    expect(await auth.check('t1', 'view')).toEqual({ ok: true, viewer: { authMode: 'delegated', user: 'alice', canAct: false } });
    const act = await auth.check('t1', 'act');
    expect(act.ok === false && act.error.statusCode).toBe(403);
    expect([r.tokenReviews, r.accessReviews]).toEqual([1, 2]);
    r.allow('alice', 'update');
    clock.advance(9_000);
    expect((await auth.check('t1', 'act')).ok).toBe(false);
    clock.advance(2_000);
    expect((await auth.check('t1', 'act')).ok).toBe(true);
    expect(r.tokenReviews).toBe(1);
  });

  it('token and delegated together: the static token first, then the API server', async () => {
    const r = new FakeAccessReviewer();
    r.users.set('k8s', { username: 'bob', groups: [] });
    r.allow('bob', 'get');
    const auth = new DashboardAuth({ token: 'static', reviewer: r, nodeName: 'n', clock });
    expect(auth.mode).toBe('token+delegated');
    expect((await auth.check('static', 'act')).ok).toBe(true);
    expect(r.tokenReviews).toBe(0);
    expect(await auth.check('k8s', 'view')).toMatchObject({ ok: true, viewer: { user: 'bob' } });
  });

  it('asks TokenReview for its audience, and refuses a token the API server authenticates for other audiences only', async () => {
    const r = new FakeAccessReviewer();
    r.users.set('dash', { username: 'alice', groups: [] });
    r.users.set('api', { username: 'alice', groups: [], audiences: ['https://kubernetes.default.svc'] });
    r.allow('alice', 'get');
    const auth = new DashboardAuth({ token: null, reviewer: r, nodeName: 'n', clock: new FakeClock(), audience: 'kproxy-dashboard' });
    expect((await auth.check('dash', 'view')).ok).toBe(true);
    expect((await auth.check('api', 'view')).ok).toBe(false);
    expect(r.audiencesAsked).toEqual([['kproxy-dashboard'], ['kproxy-dashboard']]);
  });

  it('throttles what fails from an address that keeps presenting wrong tokens, and always accepts the static token from it', async () => {
    const clock = new FakeClock();
    const log = new MemoryLog();
    const auth = new DashboardAuth({ token: 'the-real-token', reviewer: null, nodeName: 'n', clock, logger: log.logger });
    for (let i = 0; i < 5; i++) expect((await auth.check(`guess-${i}`, 'act', '198.51.100.9')).ok === false).toBe(true);
    // Blocked: a wrong token gets 429 ...
    const throttled = await auth.check('guess-5', 'act', '198.51.100.9');
    expect(throttled.ok === false && throttled.error).toMatchObject({ code: 'KPROXY_ERR_RATE_LIMITED', statusCode: 429, message: 'too many refused tokens from 198.51.100.9; try again in 60 s' });
    // ... and the right one passes, from the same address, at once.
    expect(await auth.check('the-real-token', 'act', '198.51.100.9')).toEqual({ ok: true, viewer: { authMode: 'token', user: 'token', canAct: true } });
    expect(auth.failures).toEqual({ missing: 0, invalid: 5, forbidden: 0, unavailable: 0, throttled: 1 });
    // Once the block ends a wrong token is a plain 401 again.
    clock.advance(60_000);
    const after = await auth.check('guess-6', 'act', '198.51.100.9');
    expect(after.ok === false && after.error.statusCode).toBe(401);
    const warnings = log.lines('warn').join('\n');
    expect(warnings).toMatch(/dashboard sign-in throttled: too many refused tokens from one address from=198\.51\.100\.9 refused=5 blockedForS=60/);
    expect(warnings).not.toMatch(/guess-|the-real-token/);
  });

  it('delegated: a blocked address still gets its valid token reviewed and accepted; its wrong tokens get 429, reviewed one at a time at most once a second, and counted and logged', async () => {
    const clock = new FakeClock();
    const log = new MemoryLog();
    const r = new FakeAccessReviewer();
    r.users.set('good', { username: 'alice', groups: [] });
    r.users.set('other', { username: 'bob', groups: [] });
    r.allow('alice', 'get');
    r.allow('bob', 'get');
    const auth = new DashboardAuth({ token: null, reviewer: r, nodeName: 'n', clock, logger: log.logger, throttle: { failures: 3, windowMs: 60_000, blockMs: 30_000 } });
    for (let i = 0; i < 3; i++) expect((await auth.check(`guess-${i}`, 'view', '198.51.100.9')).ok).toBe(false);
    expect(r.tokenReviews).toBe(3);

    // The valid token, never seen before, is reviewed and passes.
    expect(await auth.check('good', 'view', '198.51.100.9')).toMatchObject({ ok: true, viewer: { user: 'alice' } });
    expect(r.tokenReviews).toBe(4);
    // A wrong one is reviewed too, but only a second after the last review of this address, and refused with 429.
    const wrong = auth.check('guess-3', 'view', '198.51.100.9');
    await clock.advanceAsync(999);
    expect(r.tokenReviews).toBe(4);
    await clock.advanceAsync(1);
    const refused = await wrong;
    expect(refused.ok === false && refused.error).toMatchObject({ code: 'KPROXY_ERR_RATE_LIMITED', statusCode: 429 });
    expect(r.tokenReviews).toBe(5);
    // A token whose review is cached passes without waiting or asking.
    expect((await auth.check('good', 'view', '198.51.100.9')).ok).toBe(true);
    expect(r.tokenReviews).toBe(5);

    // A flood of guesses queues at most four reviews; the rest are refused without asking the API server.
    const settled: number[] = [];
    const flood = Array.from({ length: 10 }, (_, i) => auth.check(`flood-${i}`, 'view', '198.51.100.9').finally(() => settled.push(i)));
    await new Promise((resolve) => setImmediate(resolve));
    // Without the clock moving, only the six past the queue are answered; the four queued wait for the gap after the last review.
    expect(settled.sort((a, b) => a - b)).toEqual([4, 5, 6, 7, 8, 9]);
    expect(r.tokenReviews).toBe(5);
    await clock.advanceAsync(5_000);
    expect((await Promise.all(flood)).every((o) => o.ok === false && o.error.statusCode === 429)).toBe(true);
    expect(r.tokenReviews).toBe(9);
    // Another address is never held up, and the block ends.
    expect((await auth.check('other', 'view', '10.0.0.7')).ok).toBe(true);
    clock.advance(30_000);
    const plain = await auth.check('guess-4', 'view', '198.51.100.9');
    expect(plain.ok === false && plain.error.statusCode).toBe(401);
    expect(auth.failures).toEqual({ missing: 0, invalid: 4, forbidden: 0, unavailable: 0, throttled: 11 });
    const warnings = log.lines('warn').join('\n');
    expect(warnings).toMatch(/dashboard sign-in refused: the API server did not authenticate the bearer token .*reason=invalid from=198\.51\.100\.9/);
    expect(warnings).toMatch(/dashboard sign-in throttled: too many refused tokens from one address from=198\.51\.100\.9 refused=3 blockedForS=30/);
    expect(warnings).not.toMatch(/guess-|flood-/);
  });

  it('refuses (503) when a review gets no answer within the timeout, and does not cache that', async () => {
    const clock = new FakeClock();
    const r = new FakeAccessReviewer();
    r.users.set('t', { username: 'alice', groups: [] });
    r.allow('alice', 'get');
    r.hang = true;
    const auth = new DashboardAuth({ token: null, reviewer: r, nodeName: 'n', clock, reviewTimeoutMs: 10_000 });
    const pending = auth.check('t', 'view', '10.0.0.7');
    await clock.advanceAsync(10_000);
    const answer = await pending;
    expect(answer.ok === false && answer.error).toMatchObject({ code: 'KPROXY_ERR_AUTH_UNAVAILABLE', statusCode: 503 });
    expect(answer.ok === false && answer.error.message).toMatch(/the TokenReview got no answer within 10 s/);
    expect(auth.failures.unavailable).toBe(1);
    expect(r.abandoned).toBe(1);
    r.hang = false;
    expect((await auth.check('t', 'view', '10.0.0.7')).ok).toBe(true);
  });

  it('keys review answers on the whole identity, so group lists cannot collide', () => {
    const a = reviewKey({ username: 'alice', groups: ['a,b'] }, 'act');
    const b = reviewKey({ username: 'alice', groups: ['a', 'b'] }, 'act');
    const c = reviewKey({ username: 'alice', groups: ['a', 'b'], uid: 'u-2' }, 'act');
    const d = reviewKey({ username: 'alice', groups: ['a', 'b'], extra: { scope: ['read-only'] } }, 'act');
    expect(new Set([a, b, c, d]).size).toBe(4);
    expect(reviewKey({ username: 'x', groups: [], extra: { b: ['1'], a: ['2'] } }, 'view')).toBe(reviewKey({ username: 'x', groups: [], extra: { a: ['2'], b: ['1'] } }, 'view'));
  });

  it('asks for get (views) and update (actions) on the virtual subresource nodes/kproxy of this node', () => {
    expect(dashboardAttributes('node-a', 'view')).toEqual({ group: '', resource: 'nodes', subresource: 'kproxy', name: 'node-a', verb: 'get' });
    expect(dashboardAttributes('node-a', 'act').verb).toBe('update');
  });
});

describe('request checks', () => {
  it('reads bearer tokens from the Authorization header and from the WebSocket subprotocol', () => {
    expect(bearerFromHeader('Bearer abc')).toBe('abc');
    expect(bearerFromHeader('bearer  abc ')).toBe('abc');
    expect(bearerFromHeader('Basic abc')).toBeNull();
    expect(bearerFromHeader(undefined)).toBeNull();
    const enc = Buffer.from('tok/en+=').toString('base64url');
    expect(tokenFromProtocols(`kproxy.dashboard.v1, base64url.bearer.authorization.k8s.io.${enc}`)).toBe('tok/en+=');
    expect(tokenFromProtocols('kproxy.dashboard.v1')).toBeNull();
    expect(tokenFromProtocols('base64url.bearer.authorization.k8s.io.a+b')).toBeNull();
  });

  it('accepts an absent Origin (not a browser) or the same host only', () => {
    expect(sameOrigin(undefined, 'localhost:10249')).toBe(true);
    expect(sameOrigin('http://localhost:10249', 'localhost:10249')).toBe(true);
    expect(sameOrigin('http://LOCALHOST:10249', 'localhost:10249')).toBe(true);
    expect(sameOrigin('http://localhost:10250', 'localhost:10249')).toBe(false);
    expect(sameOrigin('http://evil.example', 'localhost:10249')).toBe(false);
    expect(sameOrigin('null', 'localhost:10249')).toBe(false);
    expect(sameOrigin('file://x', 'x')).toBe(false);
  });

  it('knows loopback names, Host headers and bind addresses', () => {
    for (const h of ['localhost', '127.0.0.1', '127.1.2.3', '::1', '[::1]', 'app.localhost']) expect(isLoopbackHost(h), h).toBe(true);
    for (const h of ['10.0.0.1', '0.0.0.0', 'example.com', '::', '']) expect(isLoopbackHost(h), h).toBe(false);
    expect(loopbackHostHeader('127.0.0.1:10249')).toBe(true);
    expect(loopbackHostHeader('[::1]:10249')).toBe(true);
    expect(loopbackHostHeader('localhost')).toBe(true);
    expect(loopbackHostHeader('rebind.example:10249')).toBe(false);
    expect(loopbackHostHeader(undefined)).toBe(false);
    expect(isLoopbackBind('127.0.0.1:10249')).toBe(true);
    expect(isLoopbackBind('[::1]:10249')).toBe(true);
    expect(isLoopbackBind('0.0.0.0:10249')).toBe(false);
    expect(isLoopbackBind(':10249')).toBe(false);
    expect(isLoopbackBind('10.0.0.5:10249')).toBe(false);
  });

  it('judges a bind address by what it says before listening: a host name, "*.localhost" too, is only known once bound', () => {
    expect(['127.0.0.1:1', '127.9.9.9:1', '[::1]:1'].map(bindHostKind)).toEqual(['loopback', 'loopback', 'loopback']);
    expect(['0.0.0.0:1', ':1', '[::]:1', '10.0.0.5:1', '[fd00::1]:1', 'nonsense'].map(bindHostKind)).toEqual(['network', 'network', 'network', 'network', 'network', 'network']);
    expect(['localhost:1', 'foo.localhost:1', 'dash.example:1'].map(bindHostKind)).toEqual(['name', 'name', 'name']);
    // A Host header named *.localhost still counts as loopback: browsers resolve it there themselves (DNS rebinding guard).
    expect(isLoopbackBind('foo.localhost:10249')).toBe(false);
    expect(loopbackHostHeader('foo.localhost:10249')).toBe(true);
  });

  it('says a listener is on loopback only when every address it is bound to is', () => {
    expect(boundToLoopback([{ address: '127.0.0.1' }])).toBe(true);
    expect(boundToLoopback([{ address: '127.0.0.1' }, { address: '::1' }])).toBe(true);
    expect(boundToLoopback([{ address: '127.0.0.1' }, { address: '10.254.1.1' }])).toBe(false);
    expect(boundToLoopback([{ address: '0.0.0.0' }])).toBe(false);
    expect(boundToLoopback([{ address: '::' }])).toBe(false);
    expect(boundToLoopback([{ address: '::ffff:127.0.0.1' }])).toBe(true);
    expect(boundToLoopback([])).toBe(false);
  });
});

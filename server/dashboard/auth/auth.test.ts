import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../clock-fake.ts';
import { FakeAccessReviewer } from './access-review-fake.ts';
import { dashboardAttributes } from './access-review.ts';
import { bearerFromHeader, DashboardAuth } from './auth.ts';
import { isLoopbackBind, isLoopbackHost, loopbackHostHeader, sameOrigin, tokenFromProtocols } from './request-checks.ts';

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
});

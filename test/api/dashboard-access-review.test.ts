import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../../server/clock-fake.ts';
import { ApiAccessReviewer, dashboardAttributes } from '../../server/dashboard/auth/access-review.ts';
import { DashboardAuth } from '../../server/dashboard/auth/auth.ts';
import { MemoryLog } from '../../server/log.ts';
import { loadKubeConfig } from '../../server/sources/k8s/kubeconfig.ts';
import { API_SERVER_AUDIENCE, FakeApiServer } from './fake-apiserver.ts';
import { FAKE_TOKEN, writeKubeconfig, type KubeconfigFile } from './kubeconfig-file.ts';
import { waitFor } from '../wait.ts';

/**
 * Delegated dashboard auth through the real @kubernetes/client-node against
 * the fake API server: TokenReview for kproxy's audience, SubjectAccessReview
 * on nodes/kproxy, with tokens issued the way `kubectl create token SA
 * --audience kproxy-dashboard` issues them.
 */

const AUDIENCE = 'kproxy-dashboard';
const ALICE = { username: 'system:serviceaccount:ops:alice', uid: 'u-1', groups: ['system:serviceaccounts', 'ops'], extra: { 'authentication.kubernetes.io/pod-name': ['shell'] } };

describe('delegated dashboard auth against an API server', () => {
  const server = new FakeApiServer();
  let kubeconfig: KubeconfigFile;
  let reviewer: ApiAccessReviewer;

  beforeAll(async () => {
    await server.start();
    kubeconfig = await writeKubeconfig(server.url);
    reviewer = new ApiAccessReviewer((await loadKubeConfig({ kubeconfig: kubeconfig.path })).api);
  });
  afterAll(async () => {
    await server.stop();
    await kubeconfig.remove();
  });
  beforeEach(() => {
    server.tokens.clear();
    server.accessRules.length = 0;
    server.reviews.length = 0;
    server.decide = null;
    server.audienceAware = true;
    // kproxy-dashboard-viewer for the ops group, on every node.
    server.accessRules.push({ groups: ['ops'], apiGroup: '', resource: 'nodes/kproxy', verbs: ['get'] });
  });

  const auth = (log = new MemoryLog()) => new DashboardAuth({ token: null, reviewer, nodeName: 'node-a', clock: new FakeClock(), audience: AUDIENCE, logger: log.logger });

  it("sends the TokenReview with kproxy's own credentials and its audience, and reads the user and the audiences back", async () => {
    server.tokens.set('alice-token', { user: ALICE, audiences: [AUDIENCE] });
    expect(await reviewer.reviewToken('alice-token', [AUDIENCE])).toEqual({ ...ALICE, audiences: [AUDIENCE] });
    expect(await reviewer.reviewToken('nobody', [AUDIENCE])).toBeNull();
    const sent = server.requests.find((r) => r.path.endsWith('/tokenreviews'))!;
    expect(sent.authorization).toBe(`Bearer ${FAKE_TOKEN}`);
    expect(server.reviews[0]).toEqual({ kind: 'TokenReview', spec: { token: 'alice-token', audiences: [AUDIENCE] } });
  });

  it('sends the SubjectAccessReview for nodes/kproxy with the user, uid, groups and extra of the TokenReview', async () => {
    server.tokens.set('alice-token', { user: ALICE, audiences: [AUDIENCE] });
    const alice = (await reviewer.reviewToken('alice-token', [AUDIENCE]))!;
    expect((await reviewer.reviewAccess(alice, dashboardAttributes('node-a', 'view'))).allowed).toBe(true);
    expect((await reviewer.reviewAccess(alice, dashboardAttributes('node-a', 'act'))).allowed).toBe(false);
    expect(server.reviews.at(-1)).toEqual({
      kind: 'SubjectAccessReview',
      spec: { user: ALICE.username, uid: 'u-1', groups: ALICE.groups, extra: ALICE.extra, resourceAttributes: { group: '', resource: 'nodes', subresource: 'kproxy', name: 'node-a', verb: 'update' } },
    });
  });

  it('accepts a token issued for the dashboard audience, and refuses one issued for the API server (a captured dashboard token is no API credential, and an API token no dashboard one)', async () => {
    server.tokens.set('dashboard-token', { user: ALICE, audiences: [AUDIENCE] });
    server.tokens.set('api-token', { user: ALICE, audiences: [API_SERVER_AUDIENCE] });
    const log = new MemoryLog();
    const a = auth(log);
    expect(await a.check('dashboard-token', 'view', '10.0.0.7')).toEqual({ ok: true, viewer: { authMode: 'delegated', user: ALICE.username, canAct: false } });
    const refused = await a.check('api-token', 'view', '10.0.0.7');
    expect(refused.ok).toBe(false);
    if (refused.ok) return;
    expect(refused.error).toMatchObject({ code: 'KPROXY_ERR_AUTH_FAILED', statusCode: 401 });
    expect(a.failures.invalid).toBe(1);
    expect(log.lines('warn').join('\n')).toMatch(/dashboard sign-in refused: the API server did not authenticate the bearer token .*reason=invalid from=10\.0\.0\.7/);
    // The API server itself takes only its own audience: the dashboard token is no credential there.
    expect(await reviewer.reviewToken('dashboard-token', [])).toBeNull();
  });

  it('refuses every token when the API server does not say which audiences it checked', async () => {
    server.tokens.set('dashboard-token', { user: ALICE, audiences: [AUDIENCE] });
    server.audienceAware = false;
    const refused = await auth().check('dashboard-token', 'view', '10.0.0.7');
    expect(refused.ok).toBe(false);
    if (refused.ok) return;
    expect(refused.error.message).toMatch(/was not issued for the audience "kproxy-dashboard" \(kubectl create token … --audience kproxy-dashboard\)/);
  });

  it("keys cached answers on the whole identity: another token of the same user, which its own review refuses, cannot act on the first one's answer", async () => {
    // An authorizer webhook that honours a scope in extra: the read-only token may view but not act.
    server.accessRules.push({ groups: ['ops'], apiGroup: '', resource: 'nodes/kproxy', verbs: ['get', 'update'] });
    server.decide = (spec) => ((spec.extra?.scope ?? []).includes('read-only') && spec.resourceAttributes?.verb === 'update' ? false : undefined);
    server.tokens.set('full', { user: { ...ALICE, uid: 'u-1' }, audiences: [AUDIENCE] });
    server.tokens.set('read-only', { user: { ...ALICE, uid: 'u-2', extra: { scope: ['read-only'] } }, audiences: [AUDIENCE] });
    const a = auth();
    expect((await a.check('full', 'act', '10.0.0.7')).ok).toBe(true);
    const second = await a.check('read-only', 'act', '10.0.0.7');
    expect(second.ok).toBe(false);
    if (second.ok) return;
    expect(second.error).toMatchObject({ code: 'KPROXY_ERR_FORBIDDEN', statusCode: 403 });
    expect((await a.check('read-only', 'view', '10.0.0.7')).ok).toBe(true);
  });

  it('gives up on a review the API server has not answered within 10 s: the caller gets 503 and the request to the API server is ended', async () => {
    server.tokens.set('dashboard-token', { user: ALICE, audiences: [AUDIENCE] });
    const clock = new FakeClock();
    const a = new DashboardAuth({ token: null, reviewer, nodeName: 'node-a', clock, audience: AUDIENCE });
    server.holdRequests(true);
    try {
      const pending = a.check('dashboard-token', 'view', '10.0.0.7');
      await waitFor(() => server.heldRequests === 1, { what: 'the TokenReview to reach the API server' });
      await clock.advanceAsync(10_000);
      const answer = await pending;
      expect(answer.ok === false && answer.error).toMatchObject({ code: 'KPROXY_ERR_AUTH_UNAVAILABLE', statusCode: 503 });
      await waitFor(() => server.heldRequests === 0, { what: 'kproxy to end the TokenReview it stopped waiting for' });
    } finally {
      server.holdRequests(false);
    }
  });

  it('shares one TokenReview among concurrent requests with the same token', async () => {
    server.tokens.set('dashboard-token', { user: ALICE, audiences: [AUDIENCE] });
    const a = auth();
    const answers = await Promise.all(Array.from({ length: 10 }, () => a.check('dashboard-token', 'view', '10.0.0.7')));
    expect(answers.every((x) => x.ok)).toBe(true);
    expect(server.reviews.filter((r) => r.kind === 'TokenReview')).toHaveLength(1);
    expect(server.reviews.filter((r) => r.kind === 'SubjectAccessReview')).toHaveLength(2);
  });

  it('after five refused tokens from one address, a valid token from it is still reviewed by the API server and accepted; the next wrong one gets 429', async () => {
    server.tokens.set('dashboard-token', { user: ALICE, audiences: [AUDIENCE] });
    const clock = new FakeClock();
    const a = new DashboardAuth({ token: null, reviewer, nodeName: 'node-a', clock, audience: AUDIENCE });
    for (let i = 0; i < 5; i++) expect((await a.check(`guess-${i}`, 'view', '198.51.100.9')).ok).toBe(false);
    expect(await a.check('dashboard-token', 'view', '198.51.100.9')).toEqual({ ok: true, viewer: { authMode: 'delegated', user: ALICE.username, canAct: false } });
    expect(server.reviews.filter((r) => r.kind === 'TokenReview').map((r) => (r.spec as { token: string }).token)).toEqual(['guess-0', 'guess-1', 'guess-2', 'guess-3', 'guess-4', 'dashboard-token']);
    // The blocked address's next review waits a second after its last one.
    const pending = a.check('guess-5', 'view', '198.51.100.9');
    await clock.advanceAsync(1_000);
    const wrong = await pending;
    expect(server.reviews.filter((r) => r.kind === 'TokenReview')).toHaveLength(7);
    expect(wrong.ok === false && wrong.error).toMatchObject({ code: 'KPROXY_ERR_RATE_LIMITED', statusCode: 429 });
    expect(a.failures).toMatchObject({ invalid: 5, throttled: 1 });
  });
});

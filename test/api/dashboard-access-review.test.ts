import { createServer, type IncomingMessage, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiAccessReviewer, dashboardAttributes } from '../../server/dashboard/auth/access-review.ts';
import { loadKubeConfig } from '../../server/sources/k8s/kubeconfig.ts';
import { FAKE_TOKEN, writeKubeconfig, type KubeconfigFile } from './kubeconfig-file.ts';

interface Seen {
  path: string;
  authorization?: string;
  body: Record<string, any>;
}

/**
 * A minimal API server for the two review APIs: TokenReview knows one token,
 * SubjectAccessReview allows alice to get nodes/kproxy on node-a, nothing else.
 */
function reviewServer(seen: Seen[]): Server {
  return createServer(async (req: IncomingMessage, res) => {
    let text = '';
    for await (const chunk of req) text += chunk;
    const body = JSON.parse(text || '{}');
    seen.push({ path: req.url ?? '', authorization: req.headers.authorization, body });
    res.setHeader('content-type', 'application/json');
    if (req.method === 'POST' && req.url === '/apis/authentication.k8s.io/v1/tokenreviews') {
      const ok = body.spec?.token === 'alice-token';
      res.end(
        JSON.stringify({
          ...body,
          status: ok ? { authenticated: true, user: { username: 'alice', uid: 'u-1', groups: ['devs', 'system:authenticated'], extra: { scopes: ['a'] } } } : { authenticated: false },
        }),
      );
    } else if (req.method === 'POST' && req.url === '/apis/authorization.k8s.io/v1/subjectaccessreviews') {
      const a = body.spec?.resourceAttributes ?? {};
      const allowed = body.spec?.user === 'alice' && a.resource === 'nodes' && a.subresource === 'kproxy' && a.name === 'node-a' && a.verb === 'get';
      res.end(JSON.stringify({ ...body, status: { allowed, reason: allowed ? 'RBAC: allowed by ClusterRoleBinding "kproxy-dashboard-viewers"' : '' } }));
    } else {
      res.statusCode = 404;
      res.end('{}');
    }
  });
}

describe('ApiAccessReviewer against an API server', () => {
  const seen: Seen[] = [];
  let server: Server;
  let kubeconfig: KubeconfigFile;
  let reviewer: ApiAccessReviewer;

  beforeAll(async () => {
    server = reviewServer(seen);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    kubeconfig = await writeKubeconfig(`http://127.0.0.1:${(server.address() as { port: number }).port}`);
    reviewer = new ApiAccessReviewer(loadKubeConfig({ kubeconfig: kubeconfig.path }).kubeConfig);
  });
  afterAll(async () => {
    await new Promise((r) => server.close(r));
    await kubeconfig.remove();
  });

  it("sends a TokenReview with kproxy's own credentials and reads the user from its status", async () => {
    expect(await reviewer.reviewToken('alice-token')).toEqual({ username: 'alice', uid: 'u-1', groups: ['devs', 'system:authenticated'], extra: { scopes: ['a'] } });
    expect(await reviewer.reviewToken('nobody')).toBeNull();
    const req = seen.find((s) => s.path.endsWith('/tokenreviews'))!;
    expect(req.authorization).toBe(`Bearer ${FAKE_TOKEN}`);
    expect(req.body).toMatchObject({ apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token: 'alice-token' } });
  });

  it('sends a SubjectAccessReview for nodes/kproxy with the user, groups and extra of the TokenReview', async () => {
    const alice = (await reviewer.reviewToken('alice-token'))!;
    expect(await reviewer.reviewAccess(alice, dashboardAttributes('node-a', 'view'))).toEqual({ allowed: true, reason: 'RBAC: allowed by ClusterRoleBinding "kproxy-dashboard-viewers"' });
    expect((await reviewer.reviewAccess(alice, dashboardAttributes('node-a', 'act'))).allowed).toBe(false);
    const req = seen.filter((s) => s.path.endsWith('/subjectaccessreviews')).at(-1)!;
    expect(req.body.spec).toEqual({
      user: 'alice',
      uid: 'u-1',
      groups: ['devs', 'system:authenticated'],
      extra: { scopes: ['a'] },
      resourceAttributes: { group: '', resource: 'nodes', subresource: 'kproxy', name: 'node-a', verb: 'update' },
    });
  });
});

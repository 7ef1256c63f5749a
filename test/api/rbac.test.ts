import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../server/clock-fake.ts';
import { ApiEventSink } from '../../server/events/event-sink.ts';
import { KubeEventRecorder } from '../../server/events/kube-event-recorder.ts';
import { MemoryLog } from '../../server/log.ts';
import { loadKubeConfig } from '../../server/sources/k8s/kubeconfig.ts';
import { waitFor } from '../wait.ts';
import { FakeApiServer, type RecordedRequest } from './fake-apiserver.ts';
import { NODE, service, slice } from './harness.ts';
import { CLI_BUILT, KproxyProcess } from './kproxy-process.ts';
import { writeKubeconfig, type KubeconfigFile } from './kubeconfig-file.ts';

/**
 * deploy/rbac.yaml grants kproxy exactly what it asks the API server: every
 * request the real kproxy makes through @kubernetes/client-node (the CLI in
 * each mode, a delegated dashboard sign-in, an Event that repeats) is turned
 * into the RBAC attributes the API server would authorize, and the set must
 * equal what the ClusterRole grants: nothing missing (a 403 in production),
 * nothing unused (more than kproxy needs).
 */
const ROOT = join(import.meta.dirname, '..', '..');
const AUDIENCE = 'kproxy-dashboard';

/** rbacAttributes is what the API server's authorizer sees for a request: "group resource verb". */
function rbacAttributes(r: Pick<RecordedRequest, 'method' | 'path' | 'watch'>): string {
  const parts = r.path.split('/').filter(Boolean);
  // /api/v1/... (core) or /apis/GROUP/VERSION/...
  const group = parts[0] === 'api' ? '' : parts[1];
  let rest = parts.slice(parts[0] === 'api' ? 2 : 3);
  if (rest[0] === 'namespaces' && rest.length > 2) rest = rest.slice(2);
  const [resource, name, subresource] = rest;
  const verb = r.watch ? 'watch' : ({ GET: name ? 'get' : 'list', POST: 'create', PUT: 'update', PATCH: 'patch', DELETE: name ? 'delete' : 'deletecollection' } as Record<string, string>)[r.method];
  return `${group} ${subresource ? `${resource}/${subresource}` : resource} ${verb}`;
}

/** granted is the shipped ClusterRole as "group resource verb" triples. */
function granted(): string[] {
  const docs = parseAllDocuments(readFileSync(join(ROOT, 'deploy', 'rbac.yaml'), 'utf8')).map((d) => d.toJS() as Record<string, any>);
  const role = docs.find((d) => d.kind === 'ClusterRole')!;
  expect(role.rules.some((r: Record<string, unknown>) => r.resourceNames || r.nonResourceURLs)).toBe(false);
  return role.rules.flatMap((r: Record<string, string[]>) => r.apiGroups.flatMap((g) => r.resources.flatMap((res) => r.verbs.map((v) => `${g} ${res} ${v}`))));
}

describe('rbacAttributes reads requests as the API server authorizes them', () => {
  it.each([
    [{ method: 'GET', path: '/api/v1/services', watch: false }, ' services list'],
    [{ method: 'GET', path: '/api/v1/services', watch: true }, ' services watch'],
    [{ method: 'GET', path: '/api/v1/nodes/node-a', watch: false }, ' nodes get'],
    [{ method: 'GET', path: '/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices', watch: false }, 'discovery.k8s.io endpointslices list'],
    [{ method: 'PATCH', path: '/apis/events.k8s.io/v1/namespaces/default/events/node-a.1', watch: false }, 'events.k8s.io events patch'],
    [{ method: 'POST', path: '/apis/authentication.k8s.io/v1/tokenreviews', watch: false }, 'authentication.k8s.io tokenreviews create'],
    [{ method: 'GET', path: '/api/v1/nodes/node-a/proxy', watch: false }, ' nodes/proxy get'],
  ])('%j is "%s"', (request, expected) => {
    expect(rbacAttributes(request)).toBe(expected);
  });
});

describe.skipIf(!CLI_BUILT)("deploy/rbac.yaml's ClusterRole grants exactly what kproxy asks the API server", () => {
  const server = new FakeApiServer();
  let kubeconfig: KubeconfigFile;

  beforeAll(async () => {
    await server.start();
    kubeconfig = await writeKubeconfig(server.url);
    server.apply(service('web') as never);
    server.apply(slice('web-1', 'web', ['10.244.0.11']) as never);
    server.apply({ apiVersion: 'v1', kind: 'Node', metadata: { name: NODE }, status: { addresses: [{ type: 'InternalIP', address: '10.0.0.10' }] } } as never);
    server.apply({ apiVersion: 'networking.k8s.io/v1', kind: 'ServiceCIDR', metadata: { name: 'kubernetes' }, spec: { cidrs: ['10.96.0.0/16'] } } as never);
    server.tokens.set('ops-token', { user: { username: 'system:serviceaccount:kube-system:kproxy-dashboard', groups: ['ops'] }, audiences: [AUDIENCE] });
    server.accessRules.push({ groups: ['ops'], apiGroup: '', resource: 'nodes/kproxy', verbs: ['get'] });
  });
  afterAll(async () => {
    await server.stop();
    await kubeconfig.remove();
  });

  /** unwatchedLists are the collections listed (GET, not a watch) with no watch of the same path yet. */
  function unwatchedLists(): string[] {
    const watched = new Set(server.requests.filter((r) => r.watch).map((r) => r.path));
    const listed = server.requests.filter((r) => r.method === 'GET' && !r.watch && rbacAttributes(r).endsWith(' list')).map((r) => r.path);
    return [...new Set(listed)].filter((path) => !watched.has(path));
  }

  /** run starts the real CLI in a mode against the fake API server, lets it do its start-up, then stops it. */
  async function run(mode: string, whileRunning: (p: KproxyProcess) => Promise<void> = async () => {}): Promise<void> {
    const p = await KproxyProcess.start(['--kubeconfig', kubeconfig.path, '--proxy-mode', mode]);
    try {
      await waitFor(async () => (await p.get('/readyz')).status === 200, { what: `kproxy in ${mode} mode to sync`, timeoutMs: 20_000 });
      // The Starting Event on the Node goes out after the first sync.
      await waitFor(async () => server.requests.some((r) => r.method === 'POST' && r.path.endsWith('/events')), { what: 'the Starting Event', timeoutMs: 10_000 });
      // Each informer lists, then watches; the watch can start after the first sync (a late one is still a request to grant).
      await waitFor(async () => unwatchedLists().length === 0, { what: `a watch after every list in ${mode} mode (${unwatchedLists().join(', ')})`, timeoutMs: 10_000 });
      await whileRunning(p);
    } finally {
      expect(await p.stop(), p.logs).toBe(0);
    }
  }

  it('every request kproxy makes, in every mode, is granted, and every grant is used', async () => {
    await run('iptables', async (p) => {
      // A dashboard sign-in with a token issued for the dashboard's audience: TokenReview, then SubjectAccessReview.
      const res = await fetch(`http://127.0.0.1:${p.metricsPort}/api/v1/status`, { headers: { authorization: 'Bearer ops-token' } });
      expect(res.status, await res.text()).toBe(200);
    });
    await run('nftables');
    await run('ipvs');
    await run('userspace');

    // An Event that repeats becomes a series (the recorder patches the first one), as a failing sync's Warning does.
    const log = new MemoryLog();
    const recorder = new KubeEventRecorder({
      sink: new ApiEventSink((await loadKubeConfig({ kubeconfig: kubeconfig.path })).api),
      reportingInstance: NODE,
      clock: new FakeClock(),
      logger: log.logger,
    });
    try {
      const ref = { kind: 'Service', name: 'web', namespace: 'default', uid: 'u-1' };
      recorder.record(ref, 'Warning', 'SyncFailed', 'Sync', 'iptables-restore failed');
      await recorder.flush();
      recorder.record(ref, 'Warning', 'SyncFailed', 'Sync', 'iptables-restore failed again');
      await recorder.flush();
    } finally {
      recorder.stop();
    }

    const asked = new Set(server.requests.map(rbacAttributes));
    expect([...asked].sort()).toEqual([...new Set(granted())].sort());
  });

  it('the ServiceCIDRs are watched in nftables mode only, the mode that needs them', async () => {
    for (const mode of ['iptables', 'ipvs', 'userspace']) {
      const before = server.requests.length;
      await run(mode);
      expect(
        server.requests.slice(before).filter((r) => r.path.endsWith('/servicecidrs')),
        mode,
      ).toEqual([]);
    }
  });
});

describe('every API client kproxy makes is one the test above drives', () => {
  it('is made in the Kubernetes source, the Event sink or the dashboard reviewer', () => {
    const sites: string[] = [];
    const walk = (dir: string) => {
      for (const d of readdirSync(dir, { withFileTypes: true })) {
        const path = join(dir, d.name);
        if (d.isDirectory()) walk(path);
        else if (
          d.name.endsWith('.ts') &&
          !d.name.endsWith('.test.ts') &&
          /makeApiClient\(|new (?:\w+\.)?Watch\(|new KubernetesObjectApi|\.makeInformer\(|ListWatch(?:<\w+>)?\(|\.request(?:<[^(]*>)?\('(?:GET|POST|PUT|PATCH|DELETE)'|\bapi\.list\(/.test(
            readFileSync(path, 'utf8'),
          )
        ) {
          sites.push(relative(ROOT, path));
        }
      }
    };
    walk(join(ROOT, 'server'));
    // A new one here asks the API server for something else: drive it above and grant it in deploy/rbac.yaml.
    // resilient-informer.ts is the Kubernetes source's list-watch loop; api-request.ts pages the lists kube-source.ts asks for.
    expect(sites.sort()).toEqual([
      'server/dashboard/auth/access-review.ts',
      'server/events/event-sink.ts',
      'server/sources/k8s/api-request.ts',
      'server/sources/k8s/kube-source.ts',
      'server/sources/k8s/resilient-informer.ts',
    ]);
  });
});

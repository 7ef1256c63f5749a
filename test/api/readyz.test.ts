import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { waitFor } from '../wait.ts';
import { FakeApiServer } from './fake-apiserver.ts';
import { node, service, slice } from './harness.ts';
import { CLI_BUILT, KproxyProcess } from './kproxy-process.ts';
import { writeKubeconfig, type KubeconfigFile } from './kubeconfig-file.ts';

/**
 * Readiness means "has synced", through the Kubernetes source and the real
 * client: the real kproxy (--dry-run: the kernel is simulated, the API source
 * and the node servers are real) against the fake API server.
 */
let server: FakeApiServer;
let kubeconfig: KubeconfigFile;
let kproxy: KproxyProcess | null = null;

beforeEach(async () => {
  server = await new FakeApiServer().start();
  kubeconfig = await writeKubeconfig(server.url);
  server.apply(service('web'));
  server.apply(slice('web-abc', 'web', ['10.244.0.5']));
});
afterEach(async () => {
  await kproxy?.stop();
  kproxy = null;
  server.holdRequests(false);
  await server.stop();
  await kubeconfig.remove();
});

/** lastSync: kube-proxy's timestamp of the last successful sync (absent, 0, before the first). */
const lastSync = async () => (await kproxy!.metric('kubeproxy_sync_proxy_rules_last_timestamp_seconds')) ?? 0;

describe.skipIf(!CLI_BUILT)('/readyz through the Kubernetes source (needs npm run build)', () => {
  it('is 503 while the API server takes the lists and never answers, with /healthz and /livez 200 as kube-proxy; 200 after the first sync', async () => {
    server.apply(node('node-a'));
    server.holdRequests(true);
    kproxy = await KproxyProcess.start(['--kubeconfig', kubeconfig.path]);
    await waitFor(() => server.heldRequests >= 3, { what: 'the three lists to reach the API server', timeoutMs: 20_000 });

    const notReady = await kproxy.get('/readyz');
    expect(notReady.status).toBe(503);
    // The open health port says why in fixed words: not the API server's address, nor what it waits for.
    expect(notReady.body).toMatchObject({ ready: false, reason: 'nothing synced yet: the source has not listed everything (see the log)' });
    expect(JSON.stringify(notReady.body)).not.toContain(server.url.replace(/^https?:\/\//, ''));
    // kube-proxy's probes keep their meaning: nothing is queued, so the proxy counts as healthy.
    expect((await kproxy.get('/healthz')).status).toBe(200);
    expect((await kproxy.get('/livez')).status).toBe(200);
    expect(await lastSync()).toBe(0);
    expect(await kproxy.metric('kproxy_ready')).toBe(0);
    expect(await kproxy.metric('kproxy_proxy_readyz_total{code="503"}')).toBe(1);

    server.holdRequests(false);
    const ready = await waitFor(
      async () => {
        const r = await kproxy!.get('/readyz');
        return r.status === 200 ? r : null;
      },
      { what: '/readyz to answer 200', timeoutMs: 20_000 },
    );
    expect(ready.body).toMatchObject({ ready: true, healthy: true, nodeEligible: true, firstSync: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) });
    expect((ready.body as Record<string, unknown>).reason).toBeUndefined();
    expect(await lastSync()).toBeGreaterThan(0);
    expect(await kproxy.metric('kproxy_ready')).toBe(1);
  });

  it('is 503 while the API server refuses connections (a kubeconfig that cannot reach it), and nothing is synced until the first list', async () => {
    server.apply(node('node-a'));
    await server.goDown();
    kproxy = await KproxyProcess.start(['--kubeconfig', kubeconfig.path]);
    // The log names the failed list; /readyz stays 503 with its fixed reason.
    await waitFor(() => /W .*: cannot list yet, retrying in .*server=http:\/\/127\.0\.0\.1:\d+/.test(kproxy!.logs), { what: 'the log to name the failed list', timeoutMs: 20_000 });
    const notReady = await kproxy.get('/readyz');
    expect(notReady.status).toBe(503);
    expect((notReady.body as Record<string, unknown>).reason).toBe('nothing synced yet: the source has not listed everything (see the log)');
    expect(await lastSync()).toBe(0);

    await server.comeBack();
    await waitFor(async () => (await kproxy!.get('/readyz')).status === 200, { what: '/readyz to answer 200 once the API is back', timeoutMs: 40_000 });
    expect(await lastSync()).toBeGreaterThan(0);
  });

  it('is 503 when the node name matches no Node, though the Services are synced', async () => {
    server.apply(node('node-b'));
    kproxy = await KproxyProcess.start(['--kubeconfig', kubeconfig.path]);
    await waitFor(async () => (await lastSync()) > 0, { what: 'the first sync', timeoutMs: 20_000 });
    const r = await waitFor(
      async () => {
        const a = await kproxy!.get('/readyz');
        return /not found/.test(String((a.body as Record<string, unknown>).reason)) ? a : null;
      },
      { what: '/readyz to say the Node is missing', timeoutMs: 20_000 },
    );
    expect(r.status).toBe(503);
    expect((r.body as Record<string, unknown>).reason).toBe("this node's Node was not found in the cluster (check --hostname-override; see the log)");
    expect((await kproxy.get('/healthz')).status).toBe(200);
    // The log says it too, where an operator looks first.
    expect(kproxy.logs).toMatch(/W .* Node node-a not found in the cluster \(check --hostname-override\)/);
  });
});

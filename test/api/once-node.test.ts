import { execFile } from 'node:child_process';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeApiServer } from './fake-apiserver.ts';
import { node, service, slice } from './harness.ts';
import { CLI, CLI_BUILT } from './kproxy-process.ts';
import { writeKubeconfig, type KubeconfigFile } from './kubeconfig-file.ts';

/**
 * `--once` through the Kubernetes source and the real client, against the fake
 * API server (--dry-run: the simulated kernel it prints is what it programmed).
 * Its one sync needs this node's Node, as kube-proxy does before it proxies:
 * it waits for the Node list, and a node name that matches no Node exits 1
 * naming it, with nothing programmed. An API server that never answers the
 * lists, or cannot be reached, stops it after --once-timeout, naming the
 * server and the lists, with nothing programmed.
 */
let server: FakeApiServer;
let kubeconfig: KubeconfigFile;

beforeEach(async () => {
  server = await new FakeApiServer().start();
  kubeconfig = await writeKubeconfig(server.url);
  server.apply(service('web'));
  server.apply(slice('web-abc', 'web', ['10.244.0.5']));
});
afterEach(async () => {
  await server.stop();
  await kubeconfig.remove();
});

/** once runs the built CLI to completion (asynchronously: the fake API server answers from this process). */
function once(extra: readonly string[] = []): Promise<{ code: number; stdout: string; stderr: string }> {
  const args = [CLI, '--once', '--dry-run', '--kubeconfig', kubeconfig.path, '--hostname-override', 'node-a', '--detect-local-mode', 'NodeCIDR', ...extra];
  return new Promise((resolve) => {
    execFile(process.execPath, args, { encoding: 'utf8', timeout: 60_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr });
    });
  });
}

describe.skipIf(!CLI_BUILT)("kproxy --once and this node's Node (needs npm run build)", () => {
  it('waits for the Node list before its one sync: a Node list that fails at first still reaches the rules', async () => {
    server.apply(node('node-a'));
    // The Services and EndpointSlices are listed at once; the Node list only after two retries.
    server.failNext({ pathPrefix: '/api/v1/nodes', status: 500, count: 2 });
    const r = await once();
    expect(r.code, r.stderr).toBe(0);
    expect(server.listRequests('nodes').length).toBeGreaterThanOrEqual(3);
    // --detect-local-mode NodeCIDR: pod traffic is told by the Node's podCIDR, which only the Node says.
    expect(r.stdout).toMatch(/^-A KUBE-SVC-\S+ .*! -s 10\.244\.0\.0\/24 .*-j KUBE-MARK-MASQ$/m);
    expect(r.stdout).toMatch(/^kproxy: synced .* on node node-a in \d+ ms: IPv4: 1 services/m);
  }, 60_000);

  it('exits 1 naming the Node when none has this node name, with nothing programmed', async () => {
    server.apply(node('node-b'));
    const r = await once();
    expect(r.code).toBe(1);
    expect(r.stdout).toBe(
      "kproxy: nothing synced, the kernel was not touched: Node node-a not found in the cluster (check --hostname-override): which endpoints are local, and the node's addresses, are unknown [KPROXY_ERR_NODE_NOT_FOUND]\n",
    );
  }, 60_000);

  it('gives up after --once-timeout when the API server takes the lists and never answers, naming it and the lists, with nothing programmed', async () => {
    server.apply(node('node-a'));
    server.holdRequests(true);
    try {
      const t0 = Date.now();
      const r = await once(['--once-timeout', '3s']);
      expect(r.code, r.stderr).toBe(1);
      expect(r.stdout).toBe(
        `kproxy: nothing synced, the kernel was not touched: ${server.url} did not sync within 3s (--once-timeout): waiting for the first list of Service, EndpointSlice, Node [KPROXY_ERR_SOURCE_NOT_SYNCED]\n`,
      );
      expect(Date.now() - t0).toBeGreaterThanOrEqual(3000);
    } finally {
      server.holdRequests(false);
    }
  }, 60_000);

  it('gives up after --once-timeout when the API server refuses connections, naming the last error (it neither waits forever nor ends silently)', async () => {
    await server.goDown();
    const r = await once(['--once-timeout', '3s']);
    expect(r.code, r.stdout + r.stderr).toBe(1);
    expect(r.stdout).toMatch(
      new RegExp(
        `^kproxy: nothing synced, the kernel was not touched: ${server.url.replace(/[.]/g, '\\.')} did not sync within 3s \\(--once-timeout\\): waiting for the first list of .*\\(last error: listing \\w+ from .* failed`,
      ),
    );
    expect(r.stdout.split('\n').filter(Boolean)).toHaveLength(1);
  }, 60_000);
});

/**
 * api-churn-driver hosts the fake API server (test/api/fake-apiserver.ts) for
 * the churn measurement through the Kubernetes source. It runs inside the
 * benchmark namespace, next to the daemon, so the server listens on that
 * namespace's loopback:
 *   ip netns exec NS node test/bench/api-churn-driver.ts SERVICES ENDPOINTS NODE NODE_IP CHURN_TARGETS
 * It loads the synthetic cluster (the same seeded cluster as the bench's
 * manifests: generateCluster, churnTargets), writes a kubeconfig and says
 *   {"event":"ready","kubeconfig":PATH,"url":URL,"objects":N,"loadMs":MS}
 * then reads one JSON command per line on stdin and answers one line each:
 *   {"op":"churn","rate":50,"seconds":60} -> {"event":"churned","written":[epoch ms...],"lists":N,"watches":N}
 * (lists/watches: requests the server got during the churn; a relist there
 * would be measured with the churn). Stdin closed: it stops and exits.
 */
import { createInterface } from 'node:readline';
import { FakeApiServer } from '../api/fake-apiserver.ts';
import { writeKubeconfig } from '../api/kubeconfig-file.ts';
import { driveChurn } from './churn.ts';
import { generateCluster } from './cluster.ts';
import { churnTargets } from './manifests.ts';
import { movedSlice } from './partial-sync.ts';

/** BOOKMARK_MS: how often the server sends BOOKMARKs to watches that allow them, as the API server does (about a minute). */
const BOOKMARK_MS = 60_000;

const out = (o: object) => process.stdout.write(JSON.stringify(o) + '\n');

const [services, endpoints, nodeName, nodeIP, churnCount] = process.argv.slice(2);
const t0 = performance.now();
const cluster = generateCluster({ services: Number(services), endpointsPerService: Number(endpoints), nodeName, nodeIP });
const targets = churnTargets(cluster.services.length, Number(churnCount));
const server = await new FakeApiServer().start();
server.apply(cluster.node as never);
for (let i = 0; i < cluster.services.length; i++) {
  server.apply(cluster.services[i] as never);
  server.apply(cluster.slices[i] as never);
}
const kubeconfig = await writeKubeconfig(server.url);
const bookmarks = setInterval(() => server.bookmark(), BOOKMARK_MS);
out({ event: 'ready', kubeconfig: kubeconfig.path, url: server.url, objects: 1 + 2 * cluster.services.length, loadMs: Math.round(performance.now() - t0) });

async function churn(rate: number, seconds: number): Promise<object> {
  const before = server.requests.length;
  const written = await driveChurn(rate, seconds, (i, at) => {
    server.apply(movedSlice(cluster, targets[i % targets.length], at) as never);
  });
  const during = server.requests.slice(before);
  return { event: 'churned', written, lists: during.filter((r) => r.method === 'GET' && !r.watch).length, watches: during.filter((r) => r.watch).length };
}

let busy: Promise<void> = Promise.resolve();
const input = createInterface({ input: process.stdin });
input.on('line', (line) => {
  busy = busy.then(async () => {
    try {
      const cmd = JSON.parse(line) as { op: string; rate?: number; seconds?: number };
      if (cmd.op !== 'churn') throw new Error(`unknown command ${cmd.op}`);
      out(await churn(cmd.rate ?? 50, cmd.seconds ?? 60));
    } catch (err) {
      out({ event: 'error', error: err instanceof Error ? err.message : String(err) });
    }
  });
});
input.on('close', () => {
  void busy.then(async () => {
    clearInterval(bookmarks);
    await server.stop();
    await kubeconfig.remove();
    process.exit(0);
  });
});

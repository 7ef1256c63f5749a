import { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { waitFor } from '../wait.ts';
import { FakeApiServer } from './fake-apiserver.ts';
import { node, service, slice } from './harness.ts';
import { CLI_BUILT, KproxyProcess } from './kproxy-process.ts';
import { writeKubeconfig, type KubeconfigFile } from './kubeconfig-file.ts';

/**
 * The kubelet's liveness probe keeps its meaning while the dashboard is
 * hammered: the real kproxy (--dry-run, the Kubernetes source against the fake
 * API server, 2,000 Services of 10 endpoints) answers every GET /livez within
 * the probe's default timeout, 1 s (kubelet's timeoutSeconds; the DaemonSet
 * gives 5), while viewers flood it with snapshot requests over WebSockets and
 * download the intended restore input in parallel. A probe that misses its
 * timeout counts as a failure, as in the kubelet; none may. How fast it answers
 * is measured by the bench (test/bench/livez-load.ts), not asserted here.
 *
 * The prober is a worker thread, so the load this process generates never
 * delays its clock; the load reads nothing it receives beyond a prefix.
 */
const SERVICES = 2000;
const TOKEN = 'ops-token';
const AUDIENCE = 'kproxy-dashboard';
const PROBE_TIMEOUT_MS = 1000;

/** PROBER: GET /livez on a new connection every 100 ms until told to stop; posts how many answered 200 in time and what failed. */
const PROBER = `
const { parentPort, workerData } = require('node:worker_threads');
const { request } = require('node:http');
let running = true;
const result = { answered: 0, failures: [] };
parentPort.on('message', () => (running = false));
const probe = () => new Promise((resolve) => {
  const t0 = performance.now();
  const req = request({ host: '127.0.0.1', port: workerData.port, path: '/livez', agent: false, timeout: workerData.timeoutMs, headers: { connection: 'close' } }, (res) => {
    res.resume();
    res.on('end', () => {
      if (res.statusCode === 200) result.answered++;
      else result.failures.push('status ' + res.statusCode + ' after ' + Math.round(performance.now() - t0) + ' ms');
      resolve();
    });
  });
  req.on('timeout', () => req.destroy(new Error('no answer within ' + workerData.timeoutMs + ' ms')));
  req.on('error', (err) => { result.failures.push(err.message); resolve(); });
  req.end();
});
(async () => {
  while (running) {
    await probe();
    await new Promise((r) => setTimeout(r, 100));
  }
  parentPort.postMessage(result);
})();
`;

let server: FakeApiServer;
let kubeconfig: KubeconfigFile;
let kproxy: KproxyProcess | null = null;

beforeAll(async () => {
  server = await new FakeApiServer().start();
  kubeconfig = await writeKubeconfig(server.url);
  server.apply(node('node-a'));
  for (let i = 0; i < SERVICES; i++) {
    const name = `svc-${i}`;
    server.apply(service(name, { clusterIP: `10.96.${i >> 8}.${i & 255}` }));
    server.apply(
      slice(
        `${name}-1`,
        name,
        Array.from({ length: 10 }, (_, k) => `10.244.${((i * 10 + k) >> 8) & 255}.${(i * 10 + k) & 255}`),
      ),
    );
  }
  server.tokens.set(TOKEN, { user: { username: 'system:serviceaccount:kube-system:kproxy-dashboard', groups: ['ops'] }, audiences: [AUDIENCE] });
  server.accessRules.push({ groups: ['ops'], apiGroup: '', resource: 'nodes/kproxy', verbs: ['get'] });
}, 60_000);
afterAll(async () => {
  await kproxy?.stop();
  await server.stop();
  await kubeconfig.remove();
});

describe.skipIf(!CLI_BUILT)('/livez while the dashboard is hammered (needs npm run build)', () => {
  it(`answers every liveness probe within its ${PROBE_TIMEOUT_MS} ms timeout while 8 viewers flood snapshot requests and 3 download the restore input`, async () => {
    kproxy = await KproxyProcess.start(['--kubeconfig', kubeconfig.path]);
    await waitFor(async () => (await kproxy!.get('/readyz')).status === 200, { what: `kproxy's first sync of ${SERVICES} Services`, timeoutMs: 120_000 });
    const base = `127.0.0.1:${kproxy.metricsPort}`;
    const auth = { authorization: `Bearer ${TOKEN}` };

    const work = { snapshots: 0, reconnects: 0, downloads: 0, downloadErrors: 0 };
    const served = new Set<number>();
    const prober = new Worker(PROBER, { eval: true, workerData: { port: kproxy.healthzPort, timeoutMs: PROBE_TIMEOUT_MS } });
    const probed = new Promise<{ answered: number; failures: string[] }>((resolve, reject) => prober.once('message', resolve).once('error', reject));
    // Viewers: 400 snapshot requests each at once, then one more per snapshot received; one the
    // server disconnects for flooding (past its message budget) comes straight back and floods again.
    let loading = true;
    const viewers: WebSocket[] = [];
    const connect = (i: number) => {
      const ws = new WebSocket(`ws://${base}/ws`, ['kproxy.dashboard.v1'], { headers: auth });
      viewers[i] = ws;
      const ask = () => ws.readyState === WebSocket.OPEN && ws.send('{"type":"snapshot"}');
      ws.on('open', () => {
        for (let k = 0; k < 400; k++) ask();
      });
      ws.on('message', (d: Buffer) => {
        if (d.subarray(0, 40).toString().includes('"type":"snapshot"')) {
          work.snapshots++;
          served.add(i);
          ask();
        }
      });
      ws.on('error', () => {});
      ws.on('close', () => {
        work.reconnects++;
        if (loading) connect(i);
      });
    };
    for (let i = 0; i < 8; i++) connect(i);
    const downloads = Array.from({ length: 3 }, async () => {
      while (loading) {
        try {
          const res = await fetch(`http://${base}/api/v1/restore-input/intended`, { headers: auth });
          await res.arrayBuffer();
          if (res.ok) work.downloads++;
          else await new Promise((r) => setTimeout(r, Number(res.headers.get('retry-after') ?? 1) * 1000));
        } catch {
          work.downloadErrors++;
        }
      }
    });

    try {
      // At least 10 s of load, and until every viewer has had its snapshots (the heaviest part, at connect).
      const t0 = Date.now();
      await waitFor(() => Date.now() - t0 >= 10_000 && served.size === 8, { what: 'every viewer to receive snapshots', timeoutMs: 120_000, intervalMs: 200 });
    } finally {
      prober.postMessage('stop');
      loading = false;
    }
    const result = await probed;
    await prober.terminate();
    for (const ws of viewers) ws.terminate();
    await new Promise((r) => setTimeout(r, 100));
    await Promise.all(downloads);

    console.info(`[measured] ${result.answered} probes answered in time, ${result.failures.length} not; meanwhile ${JSON.stringify(work)}`);
    // The load was real: every viewer got snapshots, downloads completed.
    expect(served.size).toBe(8);
    expect(work.downloads).toBeGreaterThanOrEqual(1);
    // The probe: answered, every time, within its timeout.
    expect(result.failures, kproxy.logs.slice(-4000)).toEqual([]);
    expect(result.answered).toBeGreaterThanOrEqual(20);
    expect((await kproxy.get('/livez')).status).toBe(200);
  }, 240_000);
});

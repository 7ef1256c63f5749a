/**
 * dashboard-scale measures the dashboard on a big node: a dry-run kproxy on
 * N services × M endpoints (default 10,000 × 10, one generated JSON manifest),
 * then a WebSocket client and headless Chromium against it.
 *
 *   node test/bench/dashboard-scale.ts [N] [M]     (needs npm run build and /usr/bin/chromium)
 *
 * It prints: start-up, the WebSocket snapshot (bytes, server build time, time
 * to arrive), the delta of a one-endpoint change, the overview's time to be
 * usable in the browser, search latency per keystroke at N services, the Rules
 * page on the nat table, the kernel read, and the daemon's memory.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WebSocket } from 'ws';
import { WS_SUBPROTOCOL } from '../../server/dashboard/protocol.ts';
import type { Overview, ServerMessage } from '../../server/dashboard/protocol.ts';
import { launchBrowser, SCREENSHOTS, startDaemon } from '../browser/harness.ts';

const N = Number(process.argv[2] ?? 10_000);
const M = Number(process.argv[3] ?? 10);

const ip = (i: number) => `10.${128 + ((i >> 16) & 63)}.${(i >> 8) & 255}.${i & 255}`;
function slice(s: number, extra = 0) {
  const name = `svc${s}`;
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: `${name}-1`, namespace: `ns${s % 100}`, labels: { 'kubernetes.io/service-name': name } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: Array.from({ length: M + extra }, (_, e) => ({
      addresses: [ip(1 + s * (M + 1) + e)],
      conditions: { ready: true, serving: true, terminating: false },
      nodeName: e === 0 ? 'node-a' : 'node-b',
      zone: 'z-a',
    })),
  };
}
function manifest(changed: number | null): string {
  const items: unknown[] = [
    {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: 'node-a', labels: { 'topology.kubernetes.io/zone': 'z-a' } },
      spec: { podCIDR: '10.244.0.0/24', podCIDRs: ['10.244.0.0/24'] },
      status: { addresses: [{ type: 'InternalIP', address: '10.0.0.10' }] },
    },
  ];
  for (let s = 0; s < N; s++) {
    items.push({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: `svc${s}`, namespace: `ns${s % 100}` },
      spec: { type: 'ClusterIP', clusterIP: `172.${16 + ((s >> 16) & 15)}.${(s >> 8) & 255}.${s & 255}`, ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 8080 }] },
    });
    items.push(slice(s, s === changed ? 1 : 0));
  }
  return JSON.stringify({ apiVersion: 'v1', kind: 'List', items });
}

const figures: Record<string, string | number> = {};
const note = (k: string, v: string | number) => {
  figures[k] = v;
  process.stdout.write(`${k}: ${v}\n`);
};
const kib = (n: number) => `${(n / 1024).toFixed(1)} KiB`;

const dir = mkdtempSync(join(tmpdir(), 'kpt-scale-'));
const file = join(dir, 'cluster.json');
writeFileSync(file, manifest(null));
const t0 = Date.now();
const daemon = await startDaemon(['--source', `file:${dir}`], { timeoutMs: 180_000 });
const api = async <T>(path: string): Promise<T> => (await fetch(`${daemon.url}api/v1/${path}`)).json() as Promise<T>;
try {
  for (;;) {
    const { syncs } = await api<{ syncs: { seq: number; durationMs: number }[] }>('syncs');
    if (syncs.length) {
      note('first full sync (dry-run kernel)', `${Math.round(syncs[0].durationMs)} ms`);
      break;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  note('daemon start to first sync', `${((Date.now() - t0) / 1000).toFixed(1)} s`);

  // --- WebSocket: snapshot, then a one-endpoint change.
  const ws = new WebSocket(`${daemon.url.replace('http', 'ws')}ws`, [WS_SUBPROTOCOL]);
  const messages: { m: ServerMessage; bytes: number; at: number }[] = [];
  const tWs = performance.now();
  ws.on('message', (d) => messages.push({ m: JSON.parse(d.toString()), bytes: (d as Buffer).length, at: performance.now() }));
  while (!messages.length) await new Promise((r) => setTimeout(r, 5));
  const snap = messages[0];
  note('snapshot size', `${(snap.bytes / 1024 / 1024).toFixed(2)} MiB (${N} service summaries)`);
  note('snapshot: connect to received and parsed', `${Math.round(snap.at - tWs)} ms`);
  const status = await api<{ overview: Overview }>('status');
  note('snapshot: server build + serialise', `${status.overview.stream.lastSnapshotMs.toFixed(0)} ms`);

  const before = messages.length;
  writeFileSync(file, manifest(7));
  const tChange = performance.now();
  let delta: (typeof messages)[number] | undefined;
  while (!(delta = messages.slice(before).find((x) => x.m.type === 'sync'))) {
    if (performance.now() - tChange > 120_000) throw new Error('no sync after the one-endpoint change');
    await new Promise((r) => setTimeout(r, 20));
  }
  if (delta.m.type !== 'sync') throw new Error('unreachable');
  note('one-endpoint change: delta size', `${kib(delta.bytes)} (${delta.m.services.length} service summary, sync ${delta.m.sync.full ? 'full' : 'partial'}, ${delta.m.sync.linesWritten} lines)`);
  note('one-endpoint change: file edit to delta received', `${Math.round(delta.at - tChange)} ms (includes re-reading the ${(readFileSync(file).length / 1024 / 1024).toFixed(0)} MB manifest)`);
  ws.close();

  // --- Browser.
  const browser = await launchBrowser();
  try {
    const page = await browser.context.newPage();
    await page.goto(daemon.url);
    await page.waitForFunction((n) => document.body.textContent?.includes(n) && document.body.textContent.includes('Healthy'), N.toLocaleString('en-US'), { timeout: 60_000 });
    note('overview usable (navigation start to numbers shown)', `${Math.round(await page.evaluate(() => performance.now()))} ms`);
    await page.screenshot({ path: join(SCREENSHOTS, 'scale-overview.png') });

    await page.goto(`${daemon.url}#/services`);
    await page.getByTestId('service-row').first().waitFor();
    const perKey = await page.evaluate(async () => {
      const input = document.querySelector('[data-testid=service-search]') as HTMLInputElement;
      const frame = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
      const out: number[] = [];
      let text = '';
      for (const ch of 'svc9999') {
        text += ch;
        const t = performance.now();
        input.value = text;
        input.dispatchEvent(new Event('input', { bubbles: true }));
        await frame();
        out.push(performance.now() - t);
      }
      return { out, count: document.querySelector('[data-testid=search-count]')?.textContent };
    });
    const sorted = [...perKey.out].sort((a, b) => a - b);
    note(
      'search per keystroke, to the next painted frame',
      `median ${sorted[Math.floor(sorted.length / 2)].toFixed(0)} ms, max ${sorted.at(-1)!.toFixed(0)} ms (${perKey.out.length} keystrokes; result: ${perKey.count})`,
    );
    await page.screenshot({ path: join(SCREENSHOTS, 'scale-services.png') });

    const tRules = Date.now();
    await page.goto(`${daemon.url}#/rules/nat`);
    await page.getByTestId('chain-row').first().waitFor({ timeout: 120_000 });
    note('rules page: nat table first rows', `${Date.now() - tRules} ms`);
    const lines = await page.locator('text=/\\d[\\d,]* lines/').first().textContent();
    note('rules page: nat table', lines ?? '');
    const tSearch = Date.now();
    await page.getByTestId('rule-search').fill('10.128.0.78');
    await page.waitForFunction(
      () =>
        /^\d+ lines/.test(document.querySelector('.toolbar .muted.small')?.textContent ?? '') &&
        document.querySelectorAll('[data-testid=chain-row]').length > 0 &&
        !document.querySelector('.r.loading'),
      null,
      { timeout: 60_000 },
    );
    note('rules page: search 300k rules (debounce 250 ms included)', `${Date.now() - tSearch} ms`);
    const status2 = await api<{ overview: Overview }>('status');
    note('kernel read (iptables-save -c of the simulated kernel + parse)', `${Math.round(status2.overview.kernel.readMs ?? 0)} ms, ${status2.overview.kernel.rules.toLocaleString('en-US')} rules`);
  } finally {
    await browser.close();
  }
  const rss = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${daemon.pid}/status`, 'utf8'))?.[1];
  if (rss) note('daemon resident memory', `${(Number(rss) / 1024).toFixed(0)} MiB`);
} finally {
  await daemon.stop();
  rmSync(dir, { recursive: true, force: true });
}
process.stdout.write(`\n${JSON.stringify(figures, null, 2)}\n`);

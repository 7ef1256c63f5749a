import { afterEach, describe, expect, it } from 'vitest';
import type { WebSocket } from 'ws';
import { waitFor } from '../../../test/wait.ts';
import { RS_CHECK_INTERVAL_MS } from '../../proxy/ipvs/graceful-termination.ts';
import { ep, makeSlice } from '../../proxy/testing.ts';
import type { ServerMessage, ServiceDetail } from '../protocol.ts';
import { testDashboard, type TestDashboard } from '../testing.ts';

const VS = '10.96.10.10:80/TCP';

/** frontendSlice is shop/frontend's slice with 10.244.1.13 ready or terminating. */
function frontendSlice(terminating: boolean) {
  return makeSlice(
    'shop',
    'frontend',
    'frontend-abc12',
    [
      ep('10.244.0.11', { nodeName: 'node-a' }),
      ep('10.244.1.12', { nodeName: 'node-b' }),
      ep('10.244.1.13', { nodeName: 'node-b', ...(terminating ? { ready: false, serving: true, terminating: true } : {}) }),
    ],
    [{ name: 'http', port: 8080, protocol: 'TCP' }],
  );
}

const realServers = (d: ServiceDetail) => d.ports[0].chains.find((c) => c.table === 'ipvs')!.rules.map((r) => `${r.ipvs!.address} w${r.ipvs!.weight}${r.ipvs!.draining ? ' draining' : ''}`);

describe('dashboard live stream in IPVS mode', () => {
  let t: TestDashboard;
  afterEach(async () => t?.close());

  it('streams a real server from active to draining to gone on the watched Service page', async () => {
    t = await testDashboard({ mode: 'ipvs' });
    const messages: ServerMessage[] = [];
    const ws: WebSocket = await t.app.injectWS('/ws', { headers: { host: 'localhost:10249' } }, { onInit: (w: WebSocket) => w.on('message', (d) => messages.push(JSON.parse(d.toString()))) });
    const page = (pred: (d: ServiceDetail) => boolean, what: string) =>
      waitFor(() => messages.find((m): m is Extract<ServerMessage, { type: 'service' }> => m.type === 'service' && m.detail !== null && pred(m.detail)), { what });
    await waitFor(() => messages.find((m) => m.type === 'snapshot'));
    ws.send(JSON.stringify({ type: 'watch', service: 'shop/frontend' }));
    await t.settle(0);
    await page((d) => d.ports[0].chains.some((c) => c.table === 'ipvs' && c.from === 'kernel'), 'the page from the kernel');

    // The endpoint starts terminating: the sync drains it, the page says so.
    t.source.handlers!.onEndpointSlice(null, frontendSlice(true));
    t.ipvs!.ipvs.setConnections(VS, '10.244.1.13:8080', 1, 0);
    await t.settle(1000);
    await t.settle(5000);
    const draining = await page((d) => realServers(d).includes('10.244.1.13 w0 draining'), 'a draining real server');
    expect(realServers(draining.detail!)).toEqual(['10.244.0.11 w1', '10.244.1.12 w1', '10.244.1.13 w0 draining']);

    // Its last connection ends; the next check (a sync at least a minute later) deletes it. No
    // service changed in that sync, yet the page loses the real server at the next kernel read.
    t.ipvs!.ipvs.setConnections(VS, '10.244.1.13:8080', 0, 0);
    const before = messages.length;
    await t.settle(RS_CHECK_INTERVAL_MS);
    t.daemon.proxy.requestFullSync('resync');
    await t.settle(1000);
    await t.settle(5000);
    expect(t.ipvs!.ipvs.saveText()).not.toContain('10.244.1.13');
    const gone = await page((d) => realServers(d).length === 2, 'the page without the drained real server');
    expect(messages.indexOf(gone)).toBeGreaterThan(before);
    expect(realServers(gone.detail!)).toEqual(['10.244.0.11 w1', '10.244.1.12 w1']);
    ws.terminate();
  });
});

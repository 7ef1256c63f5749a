import { describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import { silentLogger } from '../log.ts';
import type { KernelReader } from './kernel-reader.ts';
import { LiveStream, type StreamQueries } from './live-stream.ts';
import type { Overview, Viewer } from './protocol.ts';
import type { HubSocket } from './stream-hub.ts';

/** socket records what a client was sent. */
function socket(): HubSocket & { sent: string[] } {
  const sent: string[] = [];
  return { sent, bufferedAmount: 0, send: (d) => void sent.push(d), close: () => {} };
}

const viewer: Viewer = { authMode: 'off', user: 'anonymous', canAct: false };

describe('LiveStream', () => {
  it('sends the snapshots of clients that connect at once one per turn of the event loop, the first at once, building the shared body once', async () => {
    let builds = 0;
    const queries = {
      reader: { refresh: async () => {}, due: false, drift: { report: () => ({ findings: [], count: 0 }) } } as unknown as KernelReader,
      snapshot: (v: Viewer) => (builds++, { type: 'snapshot', viewer: v, services: [{ key: 'shop/web' }] }),
      overview: () => ({}) as Overview,
      detail: async () => null,
      readConntrack: async () => null,
      touch: () => {},
    } as unknown as StreamQueries;
    const turns: (() => void)[] = [];
    const stream = new LiveStream({ queries, clock: new FakeClock(), logger: silentLogger, pause: () => new Promise<void>((r) => turns.push(r)) });
    try {
      const sockets = [socket(), socket(), socket()];
      for (const s of sockets) stream.connect(s, viewer, '127.0.0.1');
      const isSnapshot = (m: string) => (JSON.parse(m) as { type: string }).type === 'snapshot';
      const snapshots = () => sockets.map((s) => s.sent.filter(isSnapshot).length);
      expect(snapshots()).toEqual([1, 0, 0]);
      turns.shift()!();
      await new Promise((r) => setImmediate(r));
      expect(snapshots()).toEqual([1, 1, 0]);
      turns.shift()!();
      await new Promise((r) => setImmediate(r));
      expect(snapshots()).toEqual([1, 1, 1]);
      expect(builds).toBe(1);
      const last = sockets[2]!.sent.find(isSnapshot)!;
      expect(JSON.parse(last)).toMatchObject({ type: 'snapshot', viewer, services: [{ key: 'shop/web' }] });
      // The size noted is the message's, less the hub's seq prefix.
      expect(stream.stats().lastSnapshotBytes).toBe(Buffer.byteLength(last) - '"seq":1,'.length);
    } finally {
      stream.stop();
    }
  });
});

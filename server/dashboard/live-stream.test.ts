import { describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import { silentLogger } from '../log.ts';
import type { KernelReader } from './kernel-reader.ts';
import { LiveStream, SNAPSHOT_SERVICES_PER_TURN, type StreamQueries } from './live-stream.ts';
import type { Overview, Viewer } from './protocol.ts';
import type { HubSocket } from './stream-hub.ts';

/** socket records what a client was sent. */
function socket(): HubSocket & { sent: string[] } {
  const sent: string[] = [];
  return { sent, bufferedAmount: 0, send: (d) => void sent.push(d), close: () => {} };
}

const viewer: Viewer = { authMode: 'off', user: 'anonymous', canAct: false };

/**
 * pacedStream is a LiveStream over a dashboard that answers only snapshots
 * (with `snapshot`), whose turns of the event loop the test releases one by one.
 */
function pacedStream(snapshot: (v: Viewer) => unknown): { stream: LiveStream; turns: (() => void)[] } {
  const queries = {
    reader: { refresh: async () => {}, due: false, drift: { report: () => ({ findings: [], count: 0 }) } } as unknown as KernelReader,
    snapshot,
    overview: () => ({}) as Overview,
    detail: async () => null,
    readConntrack: async () => null,
    touch: () => {},
  } as unknown as StreamQueries;
  const turns: (() => void)[] = [];
  return { stream: new LiveStream({ queries, clock: new FakeClock(), logger: silentLogger, pause: () => new Promise<void>((r) => turns.push(r)) }), turns };
}

describe('LiveStream', () => {
  it('sends the snapshots of clients that connect at once one per turn of the event loop, the first once its body is built, building the shared body once', async () => {
    let builds = 0;
    const { stream, turns } = pacedStream((v) => (builds++, { type: 'snapshot', viewer: v, services: [{ key: 'shop/web' }] }));
    try {
      const sockets = [socket(), socket(), socket()];
      for (const s of sockets) stream.connect(s, viewer, '127.0.0.1');
      const isSnapshot = (m: string) => (JSON.parse(m) as { type: string }).type === 'snapshot';
      const snapshots = () => sockets.map((s) => s.sent.filter(isSnapshot).length);
      // The body's services are serialised after a turn; then one client's snapshot per turn.
      expect(snapshots()).toEqual([0, 0, 0]);
      for (const want of [
        [1, 0, 0],
        [1, 1, 0],
        [1, 1, 1],
      ]) {
        turns.shift()!();
        await new Promise((r) => setImmediate(r));
        expect(snapshots()).toEqual(want);
      }
      expect(builds).toBe(1);
      const last = sockets[2]!.sent.find(isSnapshot)!;
      expect(JSON.parse(last)).toMatchObject({ type: 'snapshot', viewer, services: [{ key: 'shop/web' }] });
      // The size noted is the message's, less the hub's seq prefix.
      expect(stream.stats().lastSnapshotBytes).toBe(Buffer.byteLength(last) - '"seq":1,'.length);
    } finally {
      stream.stop();
    }
  });

  it('serialises a big services list a slice per turn, and sends what is current when the state changed meanwhile', async () => {
    let builds = 0;
    const list = (tag: string) => Array.from({ length: 2 * SNAPSHOT_SERVICES_PER_TURN + 1 }, (_, i) => ({ key: `ns/s${i}`, tag }));
    let services = list('old');
    const { stream, turns } = pacedStream((v) => (builds++, { type: 'snapshot', viewer: v, overview: { node: 'node-a' }, services }));
    const turn = async () => {
      turns.shift()!();
      await new Promise((r) => setImmediate(r));
    };
    try {
      const s = socket();
      stream.connect(s, viewer, '127.0.0.1');
      await turn();
      await turn();
      // Two slices of three done: a sync changes the services; the body is built again at once, from the new state.
      expect(s.sent).toHaveLength(0);
      services = list('new');
      stream.changed();
      await turn();
      const sent = JSON.parse(s.sent.find((m) => m.includes('"type":"snapshot"'))!) as { services: { tag: string }[]; overview: unknown; viewer: unknown };
      expect(builds).toBe(2);
      expect(sent.services).toHaveLength(services.length);
      expect(new Set(sent.services.map((x) => x.tag))).toEqual(new Set(['new']));
      expect(sent.overview).toEqual({ node: 'node-a' });
      expect(sent.viewer).toEqual(viewer);

      // Unchanged: built in slices, one turn each, and the same JSON as in one piece.
      const t = socket();
      await new Promise((r) => setTimeout(r, 0));
      while (turns.length) await turn();
      stream.changed();
      stream.connect(t, viewer, '127.0.0.1');
      for (let i = 0; i < 3; i++) {
        expect(t.sent).toHaveLength(0);
        await turn();
      }
      const whole = JSON.parse(t.sent.find((m) => m.includes('"type":"snapshot"'))!) as Record<string, unknown>;
      expect(builds).toBe(3);
      expect(whole).toMatchObject({ type: 'snapshot', viewer, overview: { node: 'node-a' }, services });
    } finally {
      stream.stop();
    }
  });
});

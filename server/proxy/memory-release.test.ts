import { describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import { MemoryLog } from '../log.ts';
import type { BackendSyncResult } from './backend.ts';
import { FIRST_SYNC_HEAP_BYTES, MemoryRelease, RELEASE_DELAY_MS, RELEASE_MIN_BYTES } from './memory-release.ts';
import type { StateCheckout } from './proxy-state.ts';
import type { SyncRecord } from './sync-loop.ts';

function setup(collect: (() => void) | null = () => {}) {
  const clock = new FakeClock();
  const log = new MemoryLog();
  let collections = 0;
  const release = new MemoryRelease({ clock, logger: log.logger, collect: collect && (() => (collections++, collect())), rss: () => 300 * 1024 * 1024 });
  const sync = (o: { ok?: boolean; full?: boolean; bytes?: number }) =>
    release.onSync({ ok: o.ok ?? true, full: o.full ?? true } as SyncRecord, {} as StateCheckout, { bytesWritten: o.bytes ?? RELEASE_MIN_BYTES } as BackendSyncResult);
  return { clock, log, release, sync, collections: () => collections };
}

describe('MemoryRelease', () => {
  it('collects once, a few seconds after a big full sync, and says so', () => {
    const t = setup();
    t.sync({});
    t.clock.advance(RELEASE_DELAY_MS - 1);
    expect(t.collections()).toBe(0);
    t.clock.advance(1);
    expect(t.collections()).toBe(1);
    expect(t.log.lines('info').join('\n')).toMatch(/gave memory back after a full sync/);
    t.clock.advance(10 * RELEASE_DELAY_MS);
    expect(t.collections()).toBe(1);
  });

  it('collects once for a burst of full syncs (both families, a retry), after the last', () => {
    const t = setup();
    t.sync({});
    t.clock.advance(RELEASE_DELAY_MS - 1000);
    t.sync({});
    t.clock.advance(RELEASE_DELAY_MS - 1);
    expect(t.collections()).toBe(0);
    t.clock.advance(1);
    expect(t.collections()).toBe(1);
  });

  it('leaves partial, small and failed syncs alone, and does nothing without a collector or once stopped', () => {
    const t = setup();
    t.sync({ full: false });
    t.sync({ bytes: RELEASE_MIN_BYTES - 1 });
    t.sync({ ok: false });
    t.clock.advance(10 * RELEASE_DELAY_MS);
    expect(t.collections()).toBe(0);
    t.sync({});
    t.release.stop();
    t.clock.advance(10 * RELEASE_DELAY_MS);
    expect(t.collections()).toBe(0);
    const none = setup(null);
    none.sync({});
    none.clock.advance(10 * RELEASE_DELAY_MS);
    expect(none.release.released).toBe(0);
  });

  it('collects once before the first sync when reading the sources left a big heap, and says so', () => {
    const clock = new FakeClock();
    const log = new MemoryLog();
    let heap = FIRST_SYNC_HEAP_BYTES;
    let collections = 0;
    const release = new MemoryRelease({ clock, logger: log.logger, collect: null, collectBeforeFirstSync: () => (collections++, (heap = 40 * 1024 * 1024)), heapUsed: () => heap });
    release.onSourcesSynced();
    expect(collections).toBe(1);
    expect(log.lines('info').join('\n')).toMatch(/collected the sources' garbage before the first sync .*heapMiB=64 afterMiB=40/);
    // The other family's loop, a resync: never again.
    heap = 2 * FIRST_SYNC_HEAP_BYTES;
    release.onSourcesSynced();
    expect(collections).toBe(1);
  });

  it('leaves a small heap alone before the first sync (the example cluster)', () => {
    let collections = 0;
    const release = new MemoryRelease({
      clock: new FakeClock(),
      logger: new MemoryLog().logger,
      collect: null,
      collectBeforeFirstSync: () => void collections++,
      heapUsed: () => FIRST_SYNC_HEAP_BYTES - 1,
    });
    release.onSourcesSynced();
    expect(collections).toBe(0);
  });
});

import { describe, expect, it } from 'vitest';
import { FakeClock, flushMicrotasks } from '../clock-fake.ts';
import { MemoryLog } from '../log.ts';
import { nodeReference } from './event-recorder.ts';
import { FakeEventSink } from './event-sink-fake.ts';
import { KubeEventRecorder, type KubeEventRecorderOptions } from './kube-event-recorder.ts';

const web = { kind: 'Service', name: 'web', namespace: 'shop', uid: 'u-web' };

function setup(opts: Partial<KubeEventRecorderOptions> = {}) {
  const clock = new FakeClock();
  const log = new MemoryLog();
  const sink = new FakeEventSink();
  const rec = new KubeEventRecorder({ sink, reportingInstance: 'node-a', clock, logger: log.logger, random: () => 0.5, ...opts });
  const ops = () => sink.calls.map((c) => `${c.op} ${c.namespace}/${c.name.replace(/\.[0-9a-f]+$/, '.*')}`);
  return { clock, log, sink, rec, ops };
}

describe('KubeEventRecorder', () => {
  it('writes a new event whole, in the namespace of the object (default for cluster-scoped ones)', async () => {
    const t = setup();
    t.rec.record(web, 'Warning', 'ServiceInvalid', 'Sync', 'port 0 is out of range');
    t.rec.record(nodeReference('node-a'), 'Normal', 'Starting', 'StartKubeProxy', '');
    await t.rec.flush();
    expect(t.ops()).toEqual(['create shop/web.*', 'create default/node-a.*']);
    expect([...t.sink.events.values()][0]).toMatchObject({
      apiVersion: 'events.k8s.io/v1',
      kind: 'Event',
      type: 'Warning',
      reason: 'ServiceInvalid',
      action: 'Sync',
      note: 'port 0 is out of range',
      reportingController: 'kproxy',
      reportingInstance: 'node-a',
      regarding: web,
      eventTime: '2026-01-01T00:00:00.000000Z',
    });
  });

  it('folds repeats into a series like client-go: count 2 at once, later counts when the series ends', async () => {
    const t = setup();
    t.rec.record(web, 'Warning', 'SyncFailed', 'Sync', 'first');
    await t.rec.flush();
    t.clock.advance(1000);
    t.rec.record(web, 'Warning', 'SyncFailed', 'Sync', 'second, different note');
    await t.rec.flush();
    for (let i = 0; i < 10; i++) t.rec.record(web, 'Warning', 'SyncFailed', 'Sync', 'again');
    await t.rec.flush();
    expect(t.ops()).toEqual(['create shop/web.*', 'patch shop/web.*']);
    expect(t.sink.calls[1].body).toEqual({ series: { count: 2, lastObservedTime: '2026-01-01T00:00:01.000000Z' } });

    // Six quiet minutes finish the series: its final count is written and it leaves the cache.
    await t.clock.advanceAsync(12 * 60_000);
    await t.rec.flush();
    expect(t.ops()).toEqual(['create shop/web.*', 'patch shop/web.*', 'patch shop/web.*']);
    expect([...t.sink.events.values()][0].series).toEqual({ count: 12, lastObservedTime: '2026-01-01T00:00:01.000000Z' });
    t.rec.record(web, 'Warning', 'SyncFailed', 'Sync', 'a new episode');
    await t.rec.flush();
    expect(t.ops().at(-1)).toBe('create shop/web.*');
    expect(t.rec.counters).toMatchObject({ recorded: 13, aggregated: 11, created: 2, patched: 2 });
  });

  it('keeps events about different objects, reasons or types apart', async () => {
    const t = setup();
    t.rec.record(web, 'Warning', 'SyncFailed', 'Sync', '');
    t.rec.record({ ...web, name: 'api', uid: 'u-api' }, 'Warning', 'SyncFailed', 'Sync', '');
    t.rec.record(web, 'Warning', 'ServiceInvalid', 'Sync', '');
    t.rec.record(web, 'Normal', 'SyncFailed', 'Sync', '');
    await t.rec.flush();
    expect(t.ops().filter((o) => o.startsWith('create'))).toHaveLength(4);
    expect(t.rec.counters.aggregated).toBe(0);
  });

  it('creates the event whole, series included, when the one to patch is gone', async () => {
    const t = setup();
    t.rec.record(web, 'Warning', 'SyncFailed', 'Sync', '');
    await t.rec.flush();
    t.sink.events.clear(); // expired on the server (Events have a TTL)
    t.rec.record(web, 'Warning', 'SyncFailed', 'Sync', '');
    await t.rec.flush();
    expect(t.ops()).toEqual(['create shop/web.*', 'patch shop/web.*', 'create shop/web.*']);
    expect([...t.sink.events.values()][0].series?.count).toBe(2);
  });

  it('retries an unreachable server with jittered pauses on the clock, then gives up, logs and moves on', async () => {
    const t = setup({ maxTries: 3 });
    t.sink.failNext('unreachable', 'unreachable', 'unreachable');
    t.rec.record(web, 'Warning', 'SyncFailed', 'Sync', 'lost');
    t.rec.record(nodeReference('node-a'), 'Normal', 'Starting', 'StartKubeProxy', '');
    await flushMicrotasks();
    expect(t.rec.counters.retries).toBe(1);
    expect(t.clock.nextTimerIn()).toBe(10_000); // 10 s, jittered by ±25% (random() = 0.5: none)
    await t.clock.advanceAsync(10_000);
    expect(t.rec.counters.retries).toBe(2);
    await t.clock.advanceAsync(10_000);
    await t.rec.flush();
    expect(t.rec.counters).toMatchObject({ failed: 1, created: 1, retries: 2 });
    expect(t.ops()).toEqual(['create shop/web.*', 'create shop/web.*', 'create shop/web.*', 'create default/node-a.*']);
    expect(t.log.lines('warn').join('\n')).toMatch(/Event SyncFailed on Service shop\/web not written after 3 attempts .*ECONNREFUSED/);
  });

  it('retries a 5xx but drops what the server refuses', async () => {
    const t = setup();
    t.sink.failNext({ status: 503 }, { status: 403 });
    t.rec.record(web, 'Warning', 'A', 'Sync', '');
    await flushMicrotasks();
    await t.clock.advanceAsync(10_000);
    await t.rec.flush();
    expect(t.rec.counters).toMatchObject({ retries: 1, failed: 1, created: 0 });
    expect(t.log.lines('warn').join('\n')).toMatch(/refused by the API server \(HTTP 403\)/);
  });

  it('never lets the queue grow past its bound: extra events are dropped and counted', async () => {
    const t = setup({ maxQueued: 2 });
    t.sink.failNext('unreachable');
    for (let i = 0; i < 5; i++) t.rec.record({ ...web, name: `svc-${i}` }, 'Warning', 'SyncFailed', 'Sync', '');
    expect(t.rec.counters.dropped).toBe(2); // one in flight, two queued
    await flushMicrotasks();
    await t.clock.advanceAsync(10_000);
    await t.rec.flush();
    expect(t.rec.counters.created).toBe(3);
  });

  it('cuts fields to the API limits instead of having the event refused', async () => {
    const t = setup();
    t.rec.record(web, 'Warning', 'R'.repeat(300), 'Sync', 'é'.repeat(1000));
    await t.rec.flush();
    const e = [...t.sink.events.values()][0];
    expect(e.reason.length).toBeLessThanOrEqual(128);
    expect(Buffer.byteLength(e.note)).toBeLessThanOrEqual(1024);
    expect(e.note.endsWith('...')).toBe(true);
  });

  it('does nothing after stop, and leaves no timer behind', () => {
    const t = setup();
    t.rec.stop();
    t.rec.record(web, 'Warning', 'SyncFailed', 'Sync', '');
    expect(t.rec.counters.recorded).toBe(0);
    expect(t.clock.pending).toBe(0);
  });
});

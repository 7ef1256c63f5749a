import { ListWatch } from '@kubernetes/client-node/dist/cache.js';
import { describe, expect, it } from 'vitest';
import { FakeClock, flushMicrotasks } from '../../clock-fake.ts';
import { MemoryLog } from '../../log.ts';
import { ResilientInformer } from './resilient-informer.ts';
import { FakeWatchClient } from './watch-fake.ts';

interface Obj {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
  spec?: { port: number };
}

const svc = (name: string, rv: string, port = 80): Obj => ({ metadata: { name, namespace: 'ns', resourceVersion: rv }, spec: { port } });

/** SpyListWatch is client-node's ListWatch, each instance kept so a test can read its cache. */
class SpyListWatch<T extends Obj & { metadata?: object }> extends ListWatch<T & { metadata?: object }> {
  static made: SpyListWatch<Obj>[] = [];
  constructor(...args: ConstructorParameters<typeof ListWatch<T & { metadata?: object }>>) {
    super(...args);
    SpyListWatch.made.push(this as never);
  }
}

function setup(initial: Obj[], opts: { onChange?: (prev: Obj | null, cur: Obj | null) => void; keep?: (o: unknown) => Obj } = {}) {
  const clock = new FakeClock();
  const log = new MemoryLog();
  const watch = new FakeWatchClient();
  const api = { items: initial, rv: '100', failures: [] as unknown[], lists: 0 };
  const changes: string[] = [];
  const delivered: (Obj | null)[] = [];
  let synced = 0;
  const inf = new ResilientInformer<Obj>({
    kind: 'Service',
    path: '/api/v1/services',
    list: async (keep) => {
      api.lists++;
      if (api.failures.length) throw api.failures.shift();
      return { metadata: { resourceVersion: api.rv }, items: structuredClone(api.items).map((o) => keep(o) as Obj) };
    },
    watch,
    ListWatch: SpyListWatch as typeof ListWatch,
    keep: opts.keep,
    server: 'https://api.example:6443',
    clock,
    logger: log.logger,
    random: () => 0.5,
    onChange: (prev, cur) => {
      const o = (cur ?? prev)!;
      changes.push(`${prev && cur ? 'update' : cur ? 'add' : 'delete'} ${o.metadata?.name} ${prev?.metadata?.resourceVersion ?? '-'}->${cur?.metadata?.resourceVersion ?? '-'}`);
      delivered.push(cur);
      opts.onChange?.(prev, cur);
    },
    onSynced: () => synced++,
  });
  return { clock, log, watch, api, changes, delivered, inf, synced: () => synced };
}

describe('ResilientInformer', () => {
  it('delivers the first list as adds, reports synced once, then watches from the list version', async () => {
    const t = setup([svc('a', '1'), svc('b', '2')]);
    t.inf.start();
    await flushMicrotasks();
    expect(t.changes).toEqual(['add a -->1', 'add b -->2']);
    expect(t.synced()).toBe(1);
    expect(t.watch.open).toHaveLength(1);
    expect(t.watch.calls[0].query).toMatchObject({ resourceVersion: '100', allowWatchBookmarks: true });
    expect(t.inf.status()).toMatchObject({ state: 'watching', synced: true, objects: 2 });
  });

  it('on relist delivers only what differs from what the handlers hold', async () => {
    const t = setup([svc('same', '1'), svc('changed', '2'), svc('removed', '3')]);
    t.inf.start();
    await flushMicrotasks();
    t.changes.length = 0;
    t.api.items = [svc('same', '1'), svc('changed', '7', 81), svc('added', '8')];
    t.api.rv = '200';
    t.inf.relist();
    await flushMicrotasks();
    expect(t.changes.sort()).toEqual(['add added -->8', 'delete removed 3->-', 'update changed 2->7']);
    expect(t.synced()).toBe(1);
    expect(t.inf.counters).toMatchObject({ lists: 2, relists: 1 });
    // The replaced watch is closed and a new one follows the new list.
    expect(t.watch.open.map((c) => c.query.resourceVersion)).toEqual(['200']);
  });

  it('ignores a watch event that repeats what was already delivered (same resourceVersion)', async () => {
    const t = setup([svc('a', '1')]);
    t.inf.start();
    await flushMicrotasks();
    const w = t.watch.open[0];
    w.emit('MODIFIED', svc('a', '1'));
    w.emit('MODIFIED', svc('a', '5', 90));
    expect(t.changes).toEqual(['add a -->1', 'update a 1->5']);
  });

  it('holds and delivers only what keep makes of each listed and watched object, before ListWatch caches it', async () => {
    const noSpec = (o: unknown) => ({ metadata: (o as Obj).metadata });
    const t = setup([svc('a', '1')], { keep: noSpec });
    t.inf.start();
    await flushMicrotasks();
    t.watch.open[0].emit('ADDED', svc('b', '2'));
    t.watch.open[0].emit('MODIFIED', svc('a', '3', 81));
    expect(t.delivered).toEqual([noSpec(svc('a', '1')), noSpec(svc('b', '2')), noSpec(svc('a', '3'))]);
    // client-node's own cache holds the very objects delivered: nothing holds the whole ones.
    const cached = SpyListWatch.made.at(-1)!.list();
    expect(cached).toEqual([noSpec(svc('a', '3')), noSpec(svc('b', '2'))]);
    expect(cached.every((o) => t.delivered.includes(o))).toBe(true);
  });

  it('drops objects without a name, counting them, and keeps delivering the others', async () => {
    const t = setup([svc('a', '1'), { metadata: { namespace: 'ns', resourceVersion: '2' } }]);
    t.inf.start();
    await flushMicrotasks();
    t.watch.open[0].emit('ADDED', { metadata: {} });
    t.watch.open[0].emit('ADDED', svc('b', '3'));
    expect(t.changes).toEqual(['add a -->1', 'add b -->3']);
    expect(t.inf.counters.malformed).toBe(2);
    expect(t.log.lines('warn').filter((l) => l.includes('object without metadata.name ignored'))).toHaveLength(2);
  });

  it('survives a handler that throws: the failure is counted and logged, later changes still arrive', async () => {
    const t = setup([], {
      onChange: (_p, cur) => {
        if (cur?.metadata?.name === 'bad') throw new Error('tracker bug');
      },
    });
    t.inf.start();
    await flushMicrotasks();
    t.watch.open[0].emit('ADDED', svc('bad', '1'));
    t.watch.open[0].emit('ADDED', svc('good', '2'));
    expect(t.changes).toEqual(['add bad -->1', 'add good -->2']);
    expect(t.inf.counters.handlerErrors).toBe(1);
    expect(t.log.lines('error').join('\n')).toMatch(/Services change handler failed error="tracker bug"/);
  });

  it('retries a failing list with growing jittered backoff on the clock, and resets after success', async () => {
    const t = setup([svc('a', '1')]);
    t.api.failures.push(new Error('connect ECONNREFUSED'), new Error('connect ECONNREFUSED'), new Error('connect ECONNREFUSED'));
    t.inf.start();
    await flushMicrotasks();
    expect(t.inf.status().state).toBe('backoff');
    const waits: number[] = [];
    while (t.api.lists < 4) {
      waits.push(t.clock.nextTimerIn()!);
      await t.clock.advanceAsync(t.clock.nextTimerIn()!);
    }
    expect(waits).toEqual([600, 1200, 2400]); // 800ms doubling, a quarter off with random() = 0.5
    expect(t.changes).toEqual(['add a -->1']);
    expect(t.inf.counters).toMatchObject({ errors: 3, restarts: 3, lists: 1 });
    expect(t.log.lines('warn')[0]).toMatch(
      /Services: cannot list yet, retrying in 0\.6s .*error="listing Services from https:\/\/api.example:6443 failed \[KPROXY_ERR_LIST_FAILED\]: connect ECONNREFUSED"/,
    );
    expect(t.log.lines('info').join('\n')).toMatch(/Services watch connected again .*failedAttempts=3/);
    expect(t.inf.status().lastError).toBeUndefined(); // recovered

    // After a success the next failure starts again from the first delay.
    t.watch.open[0].end(new Error('socket hang up'));
    expect(t.clock.nextTimerIn()).toBe(600);
  });

  it('treats a watch() that rejects like a failed watch and resumes from the last version', async () => {
    const t = setup([svc('a', '1')]);
    t.inf.start();
    await flushMicrotasks();
    t.watch.open[0].emit('MODIFIED', svc('a', '120'));
    t.watch.throwNext(new Error('exec credential plugin failed'));
    t.watch.open[0].end(); // clean end: client-node reconnects at once, and that watch() rejects
    await flushMicrotasks();
    expect(t.inf.counters.errors).toBe(1);
    await t.clock.advanceAsync(t.clock.nextTimerIn()!);
    expect(t.watch.open.map((c) => c.query.resourceVersion)).toEqual(['120']);
    expect(t.api.lists).toBe(1);
  });

  it('logs and counts an ERROR line other than 410, and resumes from its version', async () => {
    const t = setup([svc('a', '1')]);
    t.inf.start();
    await flushMicrotasks();
    t.watch.open[0].emit('ERROR', { kind: 'Status', code: 500, message: 'etcd leader changed' });
    t.watch.open[0].end();
    await flushMicrotasks();
    expect(t.inf.counters.errors).toBe(1);
    expect(t.log.lines('warn').join('\n')).toMatch(/Services watch returned an error: etcd leader changed/);
    expect(t.watch.open.map((c) => c.query.resourceVersion)).toEqual(['100']);
    expect(t.api.lists).toBe(1);
  });

  it('does not relist for quietness while it is backing off from errors', async () => {
    const t = setup([svc('a', '1')]);
    t.inf.start();
    await flushMicrotasks();
    for (let i = 0; i < 100; i++) t.watch.failNext(new Error('connection refused'));
    t.watch.open[0].end(new Error('socket hang up'));
    await t.clock.advanceAsync(2 * 600_000 + 5_000); // twice the default quiet limit, all of it failing
    expect(t.inf.status().state).toBe('backoff');
    expect(t.inf.counters.errors).toBeGreaterThan(40);
    expect(t.inf.counters.quietRelists).toBe(0);
    expect(t.api.lists).toBe(1); // restarts resume the watch; only a 410 or quietness relists
  });
});

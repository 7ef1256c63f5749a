import { describe, expect, it } from 'vitest';
import { overview, summary, sync } from '../testing/fixtures.ts';
import type { ServerMessage } from './protocol.ts';
import { DashboardStore, mergeServices } from './store.svelte.ts';

const snapshot = (over: Partial<Extract<ServerMessage, { type: 'snapshot' }>> = {}): ServerMessage => ({
  type: 'snapshot',
  seq: 1,
  viewer: { authMode: 'token', user: 'token', canAct: true },
  overview: overview(),
  services: [summary('a/one'), summary('b/two')],
  syncs: [sync(1)],
  events: [],
  drift: { checkedAt: null, total: 0, findings: [] },
  lastAction: null,
  ...over,
});

describe('DashboardStore', () => {
  it('takes a snapshot whole, then merges sync deltas into the sorted service list', () => {
    const s = new DashboardStore();
    s.apply(snapshot());
    expect(s.services.map((x) => x.key)).toEqual(['a/one', 'b/two']);
    expect(s.lastSync?.seq).toBe(1);
    s.apply({ type: 'sync', seq: 2, sync: sync(2), overview: overview(), services: [summary('a/one', { warnings: ['no-endpoints'] }), summary('a/zero')], removed: ['b/two'] });
    expect(s.services.map((x) => x.key)).toEqual(['a/one', 'a/zero']);
    expect(s.services[0].warnings).toEqual(['no-endpoints']);
    expect(s.syncs.map((x) => x.seq)).toEqual([1, 2]);
    expect(s.lastSync?.seq).toBe(2);
  });

  it('moves the download mark to the newest sync that has one', () => {
    const s = new DashboardStore();
    s.apply(snapshot({ syncs: [sync(1, { input: 'last' }), sync(2, { ok: false, input: 'failed' })] }));
    s.apply({ type: 'sync', seq: 2, sync: sync(3, { input: 'last' }), overview: overview(), services: [], removed: [] });
    expect(s.syncs.map((x) => x.input)).toEqual([undefined, 'failed', 'last']);
  });

  it('counts failures and keeps the paused flag of actions', () => {
    const s = new DashboardStore();
    s.apply(snapshot({ syncs: [sync(1), sync(2, { ok: false })] }));
    expect(s.failures).toBe(1);
    s.apply({ type: 'action', seq: 2, result: { action: 'pause', ok: true, at: 1, user: 'token', message: 'paused', paused: true } });
    expect(s.overview?.paused).toBe(true);
    expect(s.lastAction?.action).toBe('pause');
  });

  it('keeps the watched service page and drops counters of another service', () => {
    const s = new DashboardStore();
    s.apply({ type: 'counters', seq: 1, overview: overview(), drift: { checkedAt: 1, total: 0, findings: [] }, watched: { service: 'a/one', chains: [] } });
    s.apply({ type: 'service', seq: 2, key: 'b/two', detail: null });
    expect(s.detail).toEqual({ key: 'b/two', detail: null });
    expect(s.counters).toBeNull();
  });

  it("estimates the server's clock from the overview", () => {
    const s = new DashboardStore();
    s.apply(snapshot({ overview: overview({ now: 5_000 }) }), 100);
    expect(s.serverNow(1100)).toBe(6_000);
  });
});

describe('mergeServices', () => {
  it('inserts, replaces and removes by key, keeping order, without touching the input', () => {
    const list = ['b', 'd', 'f'].map((k) => summary(`ns/${k}`));
    const out = mergeServices(list, [summary('ns/a'), summary('ns/e'), summary('ns/d', { type: 'NodePort' })], ['ns/f', 'ns/x']);
    expect(out.map((s) => s.key)).toEqual(['ns/a', 'ns/b', 'ns/d', 'ns/e']);
    expect(out[2].type).toBe('NodePort');
    expect(list.map((s) => s.key)).toEqual(['ns/b', 'ns/d', 'ns/f']);
  });
});

import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../clock-fake.ts';
import type { IpvsService } from '../../kernel/ipvs-batch.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { GracefulTermination, RS_CHECK_INTERVAL_MS, RS_GRACEFUL_TIMEOUT_MS } from './graceful-termination.ts';
import { ipvsHarness } from './testing.ts';

const VS = '10.96.0.1:80/TCP';
const lines = (batch: string | undefined) => (batch ?? '').split('\n').filter((l) => l !== '');

function twoEndpoints(protocol = 'TCP') {
  const ports = [{ name: 'http', port: 80, protocol }];
  const slice = (ips: string[]) =>
    makeSlice(
      'ns1',
      'a',
      'a-1',
      ips.map((ip) => ep(ip, { nodeName: 'node-b' })),
      [{ name: 'http', port: 8080, protocol }],
    );
  const state = stateFromObjects('node-a', [makeService('ns1', 'a', { clusterIP: '10.96.0.1', ports }), slice(['10.244.1.1', '10.244.1.2'])]);
  return {
    state,
    shrink: () => state.onEndpointSlice(slice(['10.244.1.1', '10.244.1.2']), slice(['10.244.1.1'])),
    regrow: () => state.onEndpointSlice(slice(['10.244.1.1']), slice(['10.244.1.1', '10.244.1.2'])),
  };
}

describe('graceful termination in syncs (injected clock)', () => {
  it('drains a removed TCP real server with weight 0 and deletes it once its connections are gone', async () => {
    const h = ipvsHarness();
    const { state, shrink } = twoEndpoints();
    await h.sync(state);
    shrink();
    await h.sync(state);
    expect(lines(h.ipvs.restores.at(-1))).toEqual(['-e -t 10.96.0.1:80 -r 10.244.1.2:8080 -m -w 0']);
    expect(h.backend.draining().map((d) => `${d.rs.address}:${d.rs.port}`)).toEqual(['10.244.1.2:8080']);

    // First check at the next sync: connections are still open, so it stays.
    h.ipvs.setConnections(VS, '10.244.1.2:8080', 2, 5);
    h.clock.advance(1_000);
    const restores = h.ipvs.restores.length;
    await h.sync(state);
    expect(h.ipvs.calls.at(-1)?.op).toBe('list');
    expect(h.ipvs.restores).toHaveLength(restores);
    expect(h.backend.draining()[0]).toMatchObject({ activeConns: 2, inactiveConns: 5 });

    // Within the check interval, syncs read the plain listing only.
    h.ipvs.setConnections(VS, '10.244.1.2:8080', 0, 0);
    h.clock.advance(RS_CHECK_INTERVAL_MS - 1_001);
    await h.sync(state);
    expect(h.ipvs.calls.filter((c) => c.op === 'list')).toHaveLength(1);
    expect(h.backend.draining()).toHaveLength(1);

    // At the next check the drained real server goes.
    h.clock.advance(1_001);
    await h.sync(state);
    expect(lines(h.ipvs.restores.at(-1))).toEqual(['-d -t 10.96.0.1:80 -r 10.244.1.2:8080']);
    expect(h.backend.draining()).toEqual([]);
    expect(h.ipvs.saveText()).not.toContain('10.244.1.2');
  });

  it('deletes a draining real server after the timeout even with connections', async () => {
    const h = ipvsHarness();
    const { state, shrink } = twoEndpoints();
    await h.sync(state);
    shrink();
    await h.sync(state);
    h.ipvs.setConnections(VS, '10.244.1.2:8080', 1, 0);
    for (let t = 0; t < RS_GRACEFUL_TIMEOUT_MS - RS_CHECK_INTERVAL_MS; t += RS_CHECK_INTERVAL_MS) {
      h.clock.advance(RS_CHECK_INTERVAL_MS);
      await h.sync(state);
      expect(h.backend.draining(), `at ${t / 60_000} min`).toHaveLength(1);
    }
    h.clock.advance(RS_CHECK_INTERVAL_MS);
    await h.sync(state);
    expect(lines(h.ipvs.restores.at(-1))).toEqual(['-d -t 10.96.0.1:80 -r 10.244.1.2:8080']);
    expect(h.backend.draining()).toEqual([]);
  });

  it('deletes UDP real servers at once: no graceful termination for UDP and SCTP', async () => {
    const h = ipvsHarness();
    const { state, shrink } = twoEndpoints('UDP');
    await h.sync(state);
    shrink();
    await h.sync(state);
    expect(lines(h.ipvs.restores.at(-1))).toEqual(['-d -u 10.96.0.1:80 -r 10.244.1.2:8080']);
    expect(h.backend.draining()).toEqual([]);
  });

  it('puts a draining real server back to weight 1 when its endpoint returns', async () => {
    const h = ipvsHarness();
    const { state, shrink, regrow } = twoEndpoints();
    await h.sync(state);
    shrink();
    await h.sync(state);
    regrow();
    await h.sync(state);
    expect(lines(h.ipvs.restores.at(-1))).toEqual(['-e -t 10.96.0.1:80 -r 10.244.1.2:8080 -m -w 1']);
    expect(h.backend.draining()).toEqual([]);
  });

  it('deletes drained real servers of unchanged services during a partial sync of another service', async () => {
    const h = ipvsHarness();
    const { state, shrink } = twoEndpoints();
    await h.sync(state);
    shrink();
    await h.sync(state);
    h.clock.advance(RS_CHECK_INTERVAL_MS);
    state.onService(null, makeService('ns1', 'z', { clusterIP: '10.96.0.9', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }));
    const r = await h.sync(state);
    expect(r.full).toBe(false);
    expect(lines(h.ipvs.restores.at(-1))).toEqual(['-A -t 10.96.0.9:80 -s rr', '-d -t 10.96.0.1:80 -r 10.244.1.2:8080']);
  });

  it('starts draining only when the batch applied', async () => {
    const h = ipvsHarness();
    const { state, shrink } = twoEndpoints();
    await h.sync(state);
    shrink();
    h.ipvs.failNext = 'Memory allocation problem';
    const r = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(r.error).toBeDefined();
    expect(h.backend.draining()).toEqual([]);
    // The retry (full) sees the real server still at weight 1 and drains it then.
    await h.sync(state);
    expect(lines(h.ipvs.restores.at(-1))).toEqual(['-e -t 10.96.0.1:80 -r 10.244.1.2:8080 -m -w 0']);
    expect(h.backend.draining()).toHaveLength(1);
  });
});

describe('GracefulTermination', () => {
  const listing = (active: number, inactive: number): Map<string, IpvsService> =>
    new Map([
      [
        VS,
        {
          protocol: 'TCP',
          address: '10.96.0.1',
          port: 80,
          scheduler: 'rr',
          persistence: 0,
          schedFlags: [],
          reals: [{ address: '10.244.1.2', port: 8080, weight: 0, forward: 'masq', activeConns: active, inactiveConns: inactive }],
        },
      ],
    ]);
  const vs = { protocol: 'TCP', address: '10.96.0.1', port: 80 } as const;
  const rs = { address: '10.244.1.2', port: 8080 };

  it('is due at once for a new entry, then every check interval', () => {
    const clock = new FakeClock();
    const g = new GracefulTermination({ clock, checkIntervalMs: 10_000, timeoutMs: 60_000 });
    expect(g.due()).toBe(false);
    g.add(vs, rs);
    expect(g.due()).toBe(true);
    expect(g.sweep(listing(1, 0))).toEqual([]);
    clock.advance(9_999);
    expect(g.due()).toBe(false);
    clock.advance(1);
    expect(g.due()).toBe(true);
  });

  it('counts inactive connections too, and forgets real servers that vanished', () => {
    const clock = new FakeClock();
    const g = new GracefulTermination({ clock });
    g.add(vs, rs);
    expect(g.sweep(listing(0, 3))).toEqual([]);
    expect(g.sweep(listing(0, 0))).toEqual([{ vs, rs, reason: 'drained' }]);
    g.add(vs, rs);
    expect(g.sweep(new Map())).toEqual([]);
    expect(g.size).toBe(0);
  });

  it('times out', () => {
    const clock = new FakeClock();
    const g = new GracefulTermination({ clock, timeoutMs: 60_000 });
    g.add(vs, rs);
    clock.advance(59_999);
    expect(g.sweep(listing(4, 0))).toEqual([]);
    clock.advance(1);
    expect(g.sweep(listing(4, 0))).toEqual([{ vs, rs, reason: 'timeout' }]);
  });
});

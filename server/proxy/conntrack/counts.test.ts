import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../clock-fake.ts';
import { Conntrack } from '../../kernel/conntrack.ts';
import { SimulatedConntrack, natFlow } from '../../kernel/conntrack-simulated.ts';
import { SimulatedSysctl } from '../../kernel/sysctl-simulated.ts';
import { ConntrackCounts, type ConntrackCountsOptions } from './counts.ts';

function setup(opts: Partial<ConntrackCountsOptions> = {}) {
  const clock = new FakeClock();
  const table = new SimulatedConntrack();
  for (let i = 0; i < 5; i++) table.add(natFlow({ client: '10.0.0.2', clientPort: 1000 + i, vip: '10.96.0.10', port: 53, endpoint: '10.244.1.5' }));
  table.add(natFlow({ protocol: 'tcp', client: '10.0.0.2', clientPort: 2000, vip: '10.96.0.10', port: 53, endpoint: '10.244.1.5' }));
  table.add(natFlow({ client: '10.0.0.2', clientPort: 3000, vip: '10.96.0.10', port: 54, endpoint: '10.244.1.5' }));
  const sysctl = new SimulatedSysctl({ 'net/netfilter/nf_conntrack_count': '7', 'net/netfilter/nf_conntrack_max': '262144' });
  const counts = new ConntrackCounts({ conntrack: new Conntrack(table), sysctl, clock, ...opts });
  const listings = () => table.calls.filter((c) => c[0] === '-L').length;
  return { clock, table, sysctl, counts, listings };
}

describe('ConntrackCounts', () => {
  it('counts the flows of one frontend by protocol, address and port', async () => {
    const { counts, table } = setup();
    expect(await counts.countForService('10.96.0.10', 53, 'UDP')).toMatchObject({ vip: '10.96.0.10', port: 53, protocol: 'UDP', count: 5, cached: false });
    expect(await counts.countForService('10.96.0.10', 53, 'tcp')).toMatchObject({ protocol: 'TCP', count: 1 });
    expect(table.calls[0]).toEqual(['-L', '-f', 'ipv4', '-p', 'udp', '--orig-dst', '10.96.0.10', '--orig-port-dst', '53']);
  });

  it('lists a frontend at most once per interval; callers in between get the cached count', async () => {
    const { counts, clock, listings, table } = setup({ serviceIntervalMs: 5000 });
    await counts.countForService('10.96.0.10', 53, 'UDP');
    table.add(natFlow({ client: '10.0.0.9', clientPort: 9, vip: '10.96.0.10', port: 53, endpoint: '10.244.1.5' }));
    clock.advance(4999);
    expect(await counts.countForService('10.96.0.10', 53, 'UDP')).toMatchObject({ count: 5, cached: true });
    expect(listings()).toBe(1);
    clock.advance(1);
    expect(await counts.countForService('10.96.0.10', 53, 'UDP')).toMatchObject({ count: 6, cached: false });
    expect(listings()).toBe(2);
  });

  it('shares one listing between concurrent callers, runs listings one at a time, and refuses a burst', async () => {
    const { counts, listings } = setup({ maxQueued: 2 });
    const a = counts.countForService('10.96.0.10', 53, 'UDP');
    const b = counts.countForService('10.96.0.10', 53, 'UDP');
    const c = counts.countForService('10.96.0.10', 54, 'UDP');
    await expect(counts.countForService('10.96.0.10', 55, 'UDP')).rejects.toMatchObject({ code: 'KPROXY_ERR_RATE_LIMITED' });
    expect((await a).count).toBe(5);
    expect(await b).toEqual(await a);
    expect((await c).count).toBe(1);
    expect(listings()).toBe(2);
    // The queue drained: new requests are taken again.
    expect((await counts.countForService('10.96.0.10', 55, 'UDP')).count).toBe(0);
  });

  it('forgets the least recently listed frontends beyond maxCached', async () => {
    const { counts, listings } = setup({ maxCached: 2 });
    for (const port of [53, 54, 55]) await counts.countForService('10.96.0.10', port, 'UDP');
    await counts.countForService('10.96.0.10', 55, 'UDP');
    expect(listings()).toBe(3);
    await counts.countForService('10.96.0.10', 53, 'UDP');
    expect(listings()).toBe(4);
  });

  it('counts an IPv6 frontend in the IPv6 conntrack table, by its canonical address', async () => {
    const { counts, table } = setup();
    expect(await counts.countForService('FD00:0::A', 53, 'UDP')).toMatchObject({ vip: 'fd00::a', count: 0 });
    expect(table.calls[0]).toEqual(['-L', '-f', 'ipv6', '-p', 'udp', '--orig-dst', 'fd00::a', '--orig-port-dst', '53']);
  });

  it('refuses frontends that are not valid, before running anything', async () => {
    const { counts, table } = setup();
    for (const [vip, port, proto] of [
      ['fd00::1::2', 53, 'UDP'],
      ['10.96.0.10; rm -rf /', 53, 'UDP'],
      ['10.96.0.10', 0, 'UDP'],
      ['10.96.0.10', 53, 'ICMP'],
    ] as const) {
      await expect(counts.countForService(vip, port, proto)).rejects.toMatchObject({ code: 'KPROXY_ERR_CONNTRACK' });
    }
    expect(table.calls).toEqual([]);
  });

  it('a failed listing reaches its caller only; the next one runs', async () => {
    const { counts, table } = setup();
    table.onCall = () => {
      throw new Error('conntrack: Operation not permitted');
    };
    await expect(counts.countForService('10.96.0.10', 53, 'UDP')).rejects.toThrow('Operation not permitted');
    expect(counts.listingErrorsTotal).toBe(1);
    table.onCall = null;
    expect((await counts.countForService('10.96.0.10', 53, 'UDP')).count).toBe(5);
    expect(counts.listingErrorsTotal).toBe(1);
  });

  it('reads the node total and limit from /proc, at most once a second, and says null when unreadable', async () => {
    const { counts, sysctl, clock } = setup();
    expect(await counts.node()).toEqual({ entries: 7, max: 262144, at: clock.now() });
    sysctl.values.set('net/netfilter/nf_conntrack_count', '8');
    clock.advance(999);
    expect((await counts.node()).entries).toBe(7);
    clock.advance(1);
    expect((await counts.node()).entries).toBe(8);
    const none = new ConntrackCounts({ conntrack: new Conntrack(new SimulatedConntrack()), sysctl: new SimulatedSysctl(), clock });
    const unreadable = await none.node();
    expect(unreadable).toMatchObject({ entries: null, max: null });
    // The reason travels with the nulls: the dashboard shows it.
    expect(unreadable.error).toMatch(/cannot read sysctl net\/netfilter\/nf_conntrack_count/);
  });
});

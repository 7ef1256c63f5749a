import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../clock-fake.ts';
import { Conntrack } from '../../kernel/conntrack.ts';
import { SimulatedConntrack, natFlow, plainFlow } from '../../kernel/conntrack-simulated.ts';
import { MemoryLog } from '../../log.ts';
import { makeService, makeSlice, ep } from '../testing.ts';
import { ConntrackCleaner, type CleanupRun, type ConntrackCleanerOptions } from './cleaner.ts';
import { blackholeFlows, brief, DNS, dnsFlows, dnsService, dnsSlice, newState, NO_RESULT, NODE_IP, SYSLOG, syncRecord, syslogService, syslogSlice } from './testing.ts';

function setup(opts: Partial<ConntrackCleanerOptions> = {}) {
  const clock = new FakeClock();
  const table = new SimulatedConntrack();
  const log = new MemoryLog();
  const runs: CleanupRun[] = [];
  // The full reconcile has its own tests; the targeted ones run without it unless asked.
  const cleaner = new ConntrackCleaner({ conntrack: new Conntrack(table), family: 'IPv4', clock, logger: log.logger, reconcileIntervalMs: 0, onRun: (r) => runs.push(r), ...opts });
  const state = newState(clock);
  let seq = 0;
  const sync = (ok = true) => cleaner.onSync(syncRecord(ok, ++seq), state.checkout(), NO_RESULT);
  /** settle lets the passes of what is queued run, then forgets them: tests look at what comes after. */
  const settle = async () => {
    await clock.advanceAsync(60_000);
    table.calls.length = 0;
    runs.length = 0;
  };
  return { clock, table, log, runs, cleaner, state, sync, settle };
}

/** flows to syslog through the endpoint address that dns also used: they must survive dns's cleanup. */
const syslogFlow = (endpoint: string) => natFlow({ client: '10.0.0.3', clientPort: 45000, vip: SYSLOG.clusterIP, port: SYSLOG.port, endpoint });

describe('ConntrackCleaner, targeted deletions', () => {
  it('deletes the flows of a replaced endpoint through cluster IP, external IP, LB IP and node port; others survive', async () => {
    const { clock, table, cleaner, state, sync, runs, settle } = setup();
    state.onService(null, dnsService());
    state.onService(null, syslogService());
    state.onEndpointSlice(null, dnsSlice('10.244.1.5', '10.244.2.6'));
    state.onEndpointSlice(null, syslogSlice('10.244.1.5'));
    sync();
    await settle();
    table.add(...dnsFlows('10.244.1.5'), ...dnsFlows('10.244.2.6', 42000), syslogFlow('10.244.1.5'));
    table.add(natFlow({ protocol: 'tcp', client: '10.0.0.2', clientPort: 43000, vip: DNS.clusterIP, port: 53, endpoint: '10.244.1.5' }));

    state.onEndpointSlice(null, dnsSlice('10.244.2.6', '10.244.3.7'));
    sync();
    // The observer only queued work: no process ran during the sync.
    expect(table.deletions).toHaveLength(0);
    await clock.advanceAsync(0);
    expect(brief(table.flows())).toEqual(
      [
        'tcp 10.96.0.10:53>10.244.1.5',
        'udp 10.96.0.10:53>10.244.2.6',
        'udp 10.96.0.20:514>10.244.1.5',
        'udp 192.0.2.10:53>10.244.2.6',
        `udp ${NODE_IP}:30053>10.244.2.6`,
        'udp 203.0.113.10:53>10.244.2.6',
      ].sort(),
    );
    expect(table.deletions.map((a) => a.slice(1).join(' ')).sort()).toEqual([
      '-f ipv4 -p udp --orig-dst 10.96.0.10 --orig-port-dst 53 --reply-src 10.244.1.5',
      '-f ipv4 -p udp --orig-dst 192.0.2.10 --orig-port-dst 53 --reply-src 10.244.1.5',
      '-f ipv4 -p udp --orig-dst 203.0.113.10 --orig-port-dst 53 --reply-src 10.244.1.5',
      '-f ipv4 -p udp --orig-port-dst 30053 --reply-src 10.244.1.5',
    ]);
    expect(runs.at(-1)).toMatchObject({ deleted: 4, processes: 4, errors: 0, remaining: 0 });
    expect(cleaner.status()).toMatchObject({ enabled: true, pending: 0 });
  });

  it('deletes the flows of an endpoint that is no longer serving', async () => {
    const { clock, table, state, sync, settle } = setup();
    state.onService(null, syslogService());
    state.onEndpointSlice(null, syslogSlice('10.244.1.5', '10.244.2.6'));
    sync();
    await settle();
    table.add(syslogFlow('10.244.1.5'), syslogFlow('10.244.2.6'));
    state.onEndpointSlice(
      null,
      makeSlice('logging', 'syslog', 'syslog-1', [ep('10.244.1.5', { ready: false, serving: false, terminating: true }), ep('10.244.2.6')], [{ name: 'syslog', port: 514, protocol: 'UDP' }]),
    );
    sync();
    await clock.advanceAsync(0);
    expect(brief(table.flows())).toEqual(['udp 10.96.0.20:514>10.244.2.6']);
  });

  it('a UDP service that gets its first endpoint loses the entries made while it had none; DNATed flows stay', async () => {
    const { clock, table, state, sync, settle } = setup();
    state.onService(null, dnsService());
    state.onService(null, syslogService());
    state.onEndpointSlice(null, syslogSlice('10.244.1.5'));
    sync();
    await settle();
    table.add(...blackholeFlows(), syslogFlow('10.244.1.5'), plainFlow({ client: '10.0.0.2', clientPort: 41002, dst: '198.51.100.7', port: 53 }));
    state.onEndpointSlice(null, dnsSlice('10.244.2.6'));
    sync();
    // A client whose packet already went through the new rules before the cleanup ran.
    table.add(natFlow({ client: '10.0.0.4', clientPort: 41003, vip: DNS.clusterIP, port: DNS.port, endpoint: '10.244.2.6' }));
    await clock.advanceAsync(5000);
    expect(brief(table.flows())).toEqual(['udp 10.96.0.10:53>10.244.2.6', 'udp 10.96.0.20:514>10.244.1.5', 'udp 198.51.100.7:53>198.51.100.7']);
    // One listing checks the three VIP frontends and finds the node port's unNATed entry; only the two
    // frontends that had such entries cost a deletion (conntrack walks the table for each).
    expect(table.calls.map((c) => c[0])).toEqual(['-L', '-D', '-D']);
  });

  it('a deleted UDP service loses the flows to its cluster IP and, through the ports it had, to its endpoints', async () => {
    const { clock, table, state, sync, settle } = setup();
    state.onService(null, dnsService());
    state.onService(null, syslogService());
    state.onEndpointSlice(null, dnsSlice('10.244.1.5'));
    state.onEndpointSlice(null, syslogSlice('10.244.1.5'));
    sync();
    await settle();
    table.add(...dnsFlows('10.244.1.5'), syslogFlow('10.244.1.5'));
    state.onService(dnsService(), null);
    state.onEndpointSlice(dnsSlice('10.244.1.5'), null);
    sync();
    await clock.advanceAsync(0);
    expect(brief(table.flows())).toEqual(['udp 10.96.0.20:514>10.244.1.5']);
  });

  it('holds deletions while syncs fail (the old rules would make the entries again) and runs them after a good one', async () => {
    const { clock, table, state, sync, settle } = setup();
    state.onService(null, syslogService());
    state.onEndpointSlice(null, syslogSlice('10.244.1.5', '10.244.2.6'));
    sync();
    await settle();
    table.add(syslogFlow('10.244.1.5'));
    state.onEndpointSlice(null, syslogSlice('10.244.2.6'));
    sync(false);
    await clock.advanceAsync(60_000);
    expect(table.deletions).toHaveLength(0);
    sync(true);
    await clock.advanceAsync(0);
    expect(table.flows()).toEqual([]);
  });

  it('coalesces: what syncs queue while a pass runs joins that pass, and duplicates run once', async () => {
    const { clock, table, state, sync, runs, settle } = setup({ pauseMs: 500 });
    state.onService(null, syslogService());
    state.onEndpointSlice(null, syslogSlice('10.244.1.1', '10.244.1.2', '10.244.1.3'));
    sync();
    await settle();
    let midPass = false;
    table.onCall = () => {
      if (midPass) return;
      midPass = true;
      // A sync lands while the first deletion runs.
      state.onEndpointSlice(null, syslogSlice('10.244.1.3'));
      sync();
    };
    state.onEndpointSlice(null, syslogSlice('10.244.1.2', '10.244.1.3'));
    sync();
    // Three syncs before any pass: one pass, one deletion per distinct filter.
    state.onEndpointSlice(null, syslogSlice('10.244.1.1', '10.244.1.2', '10.244.1.3'));
    sync();
    state.onEndpointSlice(null, syslogSlice('10.244.1.2', '10.244.1.3'));
    sync();
    await clock.advanceAsync(0);
    await clock.advanceAsync(5000);
    expect(runs.map((r) => r.processes)).toEqual([2]);
    expect(table.deletions.map((a) => a.at(-1))).toEqual(['10.244.1.1', '10.244.1.2']);
  });
});

describe('ConntrackCleaner, bounds', () => {
  /** manyStale makes n distinct stale endpoints of syslog in one sync. */
  async function manyStale(s: ReturnType<typeof setup>, n: number) {
    const ips = Array.from({ length: n }, (_, i) => `10.244.${Math.floor(i / 250)}.${(i % 250) + 1}`);
    s.state.onService(null, syslogService());
    s.state.onEndpointSlice(null, syslogSlice(...ips, '10.250.0.1'));
    s.sync();
    await s.settle();
    for (const ip of ips) s.table.add(syslogFlow(ip));
    s.state.onEndpointSlice(null, syslogSlice('10.250.0.1'));
    s.sync();
  }

  it('starts at most maxProcessesPerRun processes per pass and pauses between passes', async () => {
    const s = setup({ maxProcessesPerRun: 10, pauseMs: 1000 });
    await manyStale(s, 25);
    await s.clock.advanceAsync(0);
    expect(s.runs.map((r) => [r.processes, r.remaining])).toEqual([[10, 15]]);
    await s.clock.advanceAsync(999);
    expect(s.runs).toHaveLength(1);
    await s.clock.advanceAsync(1);
    await s.clock.advanceAsync(1000);
    expect(s.runs.map((r) => [r.processes, r.remaining])).toEqual([
      [10, 15],
      [10, 5],
      [5, 0],
    ]);
  });

  it('stops starting processes when a pass has used its time budget', async () => {
    const s = setup({ runBudgetMs: 5000, pauseMs: 1000 });
    s.table.onCall = (args) => {
      if (args[0] === '-D') s.clock.advance(2000);
    };
    await manyStale(s, 7);
    await s.clock.advanceAsync(0);
    expect(s.runs.map((r) => r.processes)).toEqual([3]);
    expect(s.runs[0].seconds).toBe(6);
  });

  it('caps the queue; what does not fit is counted and found again by a full reconcile', async () => {
    const s = setup({ maxPending: 8, maxProcessesPerRun: 100, reconcileIntervalMs: 3_600_000 });
    await manyStale(s, 20);
    expect(s.cleaner.status()).toMatchObject({ pending: 8, droppedTotal: 12 });
    await s.clock.advanceAsync(10_000);
    expect(s.table.flows()).toEqual([]);
    // Each pass lists once: 8 queued + 12 found, 8 at a time.
    expect(s.table.calls.filter((c) => c[0] === '-L')).toHaveLength(3);
    expect(s.table.deletions).toHaveLength(20);
  });

  it('retries a failing deletion a few times, counts and logs each failure, and never throws', async () => {
    const s = setup({ maxAttempts: 3, pauseMs: 100 });
    s.state.onService(null, syslogService());
    s.state.onEndpointSlice(null, syslogSlice('10.244.1.5', '10.244.2.6'));
    s.sync();
    await s.settle();
    s.table.onCall = () => {
      throw new Error('netlink: Operation not permitted');
    };
    s.state.onEndpointSlice(null, syslogSlice('10.244.2.6'));
    s.sync();
    await s.clock.advanceAsync(1000);
    expect(s.table.deletions).toHaveLength(3);
    expect(s.cleaner.status()).toMatchObject({ enabled: true, errorsTotal: 3, pending: 0 });
    expect(s.log.lines('error')).toHaveLength(3);
    expect(s.log.lines('error')[0]).toContain('deleting stale conntrack flows failed filter="udp to 10.96.0.20:514 answered by 10.244.1.5" attempt=1 retry=true');
  });

  it('a missing conntrack binary disables the cleaner with one warning, visible in its status', async () => {
    const s = setup();
    s.table.missing = true;
    s.state.onService(null, syslogService());
    s.state.onEndpointSlice(null, syslogSlice('10.244.1.5', '10.244.2.6'));
    s.sync();
    await s.clock.advanceAsync(0);
    for (const ip of ['10.244.2.6', '10.244.3.7']) {
      s.state.onEndpointSlice(null, syslogSlice(ip));
      s.sync();
      await s.clock.advanceAsync(5000);
    }
    expect(s.log.lines('warn')).toHaveLength(1);
    expect(s.log.lines('warn')[0]).toContain('conntrack cleanup disabled');
    expect(s.cleaner.status()).toMatchObject({ enabled: false, disabledReason: expect.stringContaining('conntrack is not installed') });
  });
});

describe('ConntrackCleaner, one listing instead of a walk per filter', () => {
  it('lists once, deletes only where flows exist, and skips the rest', async () => {
    const s = setup();
    s.state.onService(null, dnsService());
    s.state.onService(null, syslogService());
    s.state.onEndpointSlice(null, dnsSlice('10.244.1.5', '10.244.2.6'));
    s.state.onEndpointSlice(null, syslogSlice('10.244.1.5', '10.244.2.6'));
    s.sync();
    await s.settle();
    // Only the cluster IP path of dns has a flow to the endpoint about to go; syslog has none.
    s.table.add(dnsFlows('10.244.1.5')[0], syslogFlow('10.244.2.6'));
    s.state.onEndpointSlice(null, dnsSlice('10.244.2.6'));
    s.state.onEndpointSlice(null, syslogSlice('10.244.2.6'));
    s.sync();
    await s.clock.advanceAsync(0);
    expect(s.table.calls.map((c) => c.join(' '))).toEqual(['-L -f ipv4 -p udp -o extended', '-D -f ipv4 -p udp --orig-dst 10.96.0.10 --orig-port-dst 53 --reply-src 10.244.1.5']);
    expect(s.runs).toEqual([expect.objectContaining({ listings: 1, scanned: 2, skipped: 4, processes: 1, deleted: 1 })]);
    expect(brief(s.table.flows())).toEqual(['udp 10.96.0.20:514>10.244.2.6']);
  });

  it('fewer than listAtLeast deletions run without a listing (it would cost about two of them)', async () => {
    const s = setup();
    s.state.onService(null, syslogService());
    s.state.onEndpointSlice(null, syslogSlice('10.244.1.5', '10.244.2.6', '10.244.3.7', '10.244.4.8'));
    s.sync();
    await s.settle();
    s.state.onEndpointSlice(null, syslogSlice('10.244.4.8'));
    s.sync();
    await s.clock.advanceAsync(0);
    expect(s.table.calls.map((c) => c[0])).toEqual(['-D', '-D', '-D']);
  });

  it('lists each protocol that has deletions queued (SCTP apart from UDP)', async () => {
    const s = setup();
    const sig = makeService('ns', 'sig', { clusterIP: '10.96.0.40', ports: [{ name: 'sig', port: 3868, protocol: 'SCTP' }] });
    const sigSlice = (...ips: string[]) =>
      makeSlice(
        'ns',
        'sig',
        'sig-1',
        ips.map((ip) => ep(ip)),
        [{ name: 'sig', port: 3868, protocol: 'SCTP' }],
      );
    s.state.onService(null, sig);
    s.state.onEndpointSlice(null, sigSlice('10.244.1.5', '10.244.2.6', '10.244.3.7', '10.244.4.8', '10.244.5.9'));
    s.sync();
    await s.settle();
    s.table.add(natFlow({ protocol: 'sctp', client: '10.0.0.2', clientPort: 1, vip: '10.96.0.40', port: 3868, endpoint: '10.244.1.5' }));
    s.state.onEndpointSlice(null, sigSlice('10.244.5.9'));
    s.sync();
    await s.clock.advanceAsync(0);
    expect(s.table.calls.map((c) => c.join(' '))).toEqual(['-L -f ipv4 -p sctp -o extended', '-D -f ipv4 -p sctp --orig-dst 10.96.0.40 --orig-port-dst 3868 --reply-src 10.244.1.5']);
    expect(s.table.flows()).toEqual([]);
  });

  it('when the listing fails, the queued deletions run without it, and the failure is counted', async () => {
    const s = setup();
    s.state.onService(null, syslogService());
    s.state.onEndpointSlice(null, syslogSlice('10.244.1.5', '10.244.2.6', '10.244.3.7', '10.244.4.8', '10.244.5.9'));
    s.sync();
    await s.settle();
    s.table.add(syslogFlow('10.244.1.5'));
    s.table.onCall = (args) => {
      if (args[0] === '-L') throw new Error('listing: Operation not permitted');
    };
    s.state.onEndpointSlice(null, syslogSlice('10.244.5.9'));
    s.sync();
    await s.clock.advanceAsync(0);
    expect(s.table.calls.map((c) => c[0])).toEqual(['-L', '-D', '-D', '-D', '-D']);
    expect(s.table.flows()).toEqual([]);
    expect(s.runs).toEqual([expect.objectContaining({ listings: 1, errors: 1, processes: 4, deleted: 1 })]);
    expect(s.log.lines('error')[0]).toContain('listing conntrack flows failed protocol=udp');
  });
});

describe('ConntrackCleaner, full reconcile', () => {
  it('after the first good sync, deletes flows that went stale while kproxy was not running, reading the table once', async () => {
    const s = setup({ reconcileIntervalMs: 3_600_000 });
    // Before kproxy started: dns moved from 10.244.1.5 to 10.244.2.6; a client still sends to the old one,
    // and another client's entries were made before dns existed.
    s.table.add(...dnsFlows('10.244.1.5'), ...dnsFlows('10.244.2.6', 42000), syslogFlow('10.244.1.5'), ...blackholeFlows());
    s.state.onService(null, dnsService());
    s.state.onService(null, syslogService());
    s.state.onEndpointSlice(null, dnsSlice('10.244.2.6'));
    s.state.onEndpointSlice(null, syslogSlice('10.244.1.5'));
    s.sync();
    await s.clock.advanceAsync(5000);
    expect(s.table.calls.filter((c) => c[0] === '-L')).toEqual([['-L', '-f', 'ipv4', '-p', 'udp', '-o', 'extended']]);
    expect(brief(s.table.flows())).toEqual([...brief(dnsFlows('10.244.2.6')), 'udp 10.96.0.20:514>10.244.1.5'].sort());
    // One pass: one listing of the 11 flows checks the 4 newly active frontends (only dns's cluster IP has
    // an unNATed entry; 3 are skipped) and finds the 4 flows to the old endpoint and the node port's unNATed
    // entry; 6 deletions.
    expect(s.runs.map((r) => [r.listings, r.scanned, r.skipped, r.processes, r.deleted, r.reconciled])).toEqual([[1, 11, 3, 6, 6, true]]);
  });

  it('keeps at most maxPending deletions from a listing, and comes back for the rest', async () => {
    const s = setup({ reconcileIntervalMs: 3_600_000, maxPending: 4, pauseMs: 100 });
    for (let i = 0; i < 30; i++) s.table.add(natFlow({ client: '10.0.0.2', clientPort: 1000 + i, vip: SYSLOG.clusterIP, port: SYSLOG.port, endpoint: `10.244.9.${i + 1}` }));
    s.state.onService(null, syslogService());
    s.state.onEndpointSlice(null, syslogSlice('10.244.1.5'));
    s.sync();
    await s.clock.advanceAsync(10_000);
    expect(s.table.flows()).toEqual([]);
    expect(Math.max(...s.runs.map((r) => r.remaining))).toBeLessThanOrEqual(4);
    expect(s.runs.filter((r) => r.reconciled).length).toBeGreaterThanOrEqual(8);
  });

  it('runs again only after the interval', async () => {
    const s = setup({ reconcileIntervalMs: 60_000 });
    s.state.onService(null, syslogService());
    s.state.onEndpointSlice(null, syslogSlice('10.244.1.5'));
    s.sync();
    await s.clock.advanceAsync(0);
    const listings = () => s.table.calls.filter((c) => c[0] === '-L').length;
    expect(listings()).toBe(1);
    await s.clock.advanceAsync(30_000);
    s.sync();
    await s.clock.advanceAsync(0);
    expect(listings()).toBe(1);
    await s.clock.advanceAsync(30_000);
    s.sync();
    await s.clock.advanceAsync(0);
    expect(listings()).toBe(2);
  });
});

describe('ConntrackCleaner, stop', () => {
  it('starts no pass and no process after stop, whatever syncs say', async () => {
    const s = setup();
    s.state.onService(null, syslogService());
    s.state.onEndpointSlice(null, syslogSlice('10.244.1.5', '10.244.2.6'));
    s.sync();
    await s.settle();
    s.state.onEndpointSlice(null, syslogSlice('10.244.2.6'));
    s.sync();
    await s.cleaner.stop();
    s.state.onEndpointSlice(null, syslogSlice('10.244.3.7'));
    s.sync();
    await s.clock.advanceAsync(60_000);
    expect(s.table.calls).toEqual([]);
    expect(s.clock.pending).toBe(0);
  });
});

describe('ConntrackCleaner with services of another family', () => {
  it('ignores addresses that are not of its family', async () => {
    const s = setup();
    s.state.onService(null, makeService('ns', 'v6only', { clusterIP: 'fd00::10', ports: [{ name: 'dns', port: 53, protocol: 'UDP' }] }));
    s.sync();
    await s.clock.advanceAsync(0);
    expect(s.table.calls).toEqual([]);
  });
});

import { describe, expect, it } from 'vitest';
import { FakeClock, flushMicrotasks } from '../../clock-fake.ts';
import { FakeNfacct } from '../../kernel/nfacct-fake.ts';
import { MemoryLog } from '../../log.ts';
import { NO_NFACCT, setupNfacctCounters } from './nfacct.ts';

describe('setupNfacctCounters', () => {
  it("creates kube-proxy's two counters, lets the rules name them and reads their packets at each scrape", async () => {
    const nfacct = new FakeNfacct();
    const log = new MemoryLog();
    const counters = await setupNfacctCounters(nfacct, { clock: new FakeClock(), logger: log.logger });
    expect(counters.rules).toEqual({ ctStateInvalid: true, localhostNodePorts: true });
    expect(nfacct.calls).toEqual(['ensure ct_state_invalid_dropped_pkts', 'ensure localhost_nps_accepted_pkts']);
    expect(await counters.read!()).toEqual({ ctStateInvalidDropped: 0, localhostNodePortsAccepted: 0 });
    nfacct.count('ct_state_invalid_dropped_pkts', 5);
    nfacct.count('localhost_nps_accepted_pkts', 2);
    expect(await counters.read!()).toEqual({ ctStateInvalidDropped: 5, localhostNodePortsAccepted: 2 });
    expect(log.lines('info').join('\n')).toContain('nfacct counters ready');
  });

  it('shares one listing between scrapes that overlap', async () => {
    const nfacct = new FakeNfacct();
    const counters = await setupNfacctCounters(nfacct, { clock: new FakeClock(), logger: new MemoryLog().logger });
    nfacct.calls.length = 0;
    await Promise.all([counters.read!(), counters.read!(), counters.read!()]);
    expect(nfacct.calls).toEqual(['list']);
  });

  it('answers a scrape within its bound with the last values while a slow listing goes on, and the next scrape gets the new ones', async () => {
    const nfacct = new FakeNfacct();
    const clock = new FakeClock();
    const counters = await setupNfacctCounters(nfacct, { clock, logger: new MemoryLog().logger, scrapeBoundMs: 500 });
    nfacct.count('ct_state_invalid_dropped_pkts', 3);
    expect(await counters.read!()).toEqual({ ctStateInvalidDropped: 3, localhostNodePortsAccepted: 0 });
    let release!: () => void;
    nfacct.slow = new Promise((r) => (release = r));
    nfacct.count('ct_state_invalid_dropped_pkts', 4);
    const scrape = counters.read!();
    await flushMicrotasks();
    await clock.advanceAsync(500);
    expect(await scrape).toEqual({ ctStateInvalidDropped: 3, localhostNodePortsAccepted: 0 });
    nfacct.slow = null;
    release();
    await flushMicrotasks();
    expect(await counters.read!()).toEqual({ ctStateInvalidDropped: 7, localhostNodePortsAccepted: 0 });
  });

  it.each(['not-installed', 'unsupported', 'timeout'] as const)('falls back to rules without nfacct and no metrics when nfacct is %s', async (fail) => {
    const nfacct = new FakeNfacct();
    nfacct.fail = fail;
    const log = new MemoryLog();
    expect(await setupNfacctCounters(nfacct, { clock: new FakeClock(), logger: log.logger })).toBe(NO_NFACCT);
    expect(log.lines('info').filter((l) => l.includes('nfacct counter not available'))).toHaveLength(2);
    expect(log.lines('error')).toEqual([]);
  });
});

import { describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import { MemoryLog, type Logger } from '../log.ts';
import type { Backend, BackendSyncInput, BackendSyncResult } from './backend.ts';
import { FirstSyncHousekeeping } from './first-sync-housekeeping.ts';
import { harness as iptablesHarness, testConfig } from './iptables/testing.ts';
import { ipvsConfig, ipvsHarness } from './ipvs/testing.ts';
import { nftHarness } from './nftables/testing.ts';
import { harness as userspaceHarness } from './userspace/testing.ts';
import { ep, makeService, makeSlice, stateFromObjects } from './testing.ts';

const objects = () => [
  makeService('ns1', 'web', { clusterIP: '10.96.0.1', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }),
  makeSlice('ns1', 'web', 'web-1', [ep('10.244.0.1')], [{ name: 'http', port: 8080, protocol: 'TCP' }]),
];

/** syncAsTheLoopDoes syncs, then runs the after-sync work after a successful sync, as the SyncLoop does. */
async function syncAsTheLoopDoes(backend: Backend, state: { checkout(): BackendSyncInput['state'] }, forceFull: boolean): Promise<BackendSyncResult> {
  const r = await backend.sync({ state: state.checkout(), forceFull });
  if (!r.error) await backend.afterSync?.();
  return r;
}

/** A mode's backend over its simulated kernel, with a way to make the next kernel write fail. */
interface ModeUnderTest {
  sync(forceFull?: boolean): Promise<BackendSyncResult>;
  failNextWrite(): void;
  clock: FakeClock;
}

type Build = (afterFirstSync: () => Promise<unknown>, logger: Logger) => ModeUnderTest;

const modes: Record<string, Build> = {
  iptables: (afterFirstSync, logger) => {
    const h = iptablesHarness({ config: testConfig({ clusterCIDRs: ['10.244.0.0/16'] }), afterFirstSync, logger });
    const state = stateFromObjects('node-a', objects(), h.clock);
    const restore = h.kernel.restore.bind(h.kernel);
    let fail = false;
    h.kernel.restore = async (input, opts) => {
      if (fail) {
        fail = false;
        throw new Error('iptables-restore: line 3 failed');
      }
      return restore(input, opts);
    };
    return { sync: (forceFull = false) => syncAsTheLoopDoes(h.backend, state, forceFull), failNextWrite: () => (fail = true), clock: h.clock };
  },
  ipvs: (afterFirstSync, logger) => {
    const h = ipvsHarness({ config: ipvsConfig(), afterFirstSync, logger });
    const state = stateFromObjects('node-a', objects(), h.clock);
    const restore = h.ipvs.restore.bind(h.ipvs);
    let fail = false;
    h.ipvs.restore = async (batch) => {
      if (fail) {
        fail = false;
        throw new Error('ipvsadm-restore: memory allocation problem');
      }
      return restore(batch);
    };
    return { sync: (forceFull = false) => syncAsTheLoopDoes(h.backend, state, forceFull), failNextWrite: () => (fail = true), clock: h.clock };
  },
  nftables: (afterFirstSync, logger) => {
    const h = nftHarness({ afterFirstSync, logger });
    const state = stateFromObjects('node-a', objects(), h.clock);
    let fail = false;
    h.kernel.runHook = () => {
      if (!fail) return null;
      fail = false;
      return 'Error: Could not process rule: No such file or directory';
    };
    return { sync: (forceFull = false) => syncAsTheLoopDoes(h.backend, state, forceFull), failNextWrite: () => (fail = true), clock: h.clock };
  },
  userspace: (afterFirstSync, logger) => {
    const h = userspaceHarness({ afterFirstSync, logger });
    const state = stateFromObjects('node-a', objects(), h.clock);
    const restore = h.iptables.restore.bind(h.iptables);
    let fail = false;
    h.iptables.restore = async (input, opts) => {
      if (fail) {
        fail = false;
        throw new Error('iptables-restore: line 3 failed');
      }
      return restore(input, opts);
    };
    return { sync: (forceFull = false) => syncAsTheLoopDoes(h.backend, state, forceFull), failNextWrite: () => (fail = true), clock: h.clock };
  },
};

describe.each(Object.keys(modes))("%s mode removes the other modes' leftovers once, after its first successful sync", (mode) => {
  it('runs the work after the first successful sync only, never after a failed one, and never again', async () => {
    const syncsSeen: number[] = [];
    let syncs = 0;
    const m = modes[mode]!(async () => syncsSeen.push(syncs), new MemoryLog().logger);
    m.failNextWrite();
    syncs++;
    expect((await m.sync(true)).error).toBeDefined();
    expect(syncsSeen).toEqual([]);
    syncs++;
    expect((await m.sync(true)).error).toBeUndefined();
    expect(syncsSeen).toEqual([2]);
    syncs++;
    expect((await m.sync(true)).error).toBeUndefined();
    syncs++;
    await m.sync(false);
    expect(syncsSeen).toEqual([2]);
  });

  it('keeps its time out of the sync: a slow cleanup does not count as building or applying rules', async () => {
    let m: ModeUnderTest | null = null;
    m = modes[mode]!(async () => m!.clock.advance(7_000), new MemoryLog().logger);
    const r = await m.sync(true);
    expect(r.error).toBeUndefined();
    expect(r.buildMs + r.applyMs).toBeLessThan(7_000);
    expect(m.clock.monotonic()).toBeGreaterThanOrEqual(7_000); // it did run
  });

  it('logs a failed cleanup as a warning and the sync still succeeds', async () => {
    const log = new MemoryLog();
    const m = modes[mode]!(async () => {
      throw new Error('nft delete table ip kube-proxy failed (exit 1): Operation not permitted');
    }, log.logger);
    expect((await m.sync(true)).error).toBeUndefined();
    expect(log.lines('warn').join('\n')).toMatch(/removing other modes' leftovers failed .*Operation not permitted/);
  });
});

describe('FirstSyncHousekeeping', () => {
  it('does nothing (and logs nothing) for a mode without such work', async () => {
    const log = new MemoryLog();
    const h = new FirstSyncHousekeeping(undefined, log.logger, new FakeClock());
    expect(await h.afterSuccessfulSync()).toBe(0);
    expect(log.records).toEqual([]);
  });
});

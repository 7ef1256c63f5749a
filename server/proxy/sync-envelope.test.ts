import { describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import { IpvsError, RestoreFailedError, SyncFailedError, type KproxyError } from '../errors.ts';
import { MemoryLog } from '../log.ts';
import type { BackendSyncInput } from './backend.ts';
import { ProxyState } from './proxy-state.ts';
import { SkippedServicePorts } from './skipped-service-ports.ts';
import { SyncEnvelope, type SyncRun, type SyncWritten } from './sync-envelope.ts';

interface Extra {
  readonly cleanupFailures?: number;
}

function setup(opts: { describe?: (err: unknown, run: SyncRun<Extra>) => KproxyError | null; failed?: (e: KproxyError) => void } = {}) {
  const clock = new FakeClock(Date.UTC(2026, 10, 21));
  const log = new MemoryLog();
  const skipped = new SkippedServicePorts(log.logger);
  const envelope = new SyncEnvelope<Extra>({ name: 'testmode', clock, logger: log.logger, skipped, ...opts });
  const state = new ProxyState({ family: 'IPv4', nodeName: 'node-a', clock });
  const input = (forceFull = false): BackendSyncInput => ({ state: state.checkout(), forceFull });
  return { clock, log, skipped, envelope, input };
}

const written = (extra: Partial<SyncWritten & Extra> = {}): SyncWritten & Extra => ({ linesWritten: 2, servicesWritten: 1, rulesByTable: { nat: 7 }, ...extra });

describe('SyncEnvelope', () => {
  it("returns the backend's result with kproxy's and the kernel's time apart, the inputs it sent and the service ports it skipped", async () => {
    const { clock, envelope, skipped, input } = setup();
    skipped.skip('ns/a:p80/TCP', 'bad comment', 'service port skipped');
    const r = await envelope.run(input(true), async (run) => {
      clock.advance(3); // building
      run.sending('*nat\n');
      run.sending('');
      run.sending('COMMIT\n');
      await run.io(async () => clock.advance(10)); // the restore
      return written({ cleanupFailures: 1 });
    });
    expect(r).toEqual({
      full: true,
      buildMs: 3,
      applyMs: 10,
      linesWritten: 2,
      bytesWritten: 12,
      servicesWritten: 1,
      rulesByTable: { nat: 7 },
      skippedServicePorts: new Map([['ns/a:p80/TCP', 'bad comment']]),
      batch: '*nat\nCOMMIT\n',
      cleanupFailures: 1,
    });
  });

  it('reports no batch and no bytes for a sync that sent nothing (the last input stays the one the kernel took)', async () => {
    const { envelope, input } = setup();
    const r = await envelope.run(input(), async () => written({ linesWritten: 0 }));
    expect(r.batch).toBeUndefined();
    expect(r.bytesWritten).toBe(0);
  });

  it('makes the first sync full, later ones partial unless the loop or the mode asks', async () => {
    const { envelope, input } = setup();
    const decided: boolean[] = [];
    const sync = (forceFull: boolean, modeReason = false) =>
      envelope.run(input(forceFull), async (run) => {
        decided.push(run.decideFull(modeReason));
        return written();
      });
    expect((await sync(false)).full).toBe(true);
    expect((await sync(false)).full).toBe(false);
    expect((await sync(true)).full).toBe(true);
    expect((await sync(false, true)).full).toBe(true);
    expect(decided).toEqual([true, false, true, true]);
  });

  it('keeps the next sync full after a failed sync and after requireFullSync, until a sync succeeds', async () => {
    const { envelope, input } = setup();
    let fail = false;
    const sync = () =>
      envelope.run(input(), async (run) => {
        run.decideFull();
        if (fail) throw new RestoreFailedError('refused');
        return written();
      });
    await sync();
    expect((await sync()).full).toBe(false);
    envelope.requireFullSync();
    expect(envelope.fullNeeded).toBe(true);
    expect((await sync()).full).toBe(true);
    expect((await sync()).full).toBe(false);
    fail = true;
    expect((await sync()).error).toBeDefined();
    fail = false;
    expect((await sync()).full).toBe(true);
    expect(envelope.fullNeeded).toBe(false);
  });

  it('keeps a full sync asked for while a sync runs for the sync after it', async () => {
    const { envelope, input } = setup();
    await envelope.run(input(), async () => written());
    const r = await envelope.run(input(), async (run) => {
      run.decideFull();
      envelope.requireFullSync(); // a cleanup while this partial sync writes
      return written();
    });
    expect(r.full).toBe(false);
    expect(envelope.fullNeeded).toBe(true);
  });

  it("fails with the same fields, the last successful sync's counts, the inputs sent and the mode's description", async () => {
    const { clock, envelope, log, input } = setup({
      describe: (err, run) => (err instanceof Error && err.message === 'line 2' ? new RestoreFailedError(`restoring nat: line 2 of ${JSON.stringify(run.lastInput)}`) : null),
    });
    await envelope.run(input(), async () => written({ rulesByTable: { nat: 40 } }));
    const r = await envelope.run(input(), async (run) => {
      run.report({ cleanupFailures: 1 });
      run.decideFull();
      run.sending('-A X\n');
      await run.io(async () => {
        clock.advance(5);
        throw new Error('line 2');
      });
      return written();
    });
    expect(r).toEqual({
      full: false,
      buildMs: 0,
      applyMs: 5,
      linesWritten: 0,
      bytesWritten: 0,
      servicesWritten: 0,
      rulesByTable: { nat: 40 },
      error: expect.objectContaining({ code: RestoreFailedError.code, message: 'restoring nat: line 2 of "-A X\\n"' }),
      batch: '-A X\n',
      cleanupFailures: 1,
    });
    expect(envelope.lastFailedInput()).toEqual({ input: '-A X\n', error: r.error, at: clock.now() });
    expect(log.lines('error').join('\n')).toMatch(/testmode sync failed; the next sync rewrites everything.*code=KPROXY_ERR_RESTORE_FAILED/);
  });

  it('counts a sync that failed before deciding as full, keeps a catalogue error as it is and names the step of any other', async () => {
    const failures: KproxyError[] = [];
    const { envelope, input } = setup({ failed: (e) => failures.push(e) });
    const early = await envelope.run(input(), async (run) => {
      run.step = 'read';
      throw new IpvsError('ipvsadm -Sn failed');
    });
    expect(early).toMatchObject({ full: true, error: { code: IpvsError.code, message: 'ipvsadm -Sn failed' } });
    expect(early.batch).toBeUndefined();
    const bug = await envelope.run(input(), async (run) => {
      run.step = 'build';
      throw new TypeError('x is undefined');
    });
    expect(bug.error).toMatchObject({ code: SyncFailedError.code, message: 'testmode sync failed (build): x is undefined' });
    expect(failures.map((e) => e.code)).toEqual([IpvsError.code, SyncFailedError.code]);
    // Neither failure had built an input: there is nothing to download.
    expect(envelope.lastFailedInput()).toBeNull();
  });
});

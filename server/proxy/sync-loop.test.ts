import { describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import { RestoreFailedError } from '../errors.ts';
import { silentLogger } from '../log.ts';
import type { Backend, BackendSyncInput, BackendSyncResult } from './backend.ts';
import { ProxyState } from './proxy-state.ts';
import { SyncLoop, type SyncRecord } from './sync-loop.ts';
import type { SyncVerification } from './sync-verify.ts';
import { ep, makeService, makeSlice } from './testing.ts';

class ScriptedBackend implements Backend {
  readonly mode = 'iptables' as const;
  readonly family = 'IPv4' as const;
  inputs: BackendSyncInput[] = [];
  failNext = 0;
  /** fullRequired: requireFullSync was called since the last successful sync (a backend then syncs fully); fullRequests counts the calls. */
  fullRequired = false;
  fullRequests = 0;
  /** afterSync: when the loop ran it (how many records the observers had seen then), and how long it takes. */
  afterSyncSeen: number[] = [];
  /** afterSyncGate: when set, the after-sync work lasts until the test resolves it. */
  afterSyncGate: Promise<void> | null = null;
  records: readonly SyncRecord[] = [];
  async afterSync(): Promise<void> {
    this.afterSyncSeen.push(this.records.length);
    await this.afterSyncGate;
  }
  requireFullSync(): void {
    this.fullRequired = true;
    this.fullRequests++;
  }
  async sync(input: BackendSyncInput): Promise<BackendSyncResult> {
    this.inputs.push(input);
    const fail = this.failNext > 0;
    if (fail) this.failNext--;
    const full = input.forceFull || this.fullRequired;
    if (!fail) this.fullRequired = false;
    return {
      full,
      buildMs: 1,
      applyMs: 2,
      linesWritten: 10,
      bytesWritten: 100,
      servicesWritten: input.state.changedServices.size,
      rulesByTable: { nat: 5 },
      ...(fail ? { error: new RestoreFailedError('restoring table nat failed at line 3') } : {}),
    };
  }
  async cleanup() {
    return { removed: {}, errors: [] };
  }
}

function setup() {
  const clock = new FakeClock(Date.UTC(2026, 10, 21));
  const backend = new ScriptedBackend();
  const records: SyncRecord[] = [];
  backend.records = records;
  const queued: number[] = [];
  const state = new ProxyState({ family: 'IPv4', nodeName: 'node-a', clock });
  const loop = new SyncLoop({
    state,
    backend,
    clock,
    logger: silentLogger,
    minSyncPeriodMs: 1000,
    syncPeriodMs: 30_000,
    fullSyncPeriodMs: 3_600_000,
    observers: [{ onSync: (r) => records.push(r), onQueued: (t) => queued.push(t) }],
  });
  return { clock, backend, records, queued, state, loop };
}

describe('SyncLoop', () => {
  it('does not sync before Services and EndpointSlices have listed, then syncs fully', async () => {
    const { clock, backend, state, loop, records } = setup();
    loop.start();
    state.onService(null, makeService('ns', 'a'));
    await clock.advanceAsync(5000);
    expect(backend.inputs).toHaveLength(0);
    state.onSynced('Service');
    state.onSynced('EndpointSlice');
    await clock.advanceAsync(0);
    expect(backend.inputs).toHaveLength(1);
    expect(backend.inputs[0].forceFull).toBe(true);
    expect(records[0]).toMatchObject({ seq: 1, trigger: 'startup', full: true, ok: true, servicePorts: 1, servicesChangedCount: 1 });
  });

  it('syncs changes partially, bounded by minSyncPeriod, and periodically', async () => {
    const { clock, backend, state, loop, records } = setup();
    state.onSynced('Service');
    state.onSynced('EndpointSlice');
    loop.start();
    await clock.advanceAsync(0);
    state.onService(null, makeService('ns', 'a'));
    state.onEndpointSlice(null, makeSlice('ns', 'a', 'a-1', [ep('10.0.0.1')]));
    await clock.advanceAsync(999);
    expect(backend.inputs).toHaveLength(1);
    await clock.advanceAsync(1);
    expect(backend.inputs).toHaveLength(2);
    expect(backend.inputs[1].forceFull).toBe(false);
    expect([...backend.inputs[1].state.changedServices]).toEqual(['ns/a']);
    expect(records[1].trigger).toBe('change');
    await clock.advanceAsync(30_000);
    expect(records[2]).toMatchObject({ trigger: 'periodic', full: false });
  });

  it('after a failure retries after syncPeriod with a full sync and counts consecutive failures', async () => {
    const { clock, backend, state, loop, records } = setup();
    state.onSynced('Service');
    state.onSynced('EndpointSlice');
    backend.failNext = 2;
    loop.start();
    await clock.advanceAsync(0);
    expect(records[0]).toMatchObject({ ok: false, consecutiveFailures: 1, error: { code: 'KPROXY_ERR_RESTORE_FAILED' } });
    state.onService(null, makeService('ns', 'a'));
    await clock.advanceAsync(1000);
    expect(records[1]).toMatchObject({ ok: false, full: true, consecutiveFailures: 2 });
    await clock.advanceAsync(30_000);
    expect(records[2]).toMatchObject({ ok: true, full: true, consecutiveFailures: 0 });
    state.onService(null, makeService('ns', 'b', { clusterIP: '10.96.0.2' }));
    await clock.advanceAsync(1000);
    expect(records[3]).toMatchObject({ ok: true, full: false });
  });

  it("runs the backend's after-sync work after each successful sync is recorded, outside its duration, before the next sync", async () => {
    const { clock, backend, state, loop, records } = setup();
    state.onSynced('Service');
    state.onSynced('EndpointSlice');
    backend.failNext = 1;
    let done = () => {};
    backend.afterSyncGate = new Promise((resolve) => (done = resolve)); // a slow first-sync housekeeping
    loop.start();
    await clock.advanceAsync(0);
    expect(records[0].ok).toBe(false);
    expect(backend.afterSyncSeen).toEqual([]); // not after a failed sync
    state.onService(null, makeService('ns', 'a'));
    await clock.advanceAsync(30_000);
    // The observers (readiness, metrics) had the record before the work began.
    expect(records[1]).toMatchObject({ ok: true });
    expect(backend.afterSyncSeen).toEqual([2]);
    // The work goes on for a while; a change that arrives meanwhile waits for it, not beside it.
    state.onService(null, makeService('ns', 'b', { clusterIP: '10.96.0.2' }));
    await clock.advanceAsync(5_000);
    expect(backend.inputs).toHaveLength(2);
    expect(records[1].durationMs).toBe(0); // the sync's time is programming alone
    done();
    await clock.advanceAsync(1_000); // minSyncPeriod counts from the end of the sync and its work
    expect(backend.inputs).toHaveLength(3);
    expect(records[2]).toMatchObject({ ok: true, full: false });
  });

  it('computes network programming latency from trigger times, carried over a failed sync', async () => {
    const { clock, backend, state, loop, records } = setup();
    state.onSynced('Service');
    state.onSynced('EndpointSlice');
    loop.start();
    await clock.advanceAsync(10_000); // trigger times from before kproxy started are ignored
    const trigger = new Date(clock.now() - 2000).toISOString();
    backend.failNext = 1;
    state.onEndpointSlice(null, makeSlice('ns', 'a', 'a-1', [ep('10.0.0.1')], undefined, { 'endpoints.kubernetes.io/last-change-trigger-time': trigger }));
    await clock.advanceAsync(0); // the last sync ended long ago: this one runs at once
    expect(records[1].ok).toBe(false);
    expect(records[1].networkProgrammingMs).toEqual([]);
    await clock.advanceAsync(30_000);
    expect(records[2].ok).toBe(true);
    expect(records[2].networkProgrammingMs).toEqual([2000 + 30_000]); // retried after syncPeriod
  });

  it('forces a full sync on request, on topology changes and after fullSyncPeriod', async () => {
    const { clock, backend, state, loop, records } = setup();
    state.onSynced('Service');
    state.onSynced('EndpointSlice');
    loop.start();
    await clock.advanceAsync(0);
    loop.requestFullSync('resync');
    await clock.advanceAsync(1000);
    expect(records[1]).toMatchObject({ trigger: 'resync', full: true });
    state.onNode(null, { metadata: { name: 'node-a', labels: { 'topology.kubernetes.io/zone': 'z1' } } });
    await clock.advanceAsync(1000);
    expect(records[2]).toMatchObject({ trigger: 'change', full: true });
    await clock.advanceAsync(3_600_000);
    const fulls = records.filter((r) => r.full).map((r) => r.trigger);
    expect(fulls.at(-1)).toBe('periodic');
    expect(backend.inputs.at(-1)!.forceFull).toBe(true);
  });

  it('asks for full syncs by trigger alone and tells the backend, which holds "the next sync is full", after each failed sync', async () => {
    const { clock, backend, state, loop, records } = setup();
    state.onSynced('Service');
    state.onSynced('EndpointSlice');
    loop.start();
    await clock.advanceAsync(0);
    expect(backend.fullRequests).toBe(0);
    backend.failNext = 1;
    state.onService(null, makeService('ns', 'a'));
    await clock.advanceAsync(1000);
    expect(records[1]).toMatchObject({ trigger: 'change', full: false, ok: false });
    expect(backend.fullRequests).toBe(1);
    // A change before the retry: the loop does not force it, the backend it told does.
    state.onService(null, makeService('ns', 'b', { clusterIP: '10.96.0.2' }));
    await clock.advanceAsync(1000);
    expect(backend.inputs[2].forceFull).toBe(false);
    expect(records[2]).toMatchObject({ trigger: 'change', full: true, ok: true });
    // A resync asked for while a sync runs is not lost when that sync succeeds: its trigger asks for it.
    const sync = backend.sync.bind(backend);
    backend.sync = async (input) => {
      loop.requestFullSync('tampering');
      backend.sync = sync;
      return sync(input);
    };
    state.onService(null, makeService('ns', 'c', { clusterIP: '10.96.0.3' }));
    await clock.advanceAsync(1000);
    await clock.advanceAsync(1000);
    expect(records.slice(3).map((r) => `${r.trigger} ${r.full}`)).toEqual(['change false', 'tampering true']);
  });

  it('tells observers when a change is queued (health tracks stuck updates)', async () => {
    const { clock, state, loop, queued } = setup();
    state.onSynced('Service');
    state.onSynced('EndpointSlice');
    loop.start();
    state.onService(null, makeService('ns', 'a'));
    expect(queued).toEqual([clock.now()]);
  });
});

/** VerifyingBackend: a ScriptedBackend whose kernel, after a full sync, holds what `kernelSays` makes of it. */
class VerifyingBackend extends ScriptedBackend {
  verifications = 0;
  kernelSays: () => SyncVerification = () => ({ ms: 1, objects: 3, mismatches: [], mismatchCount: 0 });
  async verify(): Promise<SyncVerification> {
    this.verifications++;
    return this.kernelSays();
  }
}

function verifyingSetup() {
  const clock = new FakeClock(Date.UTC(2026, 10, 21));
  const backend = new VerifyingBackend();
  const records: SyncRecord[] = [];
  const state = new ProxyState({ family: 'IPv4', nodeName: 'node-a', clock });
  const loop = new SyncLoop({ state, backend, clock, logger: silentLogger, minSyncPeriodMs: 1000, syncPeriodMs: 30_000, observers: [{ onSync: (r) => records.push(r) }] });
  state.onSynced('Service');
  state.onSynced('EndpointSlice');
  return { clock, backend, records, state, loop };
}

describe('SyncLoop: verified programming', () => {
  const truncated = { object: 'chain endpoint-X', servicePort: 'ns/a:http/TCP', what: 'rules and verdicts naming it', want: 3, got: 2 };

  it('verifies after every full sync, never after a partial one, and records what it found', async () => {
    const { clock, backend, records, state, loop } = verifyingSetup();
    loop.start();
    await clock.advanceAsync(0);
    expect(records[0]).toMatchObject({ full: true, ok: true, verify: { objects: 3, mismatchCount: 0 } });
    state.onService(null, makeService('ns', 'a'));
    await clock.advanceAsync(1000);
    expect(records[1]).toMatchObject({ full: false, ok: true });
    expect(records[1].verify).toBeUndefined();
    expect(backend.verifications).toBe(1);
  });

  it('fails a full sync whose objects the kernel does not hold as written, naming them, and retries with a full sync', async () => {
    const { clock, backend, records, loop } = verifyingSetup();
    backend.kernelSays = () => ({ ms: 2, objects: 40, mismatches: [truncated], mismatchCount: 1 });
    loop.start();
    await clock.advanceAsync(0);
    expect(records[0]).toMatchObject({ full: true, ok: false, consecutiveFailures: 1, error: { code: 'KPROXY_ERR_SYNC_VERIFY' } });
    expect(records[0].error!.message).toContain('chain endpoint-X (ns/a:http/TCP): the kernel holds 2 rules and verdicts naming it, kproxy wrote 3');
    expect(records[0].networkProgrammingMs).toEqual([]);
    backend.kernelSays = () => ({ ms: 2, objects: 40, mismatches: [], mismatchCount: 0 });
    await clock.advanceAsync(30_000);
    expect(backend.inputs[1].forceFull).toBe(true);
    expect(records[1]).toMatchObject({ trigger: 'retry', full: true, ok: true, consecutiveFailures: 0 });
  });

  it('keeps a full sync whose verification could not read the kernel, saying why', async () => {
    const { clock, backend, records, loop } = verifyingSetup();
    backend.kernelSays = () => ({ ms: 0, objects: 0, mismatches: [], mismatchCount: 0, skipped: 'the netlink helper is down' });
    loop.start();
    await clock.advanceAsync(0);
    expect(records[0]).toMatchObject({ ok: true, verify: { skipped: 'the netlink helper is down' } });
  });

  it('keeps a full sync whose verification threw (a bug), reporting it as skipped', async () => {
    const { clock, backend, records, loop } = verifyingSetup();
    backend.kernelSays = () => {
      throw new Error('boom');
    };
    loop.start();
    await clock.advanceAsync(0);
    expect(records[0]).toMatchObject({ ok: true, verify: { skipped: 'boom' } });
  });

  it('does not verify a full sync that wrote nothing (its own read of the kernel found it as wanted)', async () => {
    const { clock, backend, records, loop } = verifyingSetup();
    const sync = backend.sync.bind(backend);
    backend.sync = async (input) => ({ ...(await sync(input)), linesWritten: 0 });
    loop.start();
    await clock.advanceAsync(0);
    expect(records[0]).toMatchObject({ full: true, ok: true });
    expect(records[0].verify).toBeUndefined();
    expect(backend.verifications).toBe(0);
  });

  it('does not verify a full sync that failed', async () => {
    const { clock, backend, records, loop } = verifyingSetup();
    backend.failNext = 1;
    loop.start();
    await clock.advanceAsync(0);
    expect(records[0]).toMatchObject({ ok: false, error: { code: 'KPROXY_ERR_RESTORE_FAILED' } });
    expect(records[0].verify).toBeUndefined();
    expect(backend.verifications).toBe(0);
  });
});

import { describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import { silentLogger } from '../log.ts';
import type { Backend, BackendSyncInput, BackendSyncResult } from './backend.ts';
import { ProxyState } from './proxy-state.ts';
import { SyncLoop, type SyncRecord } from './sync-loop.ts';
import { ep, makeService, makeSlice } from './testing.ts';

class CountingBackend implements Backend {
  readonly mode = 'iptables' as const;
  readonly family = 'IPv4' as const;
  inputs: BackendSyncInput[] = [];
  /** fullRequired: requireFullSync was called (it never fails, so nothing else asks a full sync of it). */
  fullRequired = false;
  requireFullSync(): void {
    this.fullRequired = true;
  }
  async sync(input: BackendSyncInput): Promise<BackendSyncResult> {
    this.inputs.push(input);
    const full = input.forceFull || this.fullRequired;
    this.fullRequired = false;
    return { full, buildMs: 1, applyMs: 1, linesWritten: 3, bytesWritten: 30, servicesWritten: 0, rulesByTable: { nat: 1 } };
  }
  async cleanup() {
    return { removed: {}, errors: [] };
  }
}

function setup() {
  const clock = new FakeClock(Date.UTC(2026, 10, 21));
  const backend = new CountingBackend();
  const records: SyncRecord[] = [];
  const state = new ProxyState({ family: 'IPv4', nodeName: 'node-a', clock });
  const loop = new SyncLoop({ state, backend, clock, logger: silentLogger, minSyncPeriodMs: 1000, syncPeriodMs: 30_000, observers: [{ onSync: (r) => records.push(r) }] });
  return { clock, backend, state, loop, records };
}

describe('SyncLoop pause (the dashboard keeps rules off after a cleanup)', () => {
  it('holds changes, periodic syncs and forced resyncs while paused, then resumes with one full sync', async () => {
    const { clock, backend, state, loop, records } = setup();
    loop.start();
    state.onSynced('Service');
    state.onSynced('EndpointSlice');
    await clock.advanceAsync(0);
    expect(backend.inputs).toHaveLength(1);

    loop.pause();
    expect(loop.paused).toBe(true);
    state.onService(null, makeService('ns', 'a'));
    state.onEndpointSlice(null, makeSlice('ns', 'a', 'a-1', [ep('10.0.0.1')]));
    loop.requestFullSync('tampering');
    await clock.advanceAsync(120_000);
    expect(backend.inputs).toHaveLength(1);

    loop.resume();
    expect(loop.paused).toBe(false);
    await clock.advanceAsync(1000);
    expect(backend.inputs).toHaveLength(2);
    expect(backend.inputs[1].forceFull).toBe(true);
    expect(backend.inputs[1].state.changedServices.has('ns/a')).toBe(true);
    expect(records.at(-1)).toMatchObject({ trigger: 'resume', full: true, ok: true });
  });

  it('resume without a pause does nothing', async () => {
    const { clock, backend, state, loop } = setup();
    loop.start();
    state.onSynced('Service');
    state.onSynced('EndpointSlice');
    await clock.advanceAsync(0);
    loop.resume();
    await clock.advanceAsync(1000);
    expect(backend.inputs).toHaveLength(1);
  });
});

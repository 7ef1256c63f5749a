import { describe, expect, it } from 'vitest';
import type { SyncRecord } from '../proxy/sync-loop.ts';
import { SyncHistory } from './sync-history.ts';

function record(seq: number, ok = true, extra: Partial<SyncRecord> = {}): SyncRecord {
  return {
    family: 'IPv4',
    seq,
    trigger: 'change',
    startedAt: seq * 1000,
    finishedAt: seq * 1000 + 12,
    full: false,
    ok,
    durationMs: 12,
    buildMs: 4,
    applyMs: 8,
    linesWritten: 30,
    bytesWritten: 900,
    servicesWritten: 1,
    servicesChanged: ['ns/a'],
    servicesChangedCount: 1,
    servicePorts: 3,
    endpoints: 9,
    rulesByTable: { nat: 40 },
    networkProgrammingMs: [120, 340],
    consecutiveFailures: ok ? 0 : 1,
    ...(ok ? {} : { error: { code: 'KPROXY_ERR_RESTORE_FAILED', message: 'line 3 failed' } }),
    ...extra,
  };
}

describe('SyncHistory', () => {
  it('keeps the newest syncs, oldest first, and counts failures beyond the ring', () => {
    const h = new SyncHistory(3);
    for (let i = 1; i <= 5; i++) h.add(record(i, i !== 2), false);
    expect(h.entries().map((e) => e.seq)).toEqual([3, 4, 5]);
    expect(h.failures).toBe(1);
    expect(h.entries(2).map((e) => e.seq)).toEqual([4, 5]);
  });

  it('turns a record into a row: programming latency as its max, the error, changed services', () => {
    const h = new SyncHistory();
    const row = h.add(record(1, false), true);
    expect(row).toMatchObject({ seq: 1, ok: false, programmingMs: 340, servicesChanged: 1, changed: ['ns/a'], input: 'failed', error: { code: 'KPROXY_ERR_RESTORE_FAILED' } });
    expect(h.add(record(2, true, { networkProgrammingMs: [] }), false).programmingMs).toBeNull();
  });

  it('marks only the newest successful and the newest failed sync as downloadable', () => {
    const h = new SyncHistory();
    h.add(record(1), true);
    h.add(record(2, false), true);
    h.add(record(3), true);
    expect(h.entries().map((e) => e.input)).toEqual([undefined, 'failed', 'last']);
  });
});

import '@testing-library/svelte/vitest';
import { render, screen } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import type { Overview as OverviewData, ServerMessage, SyncEntry } from '../lib/protocol.ts';
import { DashboardStore } from '../lib/store.svelte.ts';
import { overview } from '../testing/fixtures.ts';
import Overview from './Overview.svelte';

function storeWith(o: OverviewData): DashboardStore {
  const store = new DashboardStore();
  const snapshot: ServerMessage = {
    type: 'snapshot',
    seq: 1,
    viewer: { authMode: 'off', user: 'anonymous', canAct: true },
    overview: o,
    services: [],
    syncs: [],
    events: [],
    drift: { checkedAt: null, total: 0, findings: [] },
    lastAction: null,
  };
  store.apply(snapshot, o.now);
  return store;
}

describe('Overview: a node that has not synced', () => {
  it('says it is not ready and why (the file, line and error that hold the first sync back)', () => {
    const reason = 'nothing synced yet, waiting for file:/etc/kproxy/manifests to sync: /etc/kproxy/manifests/a.yaml:2:1: invalid YAML: Flow map must end with a }';
    const o = overview({
      health: { healthy: true, lastUpdated: null, nodeEligible: true, ready: false, readyReason: reason },
      source: {
        kind: 'file',
        description: 'file:/etc/kproxy/manifests',
        synced: false,
        objects: 0,
        lastError: '/etc/kproxy/manifests/a.yaml:2:1: invalid YAML: Flow map must end with a } (nothing is synced until it can be read)',
      },
    });
    render(Overview, { props: { store: storeWith(o), now: o.now } });
    expect(screen.getByTestId('not-ready').textContent).toContain(`Not ready: ${reason}.`);
    expect(screen.getByText('Not ready')).toBeTruthy();
    expect(screen.getByTestId('source-error').textContent).toMatch(/a\.yaml:2:1: invalid YAML/);
  });

  it('shows no banner once ready', () => {
    const o = overview();
    render(Overview, { props: { store: storeWith(o), now: o.now } });
    expect(screen.queryByTestId('not-ready')).toBeNull();
    expect(screen.getByText('Healthy')).toBeTruthy();
  });
});

describe('Overview: what the dashboard refused', () => {
  it('shows refused sign-ins and refused dashboard requests under Failures', () => {
    const o = overview({ stream: { ...overview().stream, refusedSignIns: 3, refusedRequests: 1 } });
    render(Overview, { props: { store: storeWith(o), now: o.now } });
    expect(screen.getByTestId('dashboard-refusals').textContent).toBe('3 refused sign-ins · 1 refused dashboard request');
  });

  it('says nothing about refusals while there are none', () => {
    const o = overview();
    render(Overview, { props: { store: storeWith(o), now: o.now } });
    expect(screen.queryByTestId('dashboard-refusals')).toBeNull();
  });
});

describe('Overview: the daemon itself', () => {
  it("shows kproxy's resident memory and heap next to the cluster's size", () => {
    const o = overview({ memory: { rssBytes: 287 * 1024 * 1024, heapUsedBytes: 141 * 1024 * 1024, heapTotalBytes: 160 * 1024 * 1024 } });
    render(Overview, { props: { store: storeWith(o), now: o.now } });
    expect(screen.getByText('287 MiB')).toBeTruthy();
    expect(screen.getByTestId('memory').textContent).toBe('resident · heap 141 MiB used of 160 MiB');
  });
});

describe('Overview: verified programming', () => {
  const entry = (over: Partial<SyncEntry>): SyncEntry => ({
    seq: 1,
    family: 'IPv4',
    trigger: 'startup',
    startedAt: 0,
    finishedAt: 0,
    full: true,
    ok: true,
    durationMs: 10,
    buildMs: 2,
    applyMs: 8,
    linesWritten: 100,
    bytesWritten: 1000,
    servicesChanged: 1,
    changed: [],
    servicePorts: 1,
    endpoints: 1000,
    programmingMs: null,
    ...over,
  });
  const mismatch = { object: 'chain endpoint-6PFCTRRO-default/big/tcp/http__10.100.1.154/8080', servicePort: 'default/big:http/TCP', what: 'rules and verdicts naming it', want: 3, got: 2 };

  function withSyncs(syncs: SyncEntry[]) {
    const o = overview();
    const store = storeWith(o);
    store.syncs = syncs;
    render(Overview, { props: { store, now: o.now } });
  }

  it('alerts when the newest verified full sync found objects the kernel does not hold as written, naming them', () => {
    withSyncs([
      entry({ seq: 1, verify: { ms: 1, objects: 1024, mismatchCount: 0, mismatches: [] } }),
      entry({ seq: 2, ok: false, error: { code: 'KPROXY_ERR_SYNC_VERIFY', message: 'x' }, verify: { ms: 30, objects: 1024, mismatchCount: 684, mismatches: [mismatch] } }),
    ]);
    const alert = screen.getByTestId('verify-mismatch').textContent!;
    expect(alert).toContain('The kernel does not hold what kproxy wrote (IPv4)');
    expect(alert).toContain('after full sync #2, 684 of 1024 objects checked differ');
    expect(alert).toContain('chain endpoint-6PFCTRRO-default/big/tcp/http__10.100.1.154/8080 (default/big:http/TCP): 2 rules and verdicts naming it in the kernel, kproxy wrote 3');
  });

  it('drops the alert once a later full sync verifies clean, whatever partial syncs came between', () => {
    withSyncs([
      entry({ seq: 2, ok: false, verify: { ms: 30, objects: 1024, mismatchCount: 684, mismatches: [mismatch] } }),
      entry({ seq: 3, verify: { ms: 30, objects: 1024, mismatchCount: 0, mismatches: [] } }),
      entry({ seq: 4, full: false }),
    ]);
    expect(screen.queryByTestId('verify-mismatch')).toBeNull();
  });
});

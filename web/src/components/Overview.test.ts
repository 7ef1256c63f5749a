import '@testing-library/svelte/vitest';
import { render, screen } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import type { Overview as OverviewData, ServerMessage } from '../lib/protocol.ts';
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

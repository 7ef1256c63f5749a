import { afterEach, describe, expect, it } from 'vitest';
import type { Backend, BackendSyncResult } from '../proxy/backend.ts';
import { testDashboard, type TestDashboard } from './testing.ts';

/** skippingBackend reports one service port as skipped while `why` is set, as a backend does when its objects cannot be built. */
function skippingBackend(inner: Backend, why: { text: string | null }): Backend {
  return {
    mode: inner.mode,
    family: inner.family,
    init: inner.init?.bind(inner),
    requireFullSync: inner.requireFullSync.bind(inner),
    cleanup: inner.cleanup.bind(inner),
    watchTampering: inner.watchTampering?.bind(inner),
    async sync(input): Promise<BackendSyncResult> {
      const r = await inner.sync(input);
      if (r.error || why.text === null) return r;
      return { ...r, skippedServicePorts: new Map([...(r.skippedServicePorts ?? []), ['shop/frontend:http/TCP', why.text]]) };
    },
  };
}

describe('skipped service ports on the dashboard', () => {
  let t: TestDashboard;
  afterEach(async () => t?.close());

  it('shows why the last sync skipped a service port, from the sync result, until a sync programs it', async () => {
    const why = { text: 'endpoint IP "10.0.0.1 -j ACCEPT" is not an IP address' as string | null };
    t = await testDashboard({ wrapBackend: (b) => skippingBackend(b, why) });
    const port = async () => (await t.dashboard.detail('shop/frontend'))!.ports.find((p) => p.id === 'shop/frontend:http/TCP')!;
    expect((await port()).skipped).toBe(why.text);
    expect((await t.dashboard.detail('shop/cart'))!.ports.every((p) => p.skipped === undefined)).toBe(true);

    why.text = null;
    t.daemon.proxy.requestFullSync();
    await t.settle(1_000);
    expect((await port()).skipped).toBeUndefined();
  });
});

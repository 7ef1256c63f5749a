import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { IptablesView } from './iptables/view.ts';
import { testDashboard, type TestDashboard } from './testing.ts';

const TOKEN = 'idle-release-token';
const AUTH = { host: 'localhost:10249', authorization: `Bearer ${TOKEN}` };

describe('an idle dashboard drops its parsed tables', () => {
  let t: TestDashboard;
  afterEach(async () => t?.close());

  const view = () => t.dashboard.provider as IptablesView;

  it('keeps the kernel read and what kproxy wrote while asked, drops both a minute after the last look, builds them again on the next', async () => {
    t = await testDashboard({ token: TOKEN });
    // Syncs alone never parse anything for the dashboard.
    expect(view().holdsIntended).toBe(false);
    expect(t.dashboard.reader.tables).toBeNull();

    const page = await t.app.inject({ url: '/api/v1/services/shop/frontend', headers: AUTH });
    expect(page.statusCode).toBe(200);
    const tables = await t.app.inject({ url: '/api/v1/tables', headers: AUTH });
    expect(tables.json().tables.map((x: { name: string }) => x.name)).toContain('nat');
    expect(view().holdsIntended).toBe(true);
    const rules = t.dashboard.reader.status().rules;
    expect(rules).toBeGreaterThan(0);

    await t.settle(59_000);
    expect(t.dashboard.reader.tables).not.toBeNull();
    await t.settle(2_000);
    expect(t.dashboard.reader.tables).toBeNull();
    expect(view().holdsIntended).toBe(false);
    // The overview still tells the size and time of the last read.
    expect(t.dashboard.reader.status().rules).toBe(rules);

    const again = await t.app.inject({ url: '/api/v1/services/shop/frontend', headers: AUTH });
    expect(again.json()).toEqual(page.json());
    expect(view().holdsIntended).toBe(true);
  });

  it('gives memory back once when it drops them, not while nothing was parsed', async () => {
    let collections = 0;
    t = await testDashboard({ token: TOKEN, collect: () => collections++ });
    await t.settle(61_000);
    expect(collections).toBe(0);
    await t.app.inject({ url: '/api/v1/tables', headers: AUTH });
    await t.settle(61_000);
    expect(t.dashboard.reader.tables).toBeNull();
    expect(collections).toBe(1);
    await t.settle(61_000);
    expect(collections).toBe(1);
  });

  it('keeps them while a client is connected, however long', async () => {
    t = await testDashboard({ token: TOKEN });
    const ws: WebSocket = await t.app.injectWS('/ws', { headers: AUTH });
    try {
      await t.app.inject({ url: '/api/v1/services/shop/frontend', headers: AUTH });
      expect(t.dashboard.stream.hub.size).toBe(1);
      // Ten minutes in 5 s steps; the client says something in each (injected sockets do not answer pings).
      for (let i = 0; i < 120; i++) {
        ws.send('{}');
        await t.settle(5_000);
        await new Promise((r) => setTimeout(r, 1));
      }
      expect(t.dashboard.stream.hub.size).toBe(1);
      expect(view().holdsIntended).toBe(true);
      expect(t.dashboard.reader.tables).not.toBeNull();
    } finally {
      ws.terminate();
    }
    await t.settle(0);
    await t.settle(61_000);
    expect(view().holdsIntended).toBe(false);
    expect(t.dashboard.reader.tables).toBeNull();
  });
});

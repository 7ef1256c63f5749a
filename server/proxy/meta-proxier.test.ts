import { describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import { RestoreFailedError } from '../errors.ts';
import { silentLogger } from '../log.ts';
import type { IPFamily } from '../net/ip.ts';
import type { Backend, BackendSyncInput, BackendSyncResult } from './backend.ts';
import type { Node } from './kube-objects.ts';
import { MetaProxier } from './meta-proxier.ts';
import type { SyncRecord } from './sync-loop.ts';
import { ep, makeService, makeSlice } from './testing.ts';

/** RecordingBackend is one family's backend: it keeps what each sync was asked to program. */
class RecordingBackend implements Backend {
  readonly mode = 'iptables' as const;
  readonly family: IPFamily;
  inputs: BackendSyncInput[] = [];
  failNext = 0;
  /** syncGate: when set, a sync writes its rules only once the test resolves it. */
  syncGate: Promise<void> | null = null;
  /** events: this backend's syncs and after-sync work, in the order they ended, shared between the families. */
  events: string[] = [];
  constructor(family: IPFamily, events: string[] = []) {
    this.family = family;
    this.events = events;
  }
  /** fullRequired: requireFullSync was called since the last successful sync (a backend then syncs fully). */
  fullRequired = false;
  requireFullSync(): void {
    this.fullRequired = true;
  }
  async sync(input: BackendSyncInput): Promise<BackendSyncResult> {
    this.inputs.push(input);
    await this.syncGate;
    this.events.push(`${this.family} synced`);
    const fail = this.failNext > 0;
    if (fail) this.failNext--;
    const full = input.forceFull || this.fullRequired;
    if (!fail) this.fullRequired = false;
    return {
      full,
      buildMs: 0,
      applyMs: 0,
      linesWritten: 1,
      bytesWritten: 1,
      servicesWritten: input.state.changedServices.size,
      rulesByTable: { nat: input.state.services.size },
      ...(fail ? { error: new RestoreFailedError(`restoring ${this.family} table nat failed`) } : {}),
    };
  }
  /** last: the service ports and endpoint keys of the latest sync. */
  get last() {
    const s = this.inputs.at(-1)!.state;
    return { ports: [...s.services.values()].map((sp) => `${sp.id} ${sp.clusterIP}`).sort(), endpoints: [...s.endpoints.values()].flat().map((e) => e.key), changed: [...s.changedServices].sort() };
  }
  async afterSync(): Promise<void> {
    this.events.push(`${this.family} after-sync work`);
  }
  async cleanup() {
    return { removed: { [`${this.family} chains`]: 1 }, errors: [] };
  }
}

function setup(families: IPFamily[] = ['IPv4', 'IPv6']) {
  const clock = new FakeClock(Date.UTC(2026, 10, 21));
  const events: string[] = [];
  const backends = families.map((f) => new RecordingBackend(f, events));
  const invalid: string[] = [];
  const proxy = new MetaProxier({
    backends: backends.map((backend) => ({ family: backend.family, backend })),
    nodeName: 'node-a',
    clock,
    logger: silentLogger,
    minSyncPeriodMs: 1000,
    syncPeriodMs: 30_000,
    hooks: { onInvalid: (_kind, ref, error) => invalid.push(`${ref}: ${error.message}`) },
  });
  const records: SyncRecord[] = [];
  proxy.addObserver({ onSync: (r) => records.push(r) });
  const [v4, v6] = backends;
  return { clock, proxy, v4, v6, invalid, records, events };
}

const dual = makeService('ns', 'web', { clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10', 'fd00::10'], ipFamilies: ['IPv4', 'IPv6'], ipFamilyPolicy: 'PreferDualStack' });
const v6only = makeService('ns', 'v6', { clusterIP: 'fd00::20', clusterIPs: ['fd00::20'], ipFamilies: ['IPv6'], ipFamilyPolicy: 'SingleStack' });
const slice4 = makeSlice('ns', 'web', 'web-4', [ep('10.244.0.5')]);
const slice6 = { ...makeSlice('ns', 'web', 'web-6', [ep('fd00:244::5')]), addressType: 'IPv6' };
const fqdn = { ...makeSlice('ns', 'web', 'web-fqdn', [ep('10.244.0.9')]), addressType: 'FQDN' };

async function listed(c: ReturnType<typeof setup>) {
  c.proxy.start();
  c.proxy.onSynced('Service');
  c.proxy.onSynced('EndpointSlice');
  await c.clock.advanceAsync(0);
  await c.proxy.idle();
}

describe('MetaProxier', () => {
  it("hands every object to each family's proxier, which keeps Services by cluster IP and slices by addressType", async () => {
    const c = setup();
    for (const s of [dual, v6only]) c.proxy.onService(null, s);
    for (const s of [slice4, slice6, fqdn]) c.proxy.onEndpointSlice(null, s);
    await listed(c);
    expect(c.v4.last).toEqual({ ports: ['ns/web:p80/TCP 10.96.0.10'], endpoints: ['10.244.0.5:80'], changed: ['ns/web'] });
    expect(c.v6.last).toEqual({ ports: ['ns/v6:p80/TCP fd00::20', 'ns/web:p80/TCP fd00::10'], endpoints: ['[fd00:244::5]:80'], changed: ['ns/v6', 'ns/web'] });
    expect(c.records.map((r) => `${r.family} ${r.trigger} ${r.ok}`)).toEqual(['IPv4 startup true', 'IPv6 startup true']);
    expect(c.proxy.families).toEqual(['IPv4', 'IPv6']);
  });

  it('removing the IPv6 family from a Service removes it from the IPv6 proxier and leaves IPv4 untouched', async () => {
    const c = setup();
    c.proxy.onService(null, dual);
    await listed(c);
    const v4Syncs = c.v4.inputs.length;
    c.proxy.onService(dual, makeService('ns', 'web', { clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'], ipFamilies: ['IPv4'], ipFamilyPolicy: 'SingleStack' }));
    await c.clock.advanceAsync(1000);
    await c.proxy.idle();
    expect(c.v6.last).toEqual({ ports: [], endpoints: [], changed: ['ns/web'] });
    expect(c.v6.inputs.at(-1)!.forceFull).toBe(false);
    // The IPv4 ports are the same: its proxier has nothing to sync.
    expect(c.v4.inputs.length).toBe(v4Syncs);
  });

  it('counts and reports an invalid object once, whichever families refused it, and forgets it once fixed', async () => {
    const c = setup();
    const bad = makeService('ns', 'bad', { clusterIPs: ['10.96.0.1', '10.96.0.2'] });
    c.proxy.onService(null, bad);
    expect(c.invalid).toEqual(['Service ns/bad: Service ns/bad: spec.clusterIPs ["10.96.0.1","10.96.0.2"]: may hold at most one address per family (a dual-stack Service has one IPv4 and one IPv6)']);
    expect(c.proxy.invalidTotal.Service).toBe(1);
    expect([...c.proxy.invalid.keys()]).toEqual(['Service ns/bad']);
    // A bad IPv6 endpoint is refused by the IPv6 proxier alone, still once.
    c.proxy.onEndpointSlice(null, { ...makeSlice('ns', 'web', 'web-6', [ep('fd00::1::2')]), addressType: 'IPv6' });
    expect(c.proxy.invalidTotal.EndpointSlice).toBe(1);
    c.proxy.onService(bad, makeService('ns', 'bad', { clusterIPs: ['10.96.0.1', 'fd00::1'] }));
    expect([...c.proxy.invalid.keys()]).toEqual(['EndpointSlice ns/web-6']);
    expect(c.proxy.serviceChangesTotal).toBe(4);
  });

  it('syncs each family on its own: a failed IPv6 restore is retried fully while IPv4 stays synced', async () => {
    const c = setup();
    c.proxy.onService(null, dual);
    c.v6.failNext = 1;
    await listed(c);
    expect(c.records.map((r) => `${r.family} ${r.ok} ${r.consecutiveFailures}`)).toEqual(['IPv4 true 0', 'IPv6 false 1']);
    c.proxy.onEndpointSlice(null, slice4);
    await c.clock.advanceAsync(1000);
    await c.proxy.idle();
    expect(c.v4.inputs.at(-1)!.forceFull).toBe(false);
    await c.clock.advanceAsync(30_000);
    await c.proxy.idle();
    const retry = c.records.filter((r) => r.family === 'IPv6').at(-1)!;
    expect(retry).toMatchObject({ trigger: 'retry', full: true, ok: true, consecutiveFailures: 0 });
  });

  it("holds one family's after-sync work (the first sync's housekeeping) until the other family's sync in flight has written its rules", async () => {
    const c = setup();
    c.proxy.onService(null, dual);
    // Both families' first syncs in flight, as at start-up (each restore takes seconds on a real node).
    let release4 = () => {};
    let release6 = () => {};
    c.v4.syncGate = new Promise((r) => (release4 = r));
    c.v6.syncGate = new Promise((r) => (release6 = r));
    c.proxy.start();
    c.proxy.onSynced('Service');
    c.proxy.onSynced('EndpointSlice');
    for (let i = 0; i < 20; i++) await c.clock.advanceAsync(0);
    expect([c.v4.inputs.length, c.v6.inputs.length]).toEqual([1, 1]);
    release4();
    for (let i = 0; i < 20; i++) await c.clock.advanceAsync(0);
    // IPv4 is programmed and recorded; its housekeeping waits for IPv6's restore.
    expect(c.records.map((r) => r.family)).toEqual(['IPv4']);
    expect(c.events).toEqual(['IPv4 synced']);
    release6();
    await c.proxy.idle();
    // Both rules written before either family's housekeeping (which of the two runs first does not matter).
    expect(c.events.slice(0, 2)).toEqual(['IPv4 synced', 'IPv6 synced']);
    expect(c.events.slice(2).sort()).toEqual(['IPv4 after-sync work', 'IPv6 after-sync work']);
    c.v4.syncGate = c.v6.syncGate = null;
    // Later syncs of one family do not wait for the other, which is not syncing.
    c.proxy.onEndpointSlice(null, slice4);
    await c.clock.advanceAsync(1000);
    await c.proxy.idle();
    expect(c.events.slice(4)).toEqual(['IPv4 synced', 'IPv4 after-sync work']);
  });

  it("skips a family's Services while the Node lists addresses of the other family only, and programs them once it has one", async () => {
    const c = setup();
    c.proxy.onService(null, dual);
    c.proxy.onService(null, v6only);
    const node = (addresses: string[]): Node => ({ metadata: { name: 'node-a' }, status: { addresses: addresses.map((address) => ({ type: 'InternalIP', address })) } });
    c.proxy.onNode(null, node(['192.0.2.10']));
    await listed(c);
    expect(c.v6.last.ports).toEqual([]);
    expect(c.v6.inputs.at(-1)!.state.withoutNodeIP).toBe(2);
    expect(c.v4.last.ports).toEqual(['ns/web:p80/TCP 10.96.0.10']);
    c.proxy.onNode(node(['192.0.2.10']), node(['192.0.2.10', '2001:db8::10']));
    await c.clock.advanceAsync(1000);
    await c.proxy.idle();
    expect(c.v6.inputs.at(-1)!).toMatchObject({ forceFull: true });
    expect(c.v6.last.ports).toEqual(['ns/v6:p80/TCP fd00::20', 'ns/web:p80/TCP fd00::10']);
    expect(c.v6.inputs.at(-1)!.state.withoutNodeIP).toBe(0);
  });

  it('carries pause, resume, resync and cleanup to every family', async () => {
    const c = setup();
    c.proxy.onService(null, dual);
    await listed(c);
    c.proxy.pause();
    expect(c.proxy.proxiers.every((p) => p.loop.paused)).toBe(true);
    c.proxy.resume();
    await c.clock.advanceAsync(1000);
    await c.proxy.idle();
    expect(
      c.records
        .slice(-2)
        .map((r) => `${r.family} ${r.trigger} ${r.full}`)
        .sort(),
    ).toEqual(['IPv4 resume true', 'IPv6 resume true']);
    const once = await c.proxy.syncOnce();
    expect(once.map((r) => r.family)).toEqual(['IPv4', 'IPv6']);
  });

  it('runs one proxier on a single-stack node and refuses a second backend of the same family', () => {
    const single = setup(['IPv6']);
    expect(single.proxy.families).toEqual(['IPv6']);
    expect(single.proxy.proxier('IPv4')).toBeUndefined();
    const b = new RecordingBackend('IPv4');
    expect(
      () =>
        new MetaProxier({ backends: [b, b].map((backend) => ({ family: backend.family, backend })), nodeName: 'n', clock: new FakeClock(), logger: silentLogger, minSyncPeriodMs: 1, syncPeriodMs: 1 }),
    ).toThrow('a meta proxier needs one backend per IP family (got IPv4, IPv4)');
  });
});

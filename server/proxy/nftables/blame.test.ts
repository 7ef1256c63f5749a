import { describe, expect, it } from 'vitest';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { KUBE_PROXY_TABLE } from './names.ts';
import { nftHarness, testConfig } from './testing.ts';

/**
 * A Service whose objects the kernel refuses is left out, alone: the next
 * (full) sync programs every other Service, reports the refused one as
 * skipped with the kernel's words, and keeps what the kernel took of it
 * before; a change to it gets another try.
 */

const config = testConfig({ mode: 'nftables', clusterCIDRs: ['10.244.0.0/16'] });
const tcp = [{ name: 'http', port: 80, protocol: 'TCP' }];
const svc = (name: string, ip: string) => makeService('shop', name, { clusterIP: ip, ports: tcp });
const slice = (name: string, ...ips: string[]) =>
  makeSlice(
    'shop',
    name,
    `${name}-1`,
    ips.map((i) => ep(i, { nodeName: 'node-b' })),
    [{ name: 'http', port: 8080, protocol: 'TCP' }],
  );

/** refuseLinesWith makes the simulated kernel refuse, as nft does, the first line of a transaction that holds `needle`. */
function refuseLinesWith(needle: () => string | null) {
  return (t: string) => {
    const n = needle();
    if (n === null) return null;
    const i = t.split('\n').findIndex((l) => l.includes(n));
    return i < 0 ? null : `/dev/stdin:${i + 1}:1-10: Error: Could not process rule: Argument list too long\n`;
  };
}

const chainsOf = (h: ReturnType<typeof nftHarness>, name: string) => [...h.kernel.table('ip', KUBE_PROXY_TABLE)!.chains.keys()].filter((c) => c.includes(`/${name}/`));

describe('nftables: a Service the kernel refuses is left out alone', () => {
  it('programs every other Service at the next sync and reports the refused one as skipped, until it changes', async () => {
    const h = nftHarness({ config });
    const state = stateFromObjects('node-a', [svc('a', '10.96.0.1'), slice('a', '10.244.1.1')]);
    expect((await h.backend.sync({ state: state.checkout(), forceFull: true })).error).toBeUndefined();

    let refuse: string | null = '/big/';
    h.kernel.runHook = refuseLinesWith(() => refuse);
    state.onService(null, svc('big', '10.96.0.2'));
    state.onEndpointSlice(null, slice('big', '10.244.1.2'));
    state.onService(null, svc('c', '10.96.0.3'));
    state.onEndpointSlice(null, slice('c', '10.244.1.3'));
    const failed = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(failed.error?.message).toContain('Argument list too long');

    const next = await h.backend.sync({ state: state.checkout(), forceFull: true });
    expect(next.error).toBeUndefined();
    expect(chainsOf(h, 'c').length).toBeGreaterThan(0);
    expect(chainsOf(h, 'big')).toEqual([]);
    expect(next.skippedServicePorts?.get('shop/big:http/TCP')).toMatch(
      /^the kernel refused its objects \(.*Argument list too long; line \d+: .*big.*\): left out until its Service or endpoints change$/,
    );
    expect((await h.backend.verify!()).mismatchCount).toBe(0);

    // A change gets another try; the kernel takes it now.
    refuse = null;
    state.onEndpointSlice(null, slice('big', '10.244.1.2', '10.244.1.22'));
    const retried = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(retried.error).toBeUndefined();
    expect(retried.skippedServicePorts?.has('shop/big:http/TCP')).toBe(false);
    expect(chainsOf(h, 'big').length).toBeGreaterThan(0);
  });

  it("keeps what the kernel took of a Service before when it refuses the Service's change", async () => {
    const h = nftHarness({ config });
    const state = stateFromObjects('node-a', [svc('a', '10.96.0.1'), slice('a', '10.244.1.1'), svc('c', '10.96.0.3'), slice('c', '10.244.1.3')]);
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    const before = chainsOf(h, 'a');
    h.kernel.runHook = refuseLinesWith(() => '10.244.1.99');
    state.onEndpointSlice(null, slice('a', '10.244.1.1', '10.244.1.99'));
    expect((await h.backend.sync({ state: state.checkout(), forceFull: false })).error).toBeDefined();
    state.onEndpointSlice(null, slice('c', '10.244.1.3', '10.244.1.33'));
    const next = await h.backend.sync({ state: state.checkout(), forceFull: true });
    expect(next.error).toBeUndefined();
    expect(chainsOf(h, 'a')).toEqual(before);
    expect(chainsOf(h, 'c').some((n) => n.includes('10.244.1.33'))).toBe(true);
    expect(next.skippedServicePorts?.get('shop/a:http/TCP')).toMatch(/its previous objects stay programmed$/);
  });

  it("leaves nothing out when the refused line is not a Service's (a fixed chain): the sync fails as a whole", async () => {
    const h = nftHarness({ config });
    const state = stateFromObjects('node-a', [svc('a', '10.96.0.1'), slice('a', '10.244.1.1')]);
    h.kernel.runHook = refuseLinesWith(() => 'add chain ip kube-proxy services');
    expect((await h.backend.sync({ state: state.checkout(), forceFull: true })).error).toBeDefined();
    const again = await h.backend.sync({ state: state.checkout(), forceFull: true });
    expect(again.error).toBeDefined();
    expect(again.skippedServicePorts).toBeUndefined();
  });
});

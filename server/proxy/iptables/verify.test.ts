import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SimulatedIptables } from '../../kernel/iptables-simulated.ts';
import { silentLogger } from '../../log.ts';
import { SyncLoop, type SyncRecord } from '../sync-loop.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { runGoldenCase } from '../golden.ts';
import { iptablesGolden } from './golden.ts';
import { harness, testConfig } from './testing.ts';
import { lossyIptables } from '../xtables/testing.ts';

/**
 * Verified programming in iptables mode: after a full sync every chain the
 * restore input declared must hold, in the kernel, the rules the input left
 * in it (for iptables-nft: its use count, rules plus jumps to it), the chains
 * it deleted must be gone, and the jumps from the built-in chains must be
 * there. Every golden case verifies clean over the simulated kernel in both
 * flavours; a writer that loses part of its input is caught with the chain
 * and its service port named; other programs' rules never count.
 */

const DIR = join(import.meta.dirname, 'testdata');
const cases = readdirSync(DIR).filter((d) => existsSync(join(DIR, d, 'input.yaml')));

const tcp = [{ name: 'http', port: 80, protocol: 'TCP' }];
const objects = (endpoints = ['10.244.1.1', '10.244.1.2', '10.244.1.3']) => [
  makeService('shop', 'web', { clusterIP: '10.96.0.10', ports: [{ ...tcp[0], nodePort: 30080 }], type: 'NodePort' }),
  makeSlice(
    'shop',
    'web',
    'web-1',
    endpoints.map((ip) => ep(ip)),
    [{ name: 'http', port: 8080, protocol: 'TCP' }],
  ),
];
const config = testConfig({ clusterCIDRs: ['10.244.0.0/16'] });

for (const flavor of ['nft', 'legacy'] as const) {
  const use = flavor === 'nft';
  describe(`iptables verification (${flavor}: ${use ? 'chain use counts' : 'rules per chain'})`, () => {
    for (const name of cases) {
      it(`finds golden case ${name} as written, in every family`, async () => {
        const run = await runGoldenCase(iptablesGolden(flavor), join(DIR, name, 'input.yaml'));
        for (const r of run.families) {
          const v = await r.harness.backend.verify!();
          expect(v.skipped).toBeUndefined();
          expect(v.mismatches).toEqual([]);
          // The 14 jump rules, the 3 canaries and the fixed chains at least.
          expect(v.objects).toBeGreaterThan(25);
        }
      });
    }

    async function syncThrough(lose: (line: string) => string | null, opts: { before?: (k: SimulatedIptables) => Promise<void> } = {}) {
      const kernel = new SimulatedIptables({ flavor });
      await opts.before?.(kernel);
      const h = harness({ config, kernel, runner: lossyIptables(kernel, lose) });
      const r = await h.backend.sync({ state: stateFromObjects('node-a', objects()).checkout(), forceFull: true });
      expect(r.error).toBeUndefined();
      return { h, kernel, v: await h.backend.verify!() };
    }

    it('catches an endpoint chain that lost its DNAT rule, naming the chain and its service port', async () => {
      const { v } = await syncThrough((l) => (/^-A KUBE-SEP-\S+ .*-j DNAT .*10\.244\.1\.2:8080/.test(l) ? null : l));
      expect(v.mismatchCount).toBe(1);
      expect(v.mismatches[0]).toMatchObject({ what: use ? 'rules and jumps to it' : 'rules', want: use ? 3 : 2, got: use ? 2 : 1, servicePort: 'shop/web:http/TCP' });
      expect(v.mismatches[0].object).toMatch(/^chain nat KUBE-SEP-[A-Z0-9]{16}$/);
    });

    it(`catches a service chain that lost a probability rule${use ? ': the endpoint chain it jumped to is named too' : ''}`, async () => {
      const { v } = await syncThrough((l) => (/^-A KUBE-SVC-\S+ .*probability 0\.5/.test(l) ? null : l));
      expect(v.mismatches.map((m) => [m.object.replace(/-[A-Z0-9]{16}$/, ''), m.want, m.got, m.servicePort])).toEqual(
        use
          ? [
              // 4 rules, and the jumps from KUBE-SERVICES and the node port's KUBE-EXT- chain.
              ['chain nat KUBE-SVC', 6, 5, 'shop/web:http/TCP'],
              ['chain nat KUBE-SEP', 3, 2, 'shop/web:http/TCP'],
            ]
          : [['chain nat KUBE-SVC', 4, 3, 'shop/web:http/TCP']],
      );
    });

    it('catches a stale chain the input deleted that the kernel kept', async () => {
      const kernel = new SimulatedIptables({ flavor });
      let losing = false;
      const h = harness({ config, kernel, runner: lossyIptables(kernel, (l) => (losing && l.startsWith('-X KUBE-SEP-') ? null : l)) });
      await h.backend.sync({ state: stateFromObjects('node-a', objects()).checkout(), forceFull: true });
      expect((await h.backend.verify!()).mismatches).toEqual([]);
      losing = true;
      await h.backend.sync({ state: stateFromObjects('node-a', objects(['10.244.1.1', '10.244.1.2'])).checkout(), forceFull: true });
      const v = await h.backend.verify!();
      expect(v.mismatchCount).toBe(1);
      expect(v.mismatches[0]).toMatchObject({ object: expect.stringMatching(/^chain nat KUBE-SEP-/), what: 'chain', want: 0, got: 1 });
    });

    it('catches a jump from a built-in chain that did not reach the kernel', async () => {
      // On a fresh node the jumps travel in the restore input ("-I PREROUTING 1 … -j KUBE-SERVICES").
      const { v } = await syncThrough((l) => (l.startsWith('-I PREROUTING 1 ') ? null : l));
      expect(v.mismatches).toEqual([{ object: 'chain nat PREROUTING', what: 'rules jumping to KUBE-SERVICES', want: 1, got: 0 }]);
    });

    it("never counts other programs' rules: Docker's and a CNI's chains, rules in the built-in chains, an old jump kept twice", async () => {
      const { h, kernel } = await syncThrough((l) => l);
      await kernel.restore(
        [
          '*filter',
          ':DOCKER-USER - [0:0]',
          '-A DOCKER-USER -j RETURN',
          '-I FORWARD 1 -j DOCKER-USER',
          '-A INPUT -s 192.0.2.1/32 -j DROP',
          'COMMIT',
          '*nat',
          ':CNI-HOSTPORT-MASQ - [0:0]',
          '-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j KUBE-MARK-MASQ',
          '-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-MASQ',
          '-A PREROUTING -m comment --comment "an older kube-proxy" -j KUBE-SERVICES',
          'COMMIT',
          '',
        ].join('\n'),
      );
      // A full sync after them: they stay, and the verification is clean.
      const r = await h.backend.sync({ state: stateFromObjects('node-a', objects()).checkout(), forceFull: true });
      expect(r.error).toBeUndefined();
      const v = await h.backend.verify!();
      expect(v.mismatches).toEqual([]);
      expect(kernel.rules('nat', 'CNI-HOSTPORT-MASQ')).toHaveLength(1);
    });

    it('catches what someone changed between the write and the verification: a rule deleted, a chain flushed', async () => {
      const { h, kernel } = await syncThrough((l) => l);
      await h.backend.sync({ state: stateFromObjects('node-a', objects()).checkout(), forceFull: true });
      const svc = kernel.chains('nat').find((c) => c.startsWith('KUBE-SVC-'))!;
      await kernel.flushChain('nat', svc);
      await kernel.deleteRule('filter', 'INPUT', ['-m', 'comment', '--comment', 'kubernetes health check service ports', '-j', 'KUBE-NODEPORTS']);
      const v = await h.backend.verify!();
      const named = v.mismatches.map((m) => `${m.object} ${m.what}`);
      expect(named).toContain(`chain nat ${svc} ${use ? 'rules and jumps to it' : 'rules'}`);
      expect(named).toContain('chain filter INPUT rules jumping to KUBE-NODEPORTS');
      // With use counts the three endpoint chains and KUBE-MARK-MASQ lose the jumps of the flushed chain too.
      expect(v.mismatchCount).toBe(use ? 6 : 2);
    });

    it('catches tables emptied by someone (iptables -F; iptables -X): every chain missing', async () => {
      const { h, kernel } = await syncThrough((l) => l);
      await h.backend.sync({ state: stateFromObjects('node-a', objects()).checkout(), forceFull: true });
      kernel.flushAll();
      const v = await h.backend.verify!();
      expect(v.mismatchCount).toBe(v.objects);
      expect(v.mismatches.find((m) => m.object === 'chain nat KUBE-SERVICES')).toMatchObject({ got: null });
    });
  });
}

describe('iptables verification in the sync loop', () => {
  it('fails the full sync whose writer lost a rule, naming the chain and its service port, and the retry is a full sync that verifies clean', async () => {
    const kernel = new SimulatedIptables();
    let losing = true;
    const h = harness({ config, kernel, runner: lossyIptables(kernel, (l) => (losing && /^-A KUBE-SEP-\S+ .*-j DNAT .*10\.244\.1\.2:8080/.test(l) ? null : l)) });
    const state = stateFromObjects('node-a', objects(), h.clock);
    const records: SyncRecord[] = [];
    const loop = new SyncLoop({ state, backend: h.backend, clock: h.clock, logger: silentLogger, minSyncPeriodMs: 1000, syncPeriodMs: 30_000, observers: [{ onSync: (r) => records.push(r) }] });
    loop.start();
    await h.clock.advanceAsync(0);
    expect(records[0]).toMatchObject({ full: true, ok: false, error: { code: 'KPROXY_ERR_SYNC_VERIFY' }, verify: { mismatchCount: 1 } });
    expect(records[0].error!.message).toMatch(/chain nat KUBE-SEP-[A-Z0-9]{16} \(shop\/web:http\/TCP\): the kernel holds 2 rules and jumps to it, kproxy wrote 3/);
    losing = false;
    await h.clock.advanceAsync(30_000);
    expect(records[1]).toMatchObject({ trigger: 'retry', full: true, ok: true, verify: { mismatchCount: 0 } });
    loop.stop();
  });
});

describe('iptables verification: when there is nothing to compare', () => {
  it('reports a kernel that cannot be read as skipped, never as a mismatch', async () => {
    const kernel = new SimulatedIptables();
    const runner = lossyIptables(kernel, (l) => l);
    runner.countChains = async () => {
      throw new Error('the netlink helper died');
    };
    const h = harness({ config, kernel, runner });
    await h.backend.sync({ state: stateFromObjects('node-a', objects()).checkout(), forceFull: true });
    const v = await h.backend.verify!();
    expect(v).toMatchObject({ mismatchCount: 0, objects: 0, skipped: expect.stringContaining('the netlink helper died') });
  });

  it('verifies only a full sync, once: before any sync, after a partial one, and a second time it is skipped', async () => {
    const h = harness({ config });
    expect((await h.backend.verify!()).skipped).toMatch(/no full sync/);
    const state = stateFromObjects('node-a', objects());
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    expect((await h.backend.verify!()).skipped).toBeUndefined();
    expect((await h.backend.verify!()).skipped).toMatch(/no full sync/);
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    state.onEndpointSlice(null, objects(['10.244.1.9'])[1] as never);
    const partial = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(partial.full).toBe(false);
    expect((await h.backend.verify!()).skipped).toMatch(/no full sync/);
  });

  it('counts iptables-save output when the runner has no counter of its own (rules per chain)', async () => {
    const kernel = new SimulatedIptables({ flavor: 'legacy' });
    const runner = lossyIptables(kernel, (l) => (/^-A KUBE-SEP-.* -j DNAT .*10\.244\.1\.3:8080/.test(l) ? null : l));
    delete runner.countChains;
    const h = harness({ config, kernel, runner });
    await h.backend.sync({ state: stateFromObjects('node-a', objects()).checkout(), forceFull: true });
    const v = await h.backend.verify!();
    expect(v.mismatches).toEqual([{ object: expect.stringMatching(/^chain nat KUBE-SEP-/), what: 'rules', want: 2, got: 1, servicePort: 'shop/web:http/TCP' }]);
  });
});

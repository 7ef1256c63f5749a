import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { NftRunner } from '../../kernel/nft.ts';
import { SimulatedNft } from '../../kernel/nft-simulated.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { runGoldenCase } from '../golden.ts';
import { nftablesGolden } from './golden.ts';
import { nftHarness, testConfig } from './testing.ts';

/**
 * Verified programming in nftables mode: after a full sync, the counts of the
 * table the kernel holds must equal those of the table kproxy meant to write
 * (verify.ts). Every golden case verifies clean over the simulated kernel; a
 * writer that loses part of what it is given (the way the netlink encoder
 * once cut big sets short) is caught, with the object named.
 */

const DIR = join(import.meta.dirname, 'testdata');

describe('nftables verification', () => {
  for (const name of readdirSync(DIR)) {
    it(`finds the table of golden case ${name} as written`, async () => {
      const run = await runGoldenCase(nftablesGolden, join(DIR, name, 'input.yaml'));
      const v = await run.harness.backend.verify!();
      expect(v.skipped).toBeUndefined();
      expect(v.mismatches).toEqual([]);
      expect(v.objects).toBeGreaterThan(10);
    });
  }

  /** lossyKernel: a simulated kernel behind a writer that rewrites every transaction with `lose` first. */
  function lossyKernel(lose: (line: string) => string | null): { runner: NftRunner; kernel: SimulatedNft } {
    const kernel = new SimulatedNft();
    const runner: NftRunner = {
      run: (text) =>
        kernel.run(
          text
            .split('\n')
            .map(lose)
            .filter((l): l is string => l !== null)
            .join('\n'),
        ),
      listTable: (f, n) => kernel.listTable(f, n),
      deleteTable: (f, n) => kernel.deleteTable(f, n),
      countTable: (f, n, ask) => kernel.countTable(f, n, ask),
    };
    return { runner, kernel };
  }

  const config = testConfig({ mode: 'nftables', clusterCIDRs: ['10.244.0.0/16'] });
  const tcp = [{ name: 'http', port: 80, protocol: 'TCP' }];
  const objects = () => [
    makeService(
      'shop',
      'web',
      { clusterIP: '10.96.0.10', ports: tcp, type: 'LoadBalancer', loadBalancerSourceRanges: ['192.0.2.0/24', '198.51.100.7/32', '203.0.113.0/25'] },
      { status: { loadBalancer: { ingress: [{ ip: '10.1.2.3' }] } } },
    ),
    makeSlice('shop', 'web', 'web-1', [ep('10.244.1.1'), ep('10.244.1.2'), ep('10.244.1.3')], [{ name: 'http', port: 8080, protocol: 'TCP' }]),
  ];

  async function syncThrough(lose: (line: string) => string | null) {
    const { runner } = lossyKernel(lose);
    const h = nftHarness({ config, kernel: runner as SimulatedNft });
    const r = await h.backend.sync({ state: stateFromObjects('node-a', objects()).checkout(), forceFull: true });
    expect(r.error).toBeUndefined();
    return h.backend.verify!();
  }

  it('catches a numgen verdict map that lost an element: the endpoint chain it named is referenced once less', async () => {
    const v = await syncThrough((l) => (l.includes('numgen random mod 3 vmap') ? l.replace(/ , 2 : goto \S+ \}$/, ' }') : l));
    expect(v.mismatchCount).toBe(1);
    expect(v.mismatches[0]).toMatchObject({ what: 'rules and verdicts naming it', want: 3, got: 2, servicePort: expect.stringContaining('shop/web') });
    expect(v.mismatches[0].object).toMatch(/^chain endpoint-.*10\.244\.1\.3\/8080$/);
  });

  it('catches a source-range set that lost a range: the firewall fails open otherwise', async () => {
    const v = await syncThrough((l) => (l.includes('saddr != {') ? l.replace(' , 203.0.113.0/25 }', ' }') : l));
    expect(v.mismatchCount).toBe(1);
    expect(v.mismatches[0]).toMatchObject({ what: 'elements in its anonymous set', object: expect.stringMatching(/^rule 1 of chain firewall-/), want: 7, got: 5 });
    // (In the kernel's units: each range a start and an end element, after the end of the gap below the first range.)
  });

  it('catches a named set that lost an element, and a chain that lost a rule', async () => {
    const v = await syncThrough((l) => (l.startsWith('add element ip kube-proxy cluster-ips') || /^add rule ip kube-proxy endpoint-.*10\.244\.1\.2\/8080 .*dnat/.test(l) ? null : l));
    expect(v.mismatches.map((m) => [m.object.replace(/-[A-Z0-9]{8}-.*/, ''), m.what, m.want, m.got])).toEqual([
      ['chain endpoint', 'rules and verdicts naming it', 3, 2],
      ['set cluster-ips', 'elements', 1, 0],
    ]);
  });

  it('catches a table that is not there at all', async () => {
    const { runner, kernel } = lossyKernel((l) => l);
    const h = nftHarness({ config, kernel: runner as SimulatedNft });
    await h.backend.sync({ state: stateFromObjects('node-a', objects()).checkout(), forceFull: true });
    await kernel.deleteTable('ip', 'kube-proxy');
    const v = await h.backend.verify!();
    expect(v.mismatches).toEqual([{ object: 'table ip kube-proxy', what: 'chains', want: expect.any(Number), got: null }]);
  });

  it('reports a kernel that cannot be read as skipped, never as a mismatch', async () => {
    const { runner } = lossyKernel((l) => l);
    runner.countTable = async () => {
      throw new Error('the netlink helper died');
    };
    const h = nftHarness({ config, kernel: runner as SimulatedNft });
    await h.backend.sync({ state: stateFromObjects('node-a', objects()).checkout(), forceFull: true });
    const v = await h.backend.verify!();
    expect(v).toMatchObject({ mismatchCount: 0, skipped: expect.stringContaining('the netlink helper died') });
  });
});

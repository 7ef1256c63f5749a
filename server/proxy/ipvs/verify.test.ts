import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { IpsetRunner } from '../../kernel/ipset.ts';
import type { SimulatedIpset } from '../../kernel/ipset-simulated.ts';
import type { IpvsRunner } from '../../kernel/ipvs.ts';
import type { SimulatedIpvs } from '../../kernel/ipvs-simulated.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { runGoldenCase } from '../golden.ts';
import { ipvsGolden } from './golden.ts';
import { ipvsConfig, ipvsHarness, type HarnessOptions } from './testing.ts';
import { lossyIptables, rewriteLines } from '../xtables/testing.ts';

/**
 * Verified programming in IPVS mode: after a full sync every virtual server
 * holds its real servers (the wanted ones and those draining), every set of
 * the family its entries, kube-ipvs0 its addresses, and the glue chains
 * their rules. Every golden case verifies clean over the simulated kernel; a
 * writer that loses a real server, a set entry or a rule is caught, with the
 * object named.
 */

const DIR = join(import.meta.dirname, 'testdata');

/** lossyIpvs / lossyIpset: the simulated kernels behind writers that rewrite every batch with `lose` first. */
const lossyIpvs =
  (lose: (line: string) => string | null) =>
  (k: SimulatedIpvs): IpvsRunner => ({ save: () => k.save(), list: () => k.list(), stats: () => k.stats(), restore: (b) => k.restore(rewriteLines(b, lose)) });
const lossyIpset =
  (lose: (line: string) => string | null) =>
  (k: SimulatedIpset): IpsetRunner => ({ save: () => k.save(), countEntries: () => k.countEntries(), restore: (b) => k.restore(rewriteLines(b, lose)) });

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
const config = ipvsConfig({ clusterCIDRs: ['10.244.0.0/16'], ipvs: { excludeCIDRs: ['10.200.0.0/16'] } });

async function syncThrough(wrap: HarnessOptions['wrap'] = {}) {
  const h = ipvsHarness({ config, wrap });
  const state = stateFromObjects('node-a', objects());
  await h.sync(state, true);
  return { h, state };
}

describe('IPVS verification', () => {
  for (const name of readdirSync(DIR)) {
    it(`finds golden case ${name} as written`, async () => {
      const run = await runGoldenCase(ipvsGolden, join(DIR, name, 'input.yaml'));
      const v = await run.harness.backend.verify!();
      expect(v.skipped).toBeUndefined();
      expect(v.mismatches).toEqual([]);
      // Every set of the family, kube-ipvs0, the glue chains, their jumps and the canaries at least.
      expect(v.objects).toBeGreaterThan(40);
    });
  }

  it('catches a virtual server that lost a real server, naming its service port', async () => {
    const { h } = await syncThrough({ ipvs: lossyIpvs((l) => (l.startsWith('-a -t 10.96.0.10:80 -r 10.244.1.2:8080') ? null : l)) });
    const v = await h.backend.verify!();
    expect(v.mismatches).toEqual([{ object: 'virtual server 10.96.0.10:80/TCP', what: 'real servers', want: 3, got: 2, servicePort: 'shop/web:http/TCP' }]);
  });

  it('catches a set that lost an entry: the service answers to no one otherwise', async () => {
    const { h } = await syncThrough({ ipset: lossyIpset((l) => (l.startsWith('add KUBE-CLUSTER-IP ') ? null : l)) });
    const v = await h.backend.verify!();
    expect(v.mismatches).toEqual([{ object: 'ipset KUBE-CLUSTER-IP', what: 'entries', want: 1, got: 0 }]);
  });

  it('catches a glue chain that lost a rule, for either flavour of count', async () => {
    for (const flavor of ['nft', 'legacy'] as const) {
      const { h } = await syncThrough({
        iptables: (k) => {
          // The harness's simulated iptables is of the nft flavour; a legacy twin counts rules.
          if (flavor === 'legacy') Object.defineProperty(k, 'flavor', { value: 'legacy' });
          return lossyIptables(k, (l) => (/^-A KUBE-SERVICES .*KUBE-CLUSTER-IP.*-j ACCEPT/.test(l) ? null : l));
        },
      });
      const v = await h.backend.verify!();
      expect(v.mismatches, flavor).toEqual([{ object: 'chain nat KUBE-SERVICES', what: flavor === 'nft' ? 'rules and jumps to it' : 'rules', want: expect.any(Number), got: expect.any(Number) }]);
      expect(v.mismatches[0].want - v.mismatches[0].got!).toBe(1);
    }
  });

  it('counts the real servers draining at weight 0 as held, and verifies clean', async () => {
    const { h, state } = await syncThrough();
    state.onEndpointSlice(null, objects(['10.244.1.1', '10.244.1.2'])[1] as never);
    await h.sync(state, true);
    // 10.244.1.3 drains behind the cluster IP and the node port on eth0.
    expect(h.backend.draining().map((d) => `${d.vsKey} ${d.rs.address}`)).toEqual(['10.0.0.10:30080/TCP 10.244.1.3', '10.96.0.10:80/TCP 10.244.1.3']);
    const v = await h.backend.verify!();
    expect(v.mismatches).toEqual([]);
  });

  it('catches what someone changed after the sync: a virtual server added, a set flushed, an address gone; not what kproxy leaves alone', async () => {
    const { h } = await syncThrough();
    await h.ipvs.restore('-A -t 10.96.0.99:80 -s rr\n-A -t 10.200.0.1:80 -s rr\n-A -t [fd00::1]:80 -s rr\n');
    await h.ipset.restore('flush KUBE-NODE-PORT-TCP\n');
    await h.netlink.batch('addr del 10.96.0.10/32 dev kube-ipvs0\n');
    const v = await h.backend.verify!();
    expect(v.mismatches.map((m) => [m.object, m.what, m.want, m.got])).toEqual([
      // 10.200.0.1 is in ipvs.excludeCIDRs and fd00::1 of the other family: not kproxy's.
      ['virtual server 10.96.0.99:80/TCP', 'virtual server', 0, 1],
      ['ipset KUBE-NODE-PORT-TCP', 'entries', 1, 0],
      ['link kube-ipvs0', 'IPv4 addresses', 1, 0],
    ]);
  });

  it('reports a kernel that cannot be read as skipped, and verifies a full sync only, once', async () => {
    const { h, state } = await syncThrough({
      ipset: (k) => ({
        save: () => k.save(),
        restore: (b) => k.restore(b),
        countEntries: async () => {
          throw new Error('ipset list -t: command not found');
        },
      }),
    });
    expect(await h.backend.verify!()).toMatchObject({ mismatchCount: 0, skipped: expect.stringContaining('ipset list -t: command not found') });
    expect((await h.backend.verify!()).skipped).toMatch(/no full sync/);
    state.onEndpointSlice(null, objects(['10.244.1.9'])[1] as never);
    expect((await h.sync(state)).full).toBe(false);
    expect((await h.backend.verify!()).skipped).toMatch(/no full sync/);
  });
});

import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { runGoldenCase } from '../golden.ts';
import { userspaceGolden } from './golden.ts';
import { harness } from './testing.ts';
import { lossyIptables } from '../xtables/testing.ts';

/**
 * Verified programming in the userspace mode: after a full sync each portal
 * chain holds the rules the sync wrote, the chains of other modes it removed
 * are gone, and the jumps into the portal chains are there. Every golden
 * case verifies clean over the simulated kernel; a writer that loses a rule,
 * a jump or a chain's removal is caught, with the chain named.
 */

const DIR = join(import.meta.dirname, 'testdata');
const cases = readdirSync(DIR).filter((d) => existsSync(join(DIR, d, 'input.yaml')));

const objects = () => [
  makeService('shop', 'web', { clusterIP: '10.96.0.10', type: 'NodePort', ports: [{ name: 'http', port: 80, protocol: 'TCP', nodePort: 30080 }] }),
  makeSlice('shop', 'web', 'web-1', [ep('10.244.1.1'), ep('10.244.1.2')], [{ name: 'http', port: 8080, protocol: 'TCP' }]),
];

async function syncThrough(lose: (line: string) => string | null, before?: (h: ReturnType<typeof harness>) => Promise<void>) {
  const h = harness({ iptables: (k) => lossyIptables(k, lose) });
  await before?.(h);
  const r = await h.backend.sync({ state: stateFromObjects('node-a', objects()).checkout(), forceFull: true });
  expect(r.error).toBeUndefined();
  return { h, v: await h.backend.verify!() };
}

describe('userspace verification', () => {
  for (const name of cases) {
    it(`finds golden case ${name} as written`, async () => {
      const run = await runGoldenCase(userspaceGolden, join(DIR, name, 'input.yaml'));
      const v = await run.harness.backend.verify!();
      expect(v.skipped).toBeUndefined();
      expect(v.mismatches).toEqual([]);
      // The five portal chains and the five jumps into them.
      expect(v.objects).toBe(10);
    });
  }

  it('catches a portal chain that lost a rule', async () => {
    const { v } = await syncThrough((l) => (l.startsWith('-A KUBE-PORTALS-HOST ') ? null : l));
    expect(v.mismatches).toEqual([{ object: 'chain nat KUBE-PORTALS-HOST', what: 'rules and jumps to it', want: 2, got: 1 }]);
  });

  it('catches a jump into a portal chain that did not reach the kernel', async () => {
    const { v } = await syncThrough((l) => (l.startsWith('-A OUTPUT ') && l.endsWith('-j KUBE-NODEPORT-HOST') ? null : l));
    expect(v.mismatches).toEqual([{ object: 'chain nat OUTPUT', what: 'rules jumping to KUBE-NODEPORT-HOST', want: 1, got: 0 }]);
  });

  it("catches another mode's chain the sync removed and the kernel kept; other programs' rules never count", async () => {
    const { v } = await syncThrough(
      (l) => (l === '-X KUBE-SVC-ABCDEFGHIJKLMNOP' ? null : l),
      async (h) => {
        await h.iptables.restore(
          [
            '*nat',
            ':KUBE-SVC-ABCDEFGHIJKLMNOP - [0:0]',
            ':DOCKER - [0:0]',
            '-A DOCKER -i docker0 -j RETURN',
            '-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER',
            'COMMIT',
            '*filter',
            '-A FORWARD -o docker0 -j ACCEPT',
            'COMMIT',
            '',
          ].join('\n'),
        );
      },
    );
    expect(v.mismatches).toEqual([{ object: 'chain nat KUBE-SVC-ABCDEFGHIJKLMNOP', what: 'chain', want: 0, got: 1 }]);
  });

  it('reports a kernel that cannot be read as skipped, and verifies a full sync only, once', async () => {
    const h = harness({
      iptables: (k) => {
        const r = lossyIptables(k, (l) => l);
        r.countChains = async () => {
          throw new Error('iptables-save: Permission denied');
        };
        return r;
      },
    });
    expect((await h.backend.verify!()).skipped).toMatch(/no full sync/);
    await h.backend.sync({ state: stateFromObjects('node-a', objects()).checkout(), forceFull: true });
    expect(await h.backend.verify!()).toMatchObject({ mismatchCount: 0, skipped: expect.stringContaining('Permission denied') });
    expect((await h.backend.verify!()).skipped).toMatch(/no full sync/);
  });
});

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { NftTransactionFailure } from '../../server/kernel/nft.ts';
import { NFT_PROBE_CASES } from './harness/nft-probe-cases.ts';
import { SimulatedNft } from '../../server/kernel/nft-simulated.ts';
import { tiers } from '../tiers.ts';
import { addNamespace, deleteNamespace, HARNESS_PREFIX, ipBatch } from './harness/netns.ts';
import { nsNft, tableShape } from './harness/nft.ts';

/**
 * The simulated nftables kernel (what --dry-run and the unit tests program)
 * against real nft 1.0.6 in a private namespace: every probe transaction is
 * accepted or refused by both, with the same errno, and after each step both
 * list the same table (real nft's JSON rendered by nft-listing.ts).
 */
let seq = 0;
const made: string[] = [];

afterEach(async () => {
  for (const ns of made.splice(0)) await deleteNamespace(ns);
});

async function namespace(): Promise<string> {
  const ns = `${HARNESS_PREFIX}nftsim-${seq++}`;
  await addNamespace(ns);
  made.push(ns);
  return ns;
}

const outcome = (p: Promise<void>) =>
  p.then(
    () => 'applied',
    (e: unknown) =>
      e instanceof NftTransactionFailure
        ? `refused: ${/(File exists|No such file or directory|Device or resource busy|Operation not supported|comment too long, 128 characters maximum allowed)/.exec(e.message)?.[1] ?? e.message}`
        : `error: ${String(e)}`,
  );

describe.skipIf(!tiers().kernel.ok)('the simulated nftables kernel agrees with real nft', () => {
  for (const c of NFT_PROBE_CASES) {
    it(c.name, async () => {
      const real = nsNft(await namespace());
      const sim = new SimulatedNft();
      for (const [i, step] of c.steps.entries()) {
        const [r, s] = [await outcome(real.run(step.input + '\n')), await outcome(sim.run(step.input + '\n'))];
        expect({ step: i, real: r }).toEqual({ step: i, real: step.refused ? `refused: ${step.refused}` : 'applied' });
        expect({ step: i, simulated: s }).toEqual({ step: i, simulated: r });
        expect(tableShape(await sim.listTable('ip', 'kproxy-probe')), `step ${i}`).toEqual(tableShape(await real.listTable('ip', 'kproxy-probe')));
      }
    });
  }
});

describe.skipIf(!tiers().kernel.ok)('every nftables golden table loads into real nft and lists back as written', () => {
  const TESTDATA = join(import.meta.dirname, '../../server/proxy/nftables/testdata');
  const cases = readdirSync(TESTDATA).filter((d) => existsSync(join(TESTDATA, d, 'expected.nft')));

  it('has cases', () => expect(cases.length).toBeGreaterThan(10));

  for (const name of cases) {
    it(name, async () => {
      const ns = await namespace();
      // The bridge-interface detector names cbr0, which nft resolves when it loads the rule.
      await ipBatch(ns, ['link add cbr0 type veth peer name cbr0-peer']);
      const text = readFileSync(join(TESTDATA, name, 'expected.nft'), 'utf8');
      const real = nsNft(ns);
      await real.run(text);
      const sim = new SimulatedNft();
      await sim.run(text);
      expect(tableShape(await real.listTable('ip', 'kube-proxy'))).toEqual(tableShape(await sim.listTable('ip', 'kube-proxy')));
    });
  }
});

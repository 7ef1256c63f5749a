import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../server/clock-fake.ts';
import { testConfig } from '../../server/config/testing.ts';
import { FakeNetInterfaces } from '../../server/kernel/netif-fake.ts';
import { SimulatedNft } from '../../server/kernel/nft-simulated.ts';
import type { NftRunner } from '../../server/kernel/nft.ts';
import { silentLogger } from '../../server/log.ts';
import { KUBE_PROXY_TABLE } from '../../server/proxy/nftables/names.ts';
import { createNftablesBackend, type NftablesBackend } from '../../server/proxy/nftables/proxier.ts';
import { staleChains } from '../../server/proxy/nftables/testing.ts';
import { ProxyState } from '../../server/proxy/proxy-state.ts';
import { tiers } from '../tiers.ts';
import { addNamespace, deleteNamespace, HARNESS_PREFIX } from './harness/netns.ts';
import { nsNft, tableShape } from './harness/nft.ts';
import { exampleObjects, exampleSteps, feed } from './harness/nft-examples.ts';

/**
 * The simulated nftables kernel that --dry-run programs against real nft,
 * sync after sync, over the example cluster (deploy/examples/): two nftables
 * backends get the same changes, one writing into a private namespace's real
 * kernel, one into the simulation. After every sync both sent the same
 * transaction and both kernels list the same table; then a restart over the
 * real kernel finds it right and writes nothing.
 */
const config = testConfig({ mode: 'nftables', clusterCIDRs: ['10.244.0.0/16'] });

/** Side is one backend and the state that feeds it. */
interface Side {
  state: ProxyState;
  backend: NftablesBackend;
  runner: NftRunner;
}

function side(runner: NftRunner, clock: FakeClock): Side {
  const state = new ProxyState({ family: 'IPv4', nodeName: 'node-a', clock });
  const netif = new FakeNetInterfaces();
  const backend = createNftablesBackend({ config, nodeName: 'node-a', family: 'IPv4', runner, netif, clock, logger: silentLogger });
  return { state, backend, runner };
}

describe.skipIf(!tiers().kernel.ok)('the simulated nftables kernel and real nft, sync after sync over deploy/examples/', () => {
  const ns = `${HARNESS_PREFIX}nft-examples`;
  beforeAll(async () => {
    await addNamespace(ns);
  });
  afterAll(async () => {
    await deleteNamespace(ns);
  });

  it('send the same transactions and hold the same table', async () => {
    const clock = new FakeClock();
    const real = side(nsNft(ns), clock);
    const sim = side(new SimulatedNft(), clock);
    const objects = exampleObjects();
    for (const s of [real, sim]) feed(s.state, objects);
    const steps = exampleSteps(objects, 'IPv4');
    for (const [i, [what, change, advance]] of steps.entries()) {
      clock.advance(advance);
      for (const x of [real, sim]) change(x.state);
      const rr = await real.backend.sync({ state: real.state.checkout(), forceFull: i === 0 });
      const sr = await sim.backend.sync({ state: sim.state.checkout(), forceFull: i === 0 });
      expect(rr.error, `${what}: real nft`).toBeUndefined();
      expect(sr.error, `${what}: simulated`).toBeUndefined();
      expect(rr.batch, what).toBe(sr.batch);
      expect(tableShape(await sim.runner.listTable('ip', KUBE_PROXY_TABLE)), what).toEqual(tableShape(await real.runner.listTable('ip', KUBE_PROXY_TABLE)));
      expect(rr.full, what).toBe(i === 0 || i === steps.length - 1);
    }
    // The same chains wait for deletion on both sides (flushed, no longer wanted).
    const stale = async (x: Side) => staleChains(await x.runner.listTable('ip', KUBE_PROXY_TABLE));
    expect(await stale(real)).toEqual(await stale(sim));

    // A restart over the real kernel lists it, finds it right, and writes nothing.
    const restarted = side(nsNft(ns), clock);
    feed(restarted.state, objects);
    for (const [, change] of steps) change(restarted.state);
    const again = await restarted.backend.sync({ state: restarted.state.checkout(), forceFull: true });
    expect(again.error).toBeUndefined();
    expect(again.batch).toBeUndefined();
  });
});

import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../server/clock-fake.ts';
import { testConfig } from '../../server/config/testing.ts';
import { FakeNetInterfaces } from '../../server/kernel/netif-fake.ts';
import { SimulatedNft } from '../../server/kernel/nft-simulated.ts';
import type { NftRunner } from '../../server/kernel/nft.ts';
import { silentLogger } from '../../server/log.ts';
import type { EndpointSlice, KubeObject, Service, ServiceCIDR } from '../../server/proxy/kube-objects.ts';
import { KUBE_PROXY_TABLE } from '../../server/proxy/nftables/names.ts';
import { createNftablesBackend, STALE_CHAIN_DELAY_MS, type NftablesBackend } from '../../server/proxy/nftables/proxier.ts';
import { staleChains } from '../../server/proxy/nftables/testing.ts';
import { ProxyState } from '../../server/proxy/proxy-state.ts';
import { parseManifest } from '../../server/sources/file/manifest.ts';
import { tiers } from '../tiers.ts';
import { addNamespace, deleteNamespace, HARNESS_PREFIX } from './harness/netns.ts';
import { nsNft, tableShape } from './harness/nft.ts';

/**
 * The simulated nftables kernel that --dry-run programs against real nft,
 * sync after sync, over the example cluster (deploy/examples/): two nftables
 * backends get the same changes, one writing into a private namespace's real
 * kernel, one into the simulation. After every sync both sent the same
 * transaction and both kernels list the same table; then a restart over the
 * real kernel finds it right and writes nothing.
 */
const EXAMPLES = join(import.meta.dirname, '../../deploy/examples');
const config = testConfig({ mode: 'nftables', clusterCIDRs: ['10.244.0.0/16'] });

function exampleObjects(): KubeObject[] {
  return readdirSync(EXAMPLES)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .flatMap((f) => parseManifest(f, readFileSync(join(EXAMPLES, f), 'utf8')).objects.map((o) => o.object));
}

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

function feed(state: ProxyState, objects: readonly KubeObject[]): void {
  for (const o of objects) {
    if (o.kind === 'Service') state.onService(null, o as Service);
    else if (o.kind === 'EndpointSlice') state.onEndpointSlice(null, o as EndpointSlice);
    else if (o.kind === 'ServiceCIDR') state.onServiceCIDR(null, o as ServiceCIDR);
    else if (o.kind === 'Node') state.onNode(null, o as never);
  }
  for (const k of ['Service', 'EndpointSlice', 'Node'] as const) state.onSynced(k);
}

const clone = <T>(o: T): T => JSON.parse(JSON.stringify(o)) as T;

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
    const find = (kind: string, name: string) => objects.find((o) => o.kind === kind && o.metadata?.name === name)!;
    for (const s of [real, sim]) feed(s.state, objects);

    const more: ServiceCIDR = { apiVersion: 'networking.k8s.io/v1', kind: 'ServiceCIDR', metadata: { name: 'more' }, spec: { cidrs: ['10.97.0.0/16'] } };
    const shopServices = objects.filter((o): o is Service => o.kind === 'Service' && o.metadata?.namespace === 'shop');
    /** Each step: what happens, the change to a state, and how long before it the clock moves. */
    const steps: [string, (s: ProxyState) => void, number][] = [
      ['first full sync', () => {}, 0],
      [
        'frontend loses its node-b endpoints',
        (s) => {
          const prev = find('EndpointSlice', 'frontend-abc12') as EndpointSlice;
          const cur = clone(prev);
          cur.endpoints = cur.endpoints!.filter((e) => e.nodeName !== 'node-b');
          s.onEndpointSlice(prev, cur);
        },
        0,
      ],
      [
        'api becomes a LoadBalancer with source ranges and ClientIP affinity',
        (s) => {
          const prev = find('Service', 'api') as Service;
          const cur = clone(prev);
          cur.spec!.type = 'LoadBalancer';
          cur.spec!.loadBalancerSourceRanges = ['198.51.100.0/25', '198.51.100.128/25', '203.0.113.7/32'];
          cur.spec!.sessionAffinity = 'ClientIP';
          cur.status = { loadBalancer: { ingress: [{ ip: '192.0.2.99' }] } };
          s.onService(prev, cur);
        },
        0,
      ],
      ['the frontend endpoints come back (their chains were stale, not yet deleted)', (s) => s.onEndpointSlice(null, find('EndpointSlice', 'frontend-abc12') as EndpointSlice), 0],
      ['a second later: stale chains deleted, nothing else', () => {}, STALE_CHAIN_DELAY_MS],
      ['every shop Service goes', (s) => shopServices.forEach((o) => s.onService(o, null)), 0],
      ['and comes back a second later', (s) => shopServices.forEach((o) => s.onService(null, o)), STALE_CHAIN_DELAY_MS],
      ['a second ServiceCIDR (a full sync: the node facts changed)', (s) => s.onServiceCIDR(null, more), 0],
    ];
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

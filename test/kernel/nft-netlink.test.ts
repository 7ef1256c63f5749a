import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../server/clock-fake.ts';
import { testConfig } from '../../server/config/testing.ts';
import type { IPFamily } from '../../server/net/ip.ts';
import { FakeNetInterfaces } from '../../server/kernel/netif-fake.ts';
import { NftTransactionFailure, type NftRunner } from '../../server/kernel/nft.ts';
import type { NetlinkNftRunner } from '../../server/kernel/nft-netlink.ts';
import { countsOf, type NftTableCounts } from '../../server/kernel/nft-counts.ts';
import { silentLogger } from '../../server/log.ts';
import { createNftablesBackend, type NftablesBackend } from '../../server/proxy/nftables/proxier.ts';
import { ProxyState } from '../../server/proxy/proxy-state.ts';
import { tiers } from '../tiers.ts';
import { addNamespace, deleteNamespace, HARNESS_PREFIX, ipBatch } from './harness/netns.ts';
import { listText, nsNetlinkNft, nsNft, tableShape } from './harness/nft.ts';
import { exampleObjects, exampleSteps, feed } from './harness/nft-examples.ts';

/**
 * The netlink runner (nftables mode's default writer) against `nft -f`, in
 * real kernels: the same transactions through each, into namespaces of their
 * own, must leave tables that `nft list table` prints identically, and the
 * same refusals must name the same lines. Covers every golden table (in one
 * batch, and in the phases of a load from nothing), the example cluster sync
 * after sync in both families (partial syncs, deletions, stale chains), and
 * what the encoder hands to nft.
 */
let seq = 0;
const made: string[] = [];
const runners: NetlinkNftRunner[] = [];

async function namespace(): Promise<string> {
  const ns = `${HARNESS_PREFIX}nfnl-${seq++}`;
  await addNamespace(ns);
  made.push(ns);
  // The bridge-interface detector names cbr0, which is resolved when a rule is loaded.
  await ipBatch(ns, ['link add cbr0 type bridge']);
  return ns;
}

async function netlink(ns: string, opts: { phasedFrom?: number } = {}): Promise<NetlinkNftRunner> {
  const r = await nsNetlinkNft(ns, opts);
  runners.push(r);
  return r;
}

async function cleanup(): Promise<void> {
  for (const r of runners.splice(0)) r.close();
  for (const ns of made.splice(0)) await deleteNamespace(ns);
}

const GOLDEN = join(import.meta.dirname, '../../server/proxy/nftables/testdata');

/** FOREIGN_TABLES: what iptables-nft keeps in the same family (its chains jump to each other, as kube-proxy's never do). */
const FOREIGN_TABLES = [
  'add table ip nat',
  'add chain ip nat PREROUTING { type nat hook prerouting priority -100 ; }',
  'add chain ip nat DOCKER',
  'add rule ip nat PREROUTING fib daddr type local jump DOCKER',
  'add table ip filter',
  'add chain ip filter FORWARD { type filter hook forward priority 0 ; }',
  'add chain ip filter DOCKER-USER',
  'add rule ip filter FORWARD jump DOCKER-USER',
  'add set ip filter docker-ips { type ipv4_addr ; }',
  'add element ip filter docker-ips { 172.17.0.2 }',
].join('\n');

describe.skipIf(!tiers().kernel.ok)('every golden table written over netlink lists as nft -f of it', () => {
  afterEach(cleanup);
  const cases = readdirSync(GOLDEN).filter((d) => existsSync(join(GOLDEN, d, 'expected.nft')));

  it('has cases', () => expect(cases.length).toBeGreaterThan(10));

  for (const name of cases) {
    it(name, async () => {
      const text = readFileSync(join(GOLDEN, name, 'expected.nft'), 'utf8');
      const [viaNft, oneBatch, phased] = [await namespace(), await namespace(), await namespace()];
      await nsNft(viaNft).run(text);
      // Other tables of the family beside it (iptables-nft's, as on a node running Docker): the kernel's chain
      // dump answers with their chains too, which a listing or a count of kube-proxy's table must leave out.
      await nsNft(oneBatch).run(FOREIGN_TABLES);
      const one = await netlink(oneBatch);
      await one.run(text);
      expect(one.lastRun()).toMatchObject({ writer: 'netlink' });
      // The same load in the phases of a table made from nothing (a first sync at 10,000 services).
      const inPhases = await netlink(phased, { phasedFrom: 1 });
      await inPhases.run(text);
      expect(inPhases.lastRun()?.phaseMs?.length).toBeGreaterThanOrEqual(3);
      const want = await listText(viaNft);
      expect(await listText(oneBatch)).toBe(want);
      expect(await listText(phased)).toBe(want);
      // Read back over netlink, the table is what nft -j lists.
      const listed = tableShape(await nsNft(viaNft).listTable('ip', 'kube-proxy'));
      expect(tableShape(await one.listTableForSync!('ip', 'kube-proxy'))).toEqual(listed);
      expect(tableShape(await inPhases.listTableForSync!('ip', 'kube-proxy'))).toEqual(listed);
      // A sync's verification reads the kernel's own counters: they must say what the listing says.
      const table = (await nsNft(viaNft).listTable('ip', 'kube-proxy'))!;
      const ask = { sets: [...table.sets.keys()], anonymousIn: [...table.chains.keys()] };
      const plain = (c: NftTableCounts | null) =>
        c && { chainUse: Object.fromEntries(c.chainUse), setNames: [...c.setNames].sort(), elements: Object.fromEntries(c.elements), anonymous: Object.fromEntries(c.anonymous) };
      expect(plain(await one.countTable!('ip', 'kube-proxy', ask))).toEqual(plain(countsOf(table, ask)));
    });
  }
});

interface Side {
  state: ProxyState;
  backend: NftablesBackend;
}

function side(runner: NftRunner, clock: FakeClock, family: IPFamily): Side {
  const config = testConfig({ mode: 'nftables', clusterCIDRs: ['10.244.0.0/16', 'fd00:10:244::/56'] });
  const state = new ProxyState({ family, nodeName: 'node-a', clock });
  const backend = createNftablesBackend({ config, nodeName: 'node-a', family, runner, netif: new FakeNetInterfaces(), clock, logger: silentLogger });
  return { state, backend };
}

describe.skipIf(!tiers().kernel.ok)('nftables mode over netlink and over nft -f, sync after sync over deploy/examples/', () => {
  afterAll(cleanup);

  for (const family of ['IPv4', 'IPv6'] as const) {
    it(`${family}: the same transactions leave the same table`, async () => {
      const nftFamily = family === 'IPv4' ? 'ip' : 'ip6';
      const clock = new FakeClock();
      const [nsNetlink, nsText] = [await namespace(), await namespace()];
      const runner = await netlink(nsNetlink);
      const viaNetlink = side(runner, clock, family);
      const viaNft = side(nsNft(nsText), clock, family);
      const objects = exampleObjects();
      for (const s of [viaNetlink, viaNft]) feed(s.state, objects);
      const steps = exampleSteps(objects, family);
      for (const [i, [what, change, advance]] of steps.entries()) {
        clock.advance(advance);
        for (const x of [viaNetlink, viaNft]) change(x.state);
        const a = await viaNetlink.backend.sync({ state: viaNetlink.state.checkout(), forceFull: i === 0 });
        const b = await viaNft.backend.sync({ state: viaNft.state.checkout(), forceFull: i === 0 });
        expect(a.error, `${what}: netlink`).toBeUndefined();
        expect(b.error, `${what}: nft`).toBeUndefined();
        expect(a.batch, what).toBe(b.batch);
        if (a.batch) expect(runner.lastRun()?.writer, what).toBe('netlink');
        expect(await listText(nsNetlink, nftFamily), what).toBe(await listText(nsText, nftFamily));
        expect(tableShape(await runner.listTableForSync!(nftFamily, 'kube-proxy')), `${what}: read over netlink`).toEqual(tableShape(await nsNft(nsText).listTable(nftFamily, 'kube-proxy')));
        expect(runner.lastList()?.writer).toBe('netlink');
      }
      // A restart reading the table over netlink finds it right and writes nothing.
      const restarted = side(runner, clock, family);
      feed(restarted.state, objects);
      for (const [, change] of steps) change(restarted.state);
      const again = await restarted.backend.sync({ state: restarted.state.checkout(), forceFull: true });
      expect(again.error).toBeUndefined();
      expect(again.batch).toBeUndefined();
    });
  }
});

describe.skipIf(!tiers().kernel.ok)('what the kernel refuses over netlink, it refuses with nft -f, on the same lines', () => {
  let viaNft = '';
  let viaNetlink = '';
  let runner: NetlinkNftRunner;
  const base = readFileSync(join(GOLDEN, 'upstream-overall', 'expected.nft'), 'utf8');
  beforeAll(async () => {
    [viaNft, viaNetlink] = [await namespace(), await namespace()];
    await nsNft(viaNft).run(base);
    runner = await netlink(viaNetlink);
    await runner.run(base);
  });
  afterAll(cleanup);

  const failing: [string, string[]][] = [
    ['an element for a map that does not exist', ['add element ip kube-proxy no-such-map { 10.0.0.1 . tcp . 80 : drop }']],
    ['a chain still referenced', ['add chain ip kube-proxy spare', 'delete chain ip kube-proxy mark-for-masquerade']],
    ['a goto to a missing chain, after good lines', ['add chain ip kube-proxy spare', 'add rule ip kube-proxy spare drop', 'add rule ip kube-proxy spare goto no-such-chain']],
    ['an element already there with another verdict', ['add element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 : goto service-42NFTM6N-ns2/svc2/tcp/p80 }']],
    ['a set deleted while a rule uses it', ['delete set ip kube-proxy cluster-ips']],
  ];
  for (const [what, lines] of failing) {
    it(what, async () => {
      const text = lines.join('\n') + '\n';
      const before = await listText(viaNetlink);
      const [a, b] = [
        await runner.run(text).catch((e: unknown) => e),
        await nsNft(viaNft)
          .run(text)
          .catch((e: unknown) => e),
      ];
      expect(b, 'nft -f refuses it').toBeInstanceOf(NftTransactionFailure);
      expect(a, 'netlink refuses it').toBeInstanceOf(NftTransactionFailure);
      expect(runner.lastRun()?.writer).toBe('netlink');
      expect((a as NftTransactionFailure).lines).toEqual((b as NftTransactionFailure).lines);
      // Nothing of a refused transaction is applied.
      expect(await listText(viaNetlink)).toBe(before);
      expect(await listText(viaNft)).toBe(before);
    });
  }

  it('hands what it does not write to nft, with the same result', async () => {
    const text = 'add chain ip kube-proxy counted\nadd rule ip kube-proxy counted counter drop\n';
    await runner.run(text);
    expect(runner.lastRun()).toMatchObject({ writer: 'nft' });
    await nsNft(viaNft).run(text);
    expect(await listText(viaNetlink)).toBe(await listText(viaNft));
    // Read over netlink, a rule kproxy does not write never reads as one it does: its chain would be rewritten.
    const listed = await runner.listTableForSync!('ip', 'kube-proxy');
    expect(listed!.chains.get('counted')!.rules).toEqual([expect.stringMatching(/^<rule handle \d+ kproxy does not write>$/)]);
  });
});

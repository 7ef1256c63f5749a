import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseTransaction } from '../../kernel/nft-script.ts';
import type { NftTable } from '../../kernel/nft-types.ts';
import type { EndpointSlice, Service } from '../kube-objects.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { runGoldenCase } from '../golden.ts';
import { nftablesGolden } from './golden.ts';
import { KUBE_PROXY_TABLE } from './names.ts';
import { STALE_CHAIN_DELAY_MS } from './proxier.ts';
import { nftHarness, staleChains, testConfig } from './testing.ts';

/**
 * Cross-checks against kube-proxy's own expectations
 * (pkg/proxy/nftables/proxier_test.go). Like kube-proxy's tests, tables are
 * compared modulo order: the chains with their rules in order, the sets and
 * maps, and their elements as sets. Two spellings differ and are normalised:
 * kube-proxy's fake proxier uses the mark "0x4000" where the real one (and
 * kproxy) prints "%#08x" ("0x00004000"); and a one-element anonymous set
 * "ip daddr { X }" is what nft loads and lists as "ip daddr X", which kproxy
 * writes directly.
 */
interface Shape {
  chains: Record<string, { base: unknown; rules: string[] }>;
  sets: Record<string, unknown>;
  elements: Record<string, string[]>;
}

function normalise(rule: string): string {
  return rule
    .replace(/0x0+([0-9a-f])/g, '0x$1')
    .replace(/ ([sd]addr (?:!= )?)\{ ([^ ,]+) \} /, ' $1$2 ')
    .replace(/\s+,\s+/g, ' , ');
}

function shapeOfText(text: string): Shape {
  const out: Shape = { chains: {}, sets: {}, elements: {} };
  for (const { op } of parseTransaction(text)) {
    if (op.op !== 'add') continue;
    if (op.kind === 'chain') out.chains[op.name] ??= { base: op.base ?? null, rules: [] };
    else if (op.kind === 'rule') (out.chains[op.chain] ??= { base: null, rules: [] }).rules.push(normalise(op.rule));
    else if (op.kind === 'set')
      out.sets[op.spec.name] = { map: op.spec.map, type: op.spec.type, flags: op.spec.flags ?? [], timeout: op.spec.timeoutSeconds ?? null, comment: op.spec.comment ?? null };
    else if (op.kind === 'element') (out.elements[op.set] ??= []).push(`${op.key} | ${op.value ?? ''} | ${op.comment ?? ''}`);
  }
  for (const k of Object.keys(out.elements)) out.elements[k].sort();
  return out;
}

/** kernelRules lists a table's chains and their rules, for the repeated-sync expectations. */
function kernelRules(t: NftTable | null): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const c of t?.chains.values() ?? []) if (c.name.includes('/')) out[c.name] = c.rules.map(normalise);
  return out;
}

function kernelElements(t: NftTable | null, set: string): string[] {
  return [...(t?.sets.get(set)?.elements.values() ?? [])].map((e) => `${e.key}${e.value ? ` : ${e.value}` : ''}`).sort();
}

const TESTDATA = join(import.meta.dirname, 'testdata');

describe('the same table as kube-proxy for the same input', () => {
  it('TestOverallNFTablesRules: a full sync writes upstream.nft', async () => {
    const { result } = await runGoldenCase(nftablesGolden, join(TESTDATA, 'upstream-overall', 'input.yaml'));
    expect(shapeOfText(result.batch!)).toEqual(shapeOfText(readFileSync(join(TESTDATA, 'upstream-overall', 'upstream.nft'), 'utf8')));
  });

  it('TestSyncProxyRulesRepeated: partial syncs write only what changed; stale chains are flushed, then deleted a second later', async () => {
    const h = nftHarness({ config: testConfig({ mode: 'nftables', clusterCIDRs: ['10.0.0.0/8'] }), nodeName: 'test-node' });
    const tcp = (name: string, port: number) => [{ name, port, protocol: 'TCP' }];
    const svc = (n: number, port: number, pname: string): Service => makeService(`ns${n}`, `svc${n}`, { clusterIP: `172.30.0.4${n}`, ports: tcp(pname, port) });
    const slice = (n: number, ips: string[], port: number, pname: string): EndpointSlice =>
      makeSlice(
        `ns${n}`,
        `svc${n}`,
        `svc${n}-1`,
        ips.map((ip) => ep(ip)),
        tcp(pname, port),
      );
    const svc2 = svc(2, 8080, 'p8080');
    const state = stateFromObjects('test-node', [svc(1, 80, 'p80'), svc2, slice(1, ['10.0.1.1'], 80, 'p80'), slice(2, ['10.0.2.1'], 8080, 'p8080')]);
    const table = () => h.kernel.table('ip', KUBE_PROXY_TABLE);
    let syncs = 0;
    const sync = async () => {
      const r = await h.backend.sync({ state: state.checkout(), forceFull: false });
      expect(r.error).toBeUndefined();
      syncs++;
      return r;
    };
    /** lastOps: the commands of the sync's own transaction (0 when it wrote nothing). */
    const lastOps = (r: { batch?: string }) => (r.batch ? r.batch.trimEnd().split('\n').length : 0);
    const age = () => h.clock.advance(STALE_CHAIN_DELAY_MS);

    const svc1Chains = {
      'service-ULMVA6XW-ns1/svc1/tcp/p80': [
        'ip daddr 172.30.0.41 ip saddr != 10.0.0.0/8 jump mark-for-masquerade',
        'numgen random mod 1 vmap { 0 : goto endpoint-5TPGNJF2-ns1/svc1/tcp/p80__10.0.1.1/80 }',
      ],
      'endpoint-5TPGNJF2-ns1/svc1/tcp/p80__10.0.1.1/80': ['ip saddr 10.0.1.1 jump mark-for-masquerade', 'meta l4proto tcp dnat to 10.0.1.1:80'],
    };
    const svc2Chains = {
      'service-MHHHYRWA-ns2/svc2/tcp/p8080': [
        'ip daddr 172.30.0.42 ip saddr != 10.0.0.0/8 jump mark-for-masquerade',
        'numgen random mod 1 vmap { 0 : goto endpoint-7RVP4LUQ-ns2/svc2/tcp/p8080__10.0.2.1/8080 }',
      ],
      'endpoint-7RVP4LUQ-ns2/svc2/tcp/p8080__10.0.2.1/8080': ['ip saddr 10.0.2.1 jump mark-for-masquerade', 'meta l4proto tcp dnat to 10.0.2.1:8080'],
    };
    const svc3Chains = (eps: string[]) => ({
      'service-4AT6LBPK-ns3/svc3/tcp/p80': [
        'ip daddr 172.30.0.43 ip saddr != 10.0.0.0/8 jump mark-for-masquerade',
        `numgen random mod ${eps.length} vmap { ${eps.map((e, i) => `${i} : goto ${e}`).join(' , ')} }`,
      ],
    });
    const ep3 = {
      '10.0.3.1': 'endpoint-2OCDJSZQ-ns3/svc3/tcp/p80__10.0.3.1/80',
      '10.0.3.2': 'endpoint-SWWHDC7X-ns3/svc3/tcp/p80__10.0.3.2/80',
      '10.0.3.3': 'endpoint-TQ2QKHCZ-ns3/svc3/tcp/p80__10.0.3.3/80',
    };
    const epChain = (ip: keyof typeof ep3) => ({ [ep3[ip]]: [`ip saddr ${ip} jump mark-for-masquerade`, `meta l4proto tcp dnat to ${ip}:80`] });

    const first = await sync();
    expect(first.full).toBe(true);
    expect(kernelRules(table())).toEqual({ ...svc1Chains, ...svc2Chains });

    // Add svc3: 2 chains, 4 rules, 2 elements (kube-proxy also flushes the new chains: 10 operations).
    const svc3 = svc(3, 80, 'p80');
    const eps3 = slice(3, ['10.0.3.1'], 80, 'p80');
    state.onService(null, svc3);
    state.onEndpointSlice(null, eps3);
    const added = await sync();
    expect(added.full).toBe(false);
    expect(lastOps(added)).toBe(8);
    expect(kernelRules(table())).toEqual({ ...svc1Chains, ...svc2Chains, ...svc3Chains([ep3['10.0.3.1']]), ...epChain('10.0.3.1') });

    // Delete svc2: its chains are flushed but kept; its 2 elements go (4 operations, as kube-proxy).
    state.onService(svc2, null);
    expect(lastOps(await sync())).toBe(4);
    expect(kernelRules(table())).toMatchObject({ 'service-MHHHYRWA-ns2/svc2/tcp/p8080': [], 'endpoint-7RVP4LUQ-ns2/svc2/tcp/p8080__10.0.2.1/8080': [] });
    expect(kernelElements(table(), 'cluster-ips')).toEqual(['172.30.0.41', '172.30.0.43']);

    // A second later they are deleted, in a transaction of their own; the sync itself writes nothing.
    age();
    const calls = h.kernel.transactions().length;
    expect(lastOps(await sync())).toBe(0);
    expect(h.kernel.transactions().slice(calls)).toEqual([
      'delete chain ip kube-proxy endpoint-7RVP4LUQ-ns2/svc2/tcp/p8080__10.0.2.1/8080\ndelete chain ip kube-proxy service-MHHHYRWA-ns2/svc2/tcp/p8080\n',
    ]);
    expect(kernelRules(table())).toEqual({ ...svc1Chains, ...svc3Chains([ep3['10.0.3.1']]), ...epChain('10.0.3.1') });

    // A service without endpoints: 2 elements (cluster-ips, no-endpoint-services), as kube-proxy.
    const svc4 = svc(4, 80, 'p80');
    state.onService(null, svc4);
    expect(lastOps(await sync())).toBe(2);
    expect(kernelElements(table(), 'no-endpoint-services')).toEqual(['172.30.0.44 . tcp . 80 : goto reject-chain']);
    // Then its endpoints: 2 chains and 4 rules, the element moves from one map to the other.
    state.onEndpointSlice(null, slice(4, ['10.0.4.1'], 80, 'p80'));
    expect(lastOps(await sync())).toBe(8);
    expect(kernelElements(table(), 'no-endpoint-services')).toEqual([]);
    expect(kernelElements(table(), 'service-ips')).toContain('172.30.0.44 . tcp . 80 : goto service-LAUZTJTB-ns4/svc4/tcp/p80');

    // Move svc3's endpoint: its service chain is rewritten, the new endpoint chain added, the old one flushed.
    const eps3b = slice(3, ['10.0.3.2'], 80, 'p80');
    state.onEndpointSlice(eps3, eps3b);
    expect(lastOps(await sync())).toBe(7);
    expect(kernelRules(table())).toMatchObject({ ...svc3Chains([ep3['10.0.3.2']]), ...epChain('10.0.3.2'), [ep3['10.0.3.1']]: [] });

    // Add an endpoint: the unchanged endpoint chain is left alone (kube-proxy rewrites all three: 12 operations).
    age();
    const eps3c = slice(3, ['10.0.3.2', '10.0.3.3'], 80, 'p80');
    state.onEndpointSlice(eps3b, eps3c);
    expect(lastOps(await sync())).toBe(6);
    expect(kernelRules(table())).toMatchObject({ ...svc3Chains([ep3['10.0.3.2'], ep3['10.0.3.3']]), ...epChain('10.0.3.2'), ...epChain('10.0.3.3') });
    expect(Object.keys(kernelRules(table()))).not.toContain(ep3['10.0.3.1']);

    // Empty its endpoints: 3 chains flushed, the element moves (5 operations, as kube-proxy).
    const eps3d = slice(3, [], 80, 'p80');
    state.onEndpointSlice(eps3c, eps3d);
    expect(lastOps(await sync())).toBe(5);
    expect(staleChains(table())).toHaveLength(3);
    // Restored at once: the flushed chains are still there and only refilled (6 rules, 2 element operations).
    state.onEndpointSlice(eps3d, eps3c);
    expect(lastOps(await sync())).toBe(8);
    expect(staleChains(table())).toEqual([]);
    const restored = kernelRules(table());

    // Emptied, aged, restored: deleted first, then added again; the same table as before.
    state.onEndpointSlice(eps3c, eps3d);
    await sync();
    age();
    state.onEndpointSlice(eps3d, eps3c);
    await sync();
    expect(kernelRules(table())).toEqual(restored);

    // No change: no transaction at all.
    const before = h.kernel.transactions().length;
    const idle = await sync();
    expect(lastOps(idle)).toBe(0);
    expect(h.kernel.transactions()).toHaveLength(before);
    expect(syncs).toBe(13);
  });

  it('TestSyncProxyRulesStartup: a restart lists the table and writes only what differs from it', async () => {
    const tcp = (name: string, port: number) => [{ name, port, protocol: 'TCP' }];
    const config = testConfig({ mode: 'nftables', clusterCIDRs: ['10.0.0.0/8'] });
    const objects = [
      makeService('ns1', 'svc1', { clusterIP: '172.30.0.41', ports: tcp('p80', 80) }),
      makeService('ns2', 'svc2', { clusterIP: '172.30.0.42', ports: tcp('p8080', 8080) }),
      makeSlice('ns1', 'svc1', 'svc1-1', [ep('10.0.1.1')], tcp('p80', 80)),
      makeSlice('ns2', 'svc2', 'svc2-1', [ep('10.0.2.1')], tcp('p8080', 8080)),
    ];
    // A first kproxy programs svc1 and svc2, then stops.
    const first = nftHarness({ config, nodeName: 'test-node' });
    expect((await first.backend.sync({ state: stateFromObjects('test-node', objects).checkout(), forceFull: true })).error).toBeUndefined();
    // A new one starts on the same kernel: svc1 has a second endpoint, svc3 (no endpoints) is new.
    const second = nftHarness({ config, nodeName: 'test-node', kernel: first.kernel });
    const state = stateFromObjects('test-node', [
      ...objects.slice(0, 2),
      makeService('ns3', 'svc3', { clusterIP: '172.30.0.43', ports: tcp('p80', 80) }),
      makeSlice('ns1', 'svc1', 'svc1-1', [ep('10.0.1.1'), ep('10.0.1.2')], tcp('p80', 80)),
      objects[3],
    ]);
    const r = await second.backend.sync({ state: state.checkout(), forceFull: true });
    expect(r.error).toBeUndefined();
    // svc1's service chain (flush + 2 rules), its new endpoint chain (add + 2 rules), svc3's 2 elements:
    // nothing of the fixed objects, svc2 or svc1's first endpoint is written again.
    expect(r.batch!.trimEnd().split('\n')).toEqual([
      'add chain ip kube-proxy endpoint-ZCZBVNAZ-ns1/svc1/tcp/p80__10.0.1.2/80',
      'flush chain ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80',
      'add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 ip daddr 172.30.0.41 ip saddr != 10.0.0.0/8 jump mark-for-masquerade',
      'add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 numgen random mod 2 vmap { 0 : goto endpoint-5TPGNJF2-ns1/svc1/tcp/p80__10.0.1.1/80 , 1 : goto endpoint-ZCZBVNAZ-ns1/svc1/tcp/p80__10.0.1.2/80 }',
      'add rule ip kube-proxy endpoint-ZCZBVNAZ-ns1/svc1/tcp/p80__10.0.1.2/80 ip saddr 10.0.1.2 jump mark-for-masquerade',
      'add rule ip kube-proxy endpoint-ZCZBVNAZ-ns1/svc1/tcp/p80__10.0.1.2/80 meta l4proto tcp dnat to 10.0.1.2:80',
      'add element ip kube-proxy cluster-ips { 172.30.0.43 }',
      'add element ip kube-proxy no-endpoint-services { 172.30.0.43 . tcp . 80 comment "ns3/svc3:p80" : goto reject-chain }',
    ]);
    // And a restart with nothing changed writes nothing.
    const third = nftHarness({ config, nodeName: 'test-node', kernel: first.kernel });
    const again = await third.backend.sync({ state: state.checkout(), forceFull: true });
    expect(again.error).toBeUndefined();
    expect(again.batch).toBeUndefined();
  });
});

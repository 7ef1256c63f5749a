import { describe, expect, it } from 'vitest';
import { NftListError } from '../../errors.ts';
import { SimulatedNft } from '../../kernel/nft-simulated.ts';
import { formatTableDump } from '../../kernel/nft-script.ts';
import { silentLogger, type Logger } from '../../log.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { KUBE_PROXY_TABLE } from './names.ts';
import { STALE_CHAIN_DELAY_MS } from './proxier.ts';
import { nftHarness, staleChains, testConfig } from './testing.ts';

const config = testConfig({ mode: 'nftables', clusterCIDRs: ['10.244.0.0/16'] });
const tcp = (port: number) => [{ name: 'http', port, protocol: 'TCP' }];

function cluster(n = 3) {
  const objects = [];
  for (let i = 1; i <= n; i++) {
    objects.push(makeService('shop', `s${i}`, { clusterIP: `10.96.0.${i}`, ports: tcp(80) }));
    objects.push(makeSlice('shop', `s${i}`, `s${i}-1`, [ep(`10.244.1.${i}`, { nodeName: 'node-b' })], tcp(8080)));
  }
  return objects;
}

function recordingLogger(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  const make = (): Logger => ({
    ...silentLogger,
    child: () => make(),
    warn: (msg: string, f?: Record<string, unknown>) => void lines.push(`W ${msg} ${JSON.stringify(f ?? {})}`),
    error: (msg: string, f?: Record<string, unknown>) => void lines.push(`E ${msg} ${JSON.stringify(f ?? {})}`),
  });
  return { logger: make(), lines };
}

const dump = (k: SimulatedNft) => formatTableDump(k.table('ip', KUBE_PROXY_TABLE)!);

describe('nftables proxier', () => {
  it('a refused transaction changes nothing, is reported (the metrics count the failed sync) and logged with its lines, and the next sync is full and repairs', async () => {
    const { logger, lines } = recordingLogger();
    const h = nftHarness({ config, logger });
    const state = stateFromObjects('node-a', cluster());
    expect((await h.backend.sync({ state: state.checkout(), forceFull: true })).error).toBeUndefined();
    const before = dump(h.kernel);
    state.onEndpointSlice(null, makeSlice('shop', 's2', 's2-1', [ep('10.244.1.20', { nodeName: 'node-b' })], tcp(8080)));
    // The kernel refuses the transaction at its third line.
    h.kernel.runHook = (t) => (t.includes('add rule') ? '/dev/stdin:3:1-40: Error: Could not process rule: File exists' : null);
    const failed = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(failed.error?.code).toBe('KPROXY_ERR_NFT_TRANSACTION');
    expect(failed.error?.message).toContain('File exists');
    expect(failed.error?.message).toContain(`line 3: ${failed.batch!.split('\n')[2]}`);
    expect(h.backend.lastFailedInput()?.input).toBe(failed.batch);
    expect(dump(h.kernel)).toBe(before);
    expect(lines.some((l) => l.startsWith('E nftables sync failed'))).toBe(true);
    h.kernel.runHook = null;
    const repaired = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(repaired.error).toBeUndefined();
    expect(repaired.full).toBe(true);
    expect(dump(h.kernel)).toContain('dnat to 10.244.1.20:8080');
    expect(dump(h.kernel)).not.toContain('dnat to 10.244.1.2:8080');
  });

  it('shows the lines nft refused in the error', async () => {
    const h = nftHarness({ config });
    const state = stateFromObjects('node-a', cluster(1));
    // A foreign map of the same name with another type: adding kproxy's is refused at its line.
    await h.kernel.run('add table ip kube-proxy\nadd map ip kube-proxy service-ips { type inet_service : verdict ; }\n');
    const r = await h.backend.sync({ state: state.checkout(), forceFull: true });
    expect(r.error).toBeUndefined();
    // A full sync re-creates a set whose definition differs: the map kproxy wants is there now.
    expect(h.kernel.table('ip', KUBE_PROXY_TABLE)!.sets.get('service-ips')!.type).toBe('ipv4_addr . inet_proto . inet_service');
    const k2 = new SimulatedNft();
    const h2 = nftHarness({ config, kernel: k2 });
    k2.runHook = () => '/dev/stdin:7:1-20: Error: Could not process rule: No such file or directory';
    const failed = await h2.backend.sync({ state: state.checkout(), forceFull: true });
    expect(failed.error?.message).toMatch(/\n {2}line 7: add /);
  });

  it('stale chains: flushed at once, deleted a second later in a transaction of their own; a refused deletion is counted and retried', async () => {
    const h = nftHarness({ config });
    const objects = cluster(2);
    const state = stateFromObjects('node-a', objects);
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    state.onService(objects[2] as never, null);
    state.onEndpointSlice(objects[3] as never, null);
    await h.backend.sync({ state: state.checkout(), forceFull: false });
    const stale = () => staleChains(h.kernel.table('ip', KUBE_PROXY_TABLE));
    expect(stale()).toHaveLength(2);
    const staleNames = [...h.kernel.table('ip', KUBE_PROXY_TABLE)!.chains.values()].filter((c) => c.name.includes('shop/s2/')).map((c) => [c.name, c.rules.length]);
    expect(staleNames).toEqual([expect.arrayContaining([expect.stringContaining('shop/s2/'), 0]), expect.arrayContaining([expect.stringContaining('shop/s2/'), 0])]);

    // Too early: nothing is deleted.
    h.clock.advance(STALE_CHAIN_DELAY_MS - 1);
    const early = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(early.nftablesCleanupFailures).toBeUndefined();
    expect(stale()).toHaveLength(2);

    // Refused: reported with the sync (kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total counts it), and the sync (full, to find them again) still succeeds.
    h.clock.advance(1);
    h.kernel.runHook = (t) => (t.startsWith('delete chain') ? '/dev/stdin:1:1-10: Error: Could not process rule: Device or resource busy' : null);
    const refused = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(refused.error).toBeUndefined();
    expect(refused.nftablesCleanupFailures).toBe(1);
    expect(refused.full).toBe(true);
    expect(stale()).toHaveLength(2);

    // Retried a second later, and gone.
    h.kernel.runHook = null;
    h.clock.advance(STALE_CHAIN_DELAY_MS);
    const ok = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(ok.nftablesCleanupFailures).toBeUndefined();
    expect(stale()).toEqual([]);
    expect([...h.kernel.table('ip', KUBE_PROXY_TABLE)!.chains.keys()].some((c) => c.includes('shop/s2/'))).toBe(false);
  });

  it('a full sync repairs whatever drifted and writes only that', async () => {
    const h = nftHarness({ config });
    const state = stateFromObjects('node-a', cluster());
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    const right = dump(h.kernel);
    const svc1 = [...h.kernel.table('ip', KUBE_PROXY_TABLE)!.chains.keys()].find((c) => c.startsWith('service-') && c.includes('shop/s1/'))!;
    await h.kernel.run(
      [
        `flush chain ip kube-proxy ${svc1}`,
        'delete element ip kube-proxy cluster-ips { 10.96.0.2 }',
        'flush chain ip kube-proxy nat-prerouting',
        'delete chain ip kube-proxy nat-prerouting',
        'add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -90 ; }',
        'add chain ip kube-proxy old-base { type filter hook forward priority 10 ; }',
        'add chain ip kube-proxy endpoints-check',
        'add rule ip kube-proxy old-base jump endpoints-check',
        'add rule ip kube-proxy endpoints-check drop',
        'add set ip kube-proxy affinity-LEFTOVER-ns/x/tcp/p__10.0.0.1/80 { type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; }',
      ].join('\n') + '\n',
    );
    // A partial sync trusts what it wrote: it writes nothing.
    expect((await h.backend.sync({ state: state.checkout(), forceFull: false })).batch).toBeUndefined();
    const r = await h.backend.sync({ state: state.checkout(), forceFull: true });
    expect(r.error).toBeUndefined();
    expect(r.batch!.trimEnd().split('\n')).toEqual([
      // Re-created at kube-proxy's priority (it cannot change in place); it had no rules left to flush.
      'delete chain ip kube-proxy nat-prerouting',
      'flush chain ip kube-proxy old-base',
      'delete chain ip kube-proxy old-base',
      'add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }',
      'flush chain ip kube-proxy endpoints-check',
      'delete set ip kube-proxy affinity-LEFTOVER-ns/x/tcp/p__10.0.0.1/80',
      'add rule ip kube-proxy nat-prerouting jump services',
      `add rule ip kube-proxy ${svc1} ip daddr 10.96.0.1 ip saddr != 10.244.0.0/16 jump mark-for-masquerade`,
      expect.stringMatching(new RegExp(`^add rule ip kube-proxy ${svc1.replaceAll('/', '\\/')} numgen random mod 1 vmap`)),
      'add element ip kube-proxy cluster-ips { 10.96.0.2 }',
    ]);
    // The foreign regular chain is flushed now and deleted a second later, like a stale one.
    h.clock.advance(STALE_CHAIN_DELAY_MS);
    await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(dump(h.kernel)).toBe(right);
  });

  it('without a listing it rewrites everything, flushing first, and the table ends right', async () => {
    const h = nftHarness({ config });
    const state = stateFromObjects('node-a', cluster());
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    const right = dump(h.kernel);
    const list = h.kernel.listTable.bind(h.kernel);
    h.kernel.listTable = async () => {
      throw new NftListError('nft -j list table ip kube-proxy printed something that is not JSON');
    };
    const r = await h.backend.sync({ state: state.checkout(), forceFull: true });
    expect(r.error).toBeUndefined();
    expect(r.batch).toMatch(/^add table ip kube-proxy/);
    expect(r.batch).toContain('flush chain ip kube-proxy services\n');
    expect(r.batch).toContain('flush map ip kube-proxy service-ips\n');
    h.kernel.listTable = list;
    expect(dump(h.kernel)).toBe(right);
  });

  it('a new affinity timeout re-adds the set (nft takes the new timeout), keeping the chains', async () => {
    const h = nftHarness({ config });
    const svc = (t: number) => makeService('shop', 'sticky', { clusterIP: '10.96.0.9', ports: tcp(80), sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: t } } });
    const state = stateFromObjects('node-a', [svc(10800), makeSlice('shop', 'sticky', 'sticky-1', [ep('10.244.1.9')], tcp(8080))]);
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    state.onService(svc(10800), svc(60));
    const r = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(r.batch!.split('\n').filter((l) => l.startsWith('add set'))).toEqual([
      expect.stringMatching(/^add set ip kube-proxy affinity-\S+ \{ type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; \}$/),
    ]);
    const sets = [...h.kernel.table('ip', KUBE_PROXY_TABLE)!.sets.values()].filter((s) => s.name.startsWith('affinity-'));
    expect(sets.map((s) => s.timeoutSeconds)).toEqual([60]);
  });

  it('skips a service port it cannot write and programs the others', async () => {
    const h = nftHarness({ config });
    const state = stateFromObjects('node-a', cluster(2));
    // A bad endpoint (the model validates, this is the second wall): a duplicated port breaks nothing else.
    const bad = { ...state.checkout() };
    const services = new Map(bad.services);
    const sp = services.get('shop/s1:http/TCP')!;
    services.set(sp.id, { ...sp, clusterIP: '10.96.0.999' });
    const r = await h.backend.sync({ ...bad, state: { ...bad, services }, forceFull: true } as never);
    expect(r.error).toBeUndefined();
    expect(r.skippedServicePorts?.get('shop/s1:http/TCP')).toMatch(/not a canonical IPv4 address/);
    expect(dump(h.kernel)).toContain('10.96.0.2 . tcp . 80');
    expect(dump(h.kernel)).not.toContain('10.96.0.999');
  });

  it("accepts node ports on the node's primary IP by default, as kube-proxy in nftables mode", async () => {
    const h = nftHarness({ config, hostAddresses: ['127.0.0.1', '10.0.0.10', '10.0.0.11'] });
    const state = stateFromObjects('node-a', [{ apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-a' }, status: { addresses: [{ type: 'InternalIP', address: '10.0.0.10' }] } }, ...cluster(1)]);
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    expect([...h.kernel.table('ip', KUBE_PROXY_TABLE)!.sets.get('nodeport-ips')!.elements.keys()]).toEqual(['10.0.0.10']);
  });

  it('says at start that localhost node ports are not supported when --nodeport-addresses asks for them', async () => {
    const { logger, lines } = recordingLogger();
    const h = nftHarness({ config: testConfig({ mode: 'nftables', nodePortAddresses: ['127.0.0.0/8', '10.0.0.0/24'] }), logger });
    await h.backend.init!();
    expect(lines).toEqual([expect.stringContaining('nftables mode does not accept node ports on localhost')]);
  });

  it('cleanup deletes the table; the next sync builds it again', async () => {
    const h = nftHarness({ config });
    const state = stateFromObjects('node-a', cluster(1));
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    const right = dump(h.kernel);
    expect(await h.backend.cleanup()).toEqual({ removed: { nftables: 1 }, errors: [] });
    expect(h.kernel.table('ip', KUBE_PROXY_TABLE)).toBeNull();
    expect(await h.backend.cleanup()).toEqual({ removed: {}, errors: [] });
    const r = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(r.full).toBe(true);
    expect(dump(h.kernel)).toBe(right);
  });
});

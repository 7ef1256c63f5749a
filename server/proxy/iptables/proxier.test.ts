import { describe, expect, it } from 'vitest';
import { SimulatedIptables } from '../../kernel/iptables-simulated.ts';
import { parseIptablesScript } from '../../kernel/iptables-save-parser.ts';
import { MemoryLog } from '../../log.ts';
import type { Endpoint } from '../endpoint.ts';
import type { StateCheckout } from '../proxy-state.ts';
import type { ServicePort } from '../service-port.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { JUMP_RULES } from '../xtables/jump-chains.ts';
import { SYSCTL_ROUTE_LOCALNET } from './proxier.ts';
import { harness, testConfig } from './testing.ts';

const tcp = (name: string, port: number) => [{ name, port, protocol: 'TCP' }];

function cluster() {
  return stateFromObjects('node-a', [
    makeService('ns1', 'a', { clusterIP: '10.96.0.1', ports: tcp('http', 80) }),
    makeService('ns1', 'b', { clusterIP: '10.96.0.2', ports: tcp('http', 80) }),
    makeSlice('ns1', 'a', 'a-1', [ep('10.244.0.1'), ep('10.244.1.1')], tcp('http', 8080)),
    makeSlice('ns1', 'b', 'b-1', [ep('10.244.0.2')], tcp('http', 8080)),
  ]);
}

/** declared lists the chains a restore input declares, per table. */
function declared(batch: string): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const t of parseIptablesScript(batch).tables) out[t.name] = t.entries.flatMap((e) => (e.kind === 'chain' ? [e.name] : []));
  return out;
}

describe('iptables proxier: full and partial syncs', () => {
  it('starts with a full sync that reads the kernel once and installs jump rules and canaries', async () => {
    const h = harness();
    const state = cluster();
    const r = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(r.error).toBeUndefined();
    expect(r.full).toBe(true);
    expect(h.kernel.callsOf('iptables-save')).toHaveLength(1);
    expect(h.kernel.callsOf('iptables-restore')).toHaveLength(1);
    // On a fresh node the jumps and canaries travel in the restore input: no -N, -C or -I process.
    expect(h.kernel.callsOf('iptables')).toHaveLength(0);
    for (const j of JUMP_RULES) expect(await h.kernel.checkRule(j.table, j.from, j.args), `${j.table}/${j.from} -> ${j.to}`).toBe(true);
    // In the order iptables -I one by one gives (the last inserted is first).
    expect(h.kernel.rules('filter', 'INPUT').map((s) => /-j (\S+)/.exec(s)![1])).toEqual(['KUBE-FIREWALL', 'KUBE-PROXY-FIREWALL', 'KUBE-NODEPORTS', 'KUBE-EXTERNAL-SERVICES']);
    for (const t of ['mangle', 'nat', 'filter']) expect(await h.kernel.chainExists(t, 'KUBE-PROXY-CANARY')).toBe(true);
    expect(r.servicesWritten).toBe(2);
  });

  it('then syncs partially with one iptables-restore and no iptables-save', async () => {
    const h = harness();
    const state = cluster();
    await h.backend.sync({ state: state.checkout(), forceFull: false });
    const before = h.kernel.calls.length;
    state.onEndpointSlice(null, makeSlice('ns1', 'b', 'b-1', [ep('10.244.0.2'), ep('10.244.2.2')], tcp('http', 8080)));
    const r = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(r.full).toBe(false);
    expect(h.kernel.calls.slice(before).map((c) => c.program)).toEqual(['iptables-restore']);
    // Only ns1/b's chains are declared: its jump in KUBE-SERVICES is the same, so no shared
    // or fixed chain is rewritten, and nothing in the filter table changed.
    const d = declared(r.batch!);
    expect(d.filter).toBeUndefined();
    expect(d.nat).toHaveLength(3);
    expect(d.nat.every((c) => /^KUBE-(SVC|SEP)-/.test(c))).toBe(true);
    expect(r.batch).toContain('"ns1/b:http -> 10.244.2.2:8080"');
    expect(r.batch).not.toContain('10.244.1.1');
    expect(r.servicesWritten).toBe(1);
    // The unchanged service still works: its jump and its chains are intact.
    expect(h.kernel.rules('nat', 'KUBE-SERVICES').some((s) => s.includes('ns1/a:http cluster IP'))).toBe(true);
    // nat: 5 fixed rules; per service 1 jump + 2 balancing rules + 2 endpoint chains of 2 rules.
    expect(r.rulesByTable).toEqual({ filter: 4, nat: 5 + (1 + 2 + 4) + (1 + 2 + 4) });
    // What it wrote (kubeproxy_sync_proxy_rules_iptables_last): ns1/b's 2 balancing rules and its 2 endpoint chains of 2.
    expect(r.rulesWrittenByTable).toEqual({ filter: 0, nat: 2 + 4 });
  });

  it('reports rule counts that match what the kernel holds in kproxy chains', async () => {
    const h = harness();
    const r = await h.backend.sync({ state: cluster().checkout(), forceFull: true });
    const dump = h.kernel.dump();
    const count = (table: string) => [...dump.tables.get(table)!.chains.values()].filter((c) => !c.builtin).reduce((n, c) => n + c.rules.length, 0);
    expect(r.rulesByTable).toEqual({ filter: count('filter'), nat: count('nat') });
    // A full sync wrote all of them: the metrics take rulesByTable for what it wrote.
    expect(r.rulesWrittenByTable).toBeUndefined();
  });

  it('rewrites everything when the sync loop forces it or the build context changes', async () => {
    const h = harness();
    const state = cluster();
    await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect((await h.backend.sync({ state: state.checkout(), forceFull: true })).full).toBe(true);
    const partial = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(partial.full).toBe(false);
    expect(partial.servicesWritten).toBe(0);
    // The node's pod CIDR feeds the NodeCIDR detector: a new Node makes every rule different.
    const h2 = harness({ config: testConfig({ detectLocalMode: 'NodeCIDR' }) });
    const s2 = cluster();
    await h2.backend.sync({ state: s2.checkout(), forceFull: false });
    s2.onNode(null, { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-a' }, spec: { podCIDRs: ['10.244.0.0/24'] } });
    const after = await h2.backend.sync({ state: s2.checkout(), forceFull: false });
    expect(after.full).toBe(true);
    expect(after.batch).toContain('! -s 10.244.0.0/24 -j KUBE-MARK-MASQ');
  });

  it('deletes stale service chains left by an earlier run (take-over) and keeps foreign chains', async () => {
    const kernel = new SimulatedIptables();
    await kernel.restore(
      [
        '*nat',
        ':KUBE-SERVICES - [0:0]',
        ':KUBE-SVC-OLDOLDOLDOLDOLDO - [0:0]',
        ':KUBE-SEP-OLDOLDOLDOLDOLDO - [0:0]',
        ':KUBE-XLB-OLDOLDOLDOLDOLDO - [0:0]',
        ':DOCKER - [0:0]',
        '-A KUBE-SERVICES -j KUBE-SVC-OLDOLDOLDOLDOLDO',
        '-A KUBE-SVC-OLDOLDOLDOLDOLDO -j KUBE-SEP-OLDOLDOLDOLDOLDO',
        '-A KUBE-XLB-OLDOLDOLDOLDOLDO -j KUBE-SVC-OLDOLDOLDOLDOLDO',
        '-A DOCKER -j RETURN',
        '-A PREROUTING -j DOCKER',
        'COMMIT',
        '',
      ].join('\n'),
    );
    const h = harness({ kernel });
    const r = await h.backend.sync({ state: cluster().checkout(), forceFull: false });
    expect(r.error).toBeUndefined();
    const chains = kernel.chains('nat');
    expect(chains.filter((c) => c.includes('OLDOLD'))).toEqual([]);
    expect(chains).toContain('DOCKER');
    expect(kernel.rules('nat', 'PREROUTING')).toContain('-j DOCKER');
    expect(kernel.rules('nat', 'DOCKER')).toEqual(['-j RETURN']);
  });

  it('checks each jump with -C when the listing cannot be read, and never duplicates one', async () => {
    const h = harness();
    const state = cluster();
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    h.kernel.save = async () => {
      throw new Error('iptables-save: lock timeout');
    };
    const r = await h.backend.sync({ state: state.checkout(), forceFull: true });
    expect(r.error).toBeUndefined();
    expect(r.batch).not.toMatch(/^-I /m);
    expect(h.kernel.callsOf('iptables').filter((c) => c.args[0] === '-C')).toHaveLength(JUMP_RULES.length);
    for (const j of JUMP_RULES)
      expect(
        h.kernel.rules(j.table, j.from).filter((s) => s.endsWith(`-j ${j.to}`)),
        `${j.table}/${j.from}`,
      ).toHaveLength(1);
  });

  it('does not duplicate jump rules and puts back one that was deleted', async () => {
    const h = harness();
    const state = cluster();
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    expect(h.kernel.rules('nat', 'PREROUTING')).toHaveLength(1);
    const j = JUMP_RULES.find((x) => x.table === 'nat' && x.from === 'PREROUTING')!;
    await h.kernel.deleteRule('nat', 'PREROUTING', j.args);
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    expect(h.kernel.rules('nat', 'PREROUTING')).toEqual(['-m comment --comment "kubernetes service portals" -j KUBE-SERVICES']);
  });

  it('sets route_localnet only for localhost node ports', async () => {
    const on = harness();
    await on.backend.init!();
    expect(on.sysctl.values.get(SYSCTL_ROUTE_LOCALNET)).toBe('1');
    const off = harness({ config: testConfig({ iptables: { localhostNodePorts: false } }) });
    await off.backend.init!();
    expect(off.sysctl.values.get(SYSCTL_ROUTE_LOCALNET)).toBe('0');
    const noLoopback = harness({ config: testConfig({ nodePortAddresses: ['10.0.0.0/8'] }) });
    await noLoopback.backend.init!();
    expect(noLoopback.sysctl.writes).toEqual([]);
  });
});

describe('iptables proxier: cleanup', () => {
  it("removes every chain it wrote and every jump into them (the dashboard's cleanup action), and leaves other programs' rules", async () => {
    const kernel = new SimulatedIptables();
    await kernel.restore('*nat\n:DOCKER - [0:0]\n-A DOCKER -j RETURN\n-A PREROUTING -j DOCKER\nCOMMIT\n');
    const h = harness({ kernel, config: testConfig({ clusterCIDRs: ['10.244.0.0/16'] }) });
    expect((await h.backend.sync({ state: cluster().checkout(), forceFull: true })).error).toBeUndefined();
    expect(kernel.chains('nat').filter((c) => c.startsWith('KUBE-SEP-'))).toHaveLength(3);
    const result = await h.backend.cleanup();
    expect(result.errors).toEqual([]);
    for (const t of ['filter', 'nat', 'mangle']) {
      expect(kernel.chains(t).filter((c) => c.startsWith('KUBE-'))).toEqual([]);
      for (const c of kernel.chains(t)) for (const r of kernel.rules(t, c)) expect(r).not.toContain('KUBE-');
    }
    expect(kernel.rules('nat', 'PREROUTING')).toEqual(['-j DOCKER']);
    expect(Object.keys(result.removed).sort()).toEqual(['filter', 'mangle', 'nat']);
    expect(await h.backend.cleanup()).toEqual({ removed: {}, errors: [] });
  });
});

describe('iptables proxier: failures', () => {
  it('a refused restore names the line, keeps the previous rules, and forces a full sync', async () => {
    const log = new MemoryLog();
    const h = harness({ logger: log.logger });
    const state = cluster();
    await h.backend.sync({ state: state.checkout(), forceFull: false });
    const before = h.kernel.dump();
    // Someone else's rule jumps into ns1/b's endpoint chain: deleting that chain must fail.
    const sep = h.kernel.chains('nat').find((c) => c.startsWith('KUBE-SEP-') && h.kernel.rules('nat', c).some((s) => s.includes('10.244.0.2')))!;
    await h.kernel.ensureChain('nat', 'OTHER');
    await h.kernel.insertRule('nat', 'OTHER', ['-j', sep]);
    const withOther = h.kernel.dump();
    state.onService(makeService('ns1', 'b', { clusterIP: '10.96.0.2', ports: tcp('http', 80) }), null);
    const failed = await h.backend.sync({ state: state.checkout(), forceFull: false });
    // What the restore and partial-restore failure counters count (server/proxy/metrics/kube-proxy-metrics.ts).
    expect(failed.full).toBe(false);
    expect(failed.error?.code).toBe('KPROXY_ERR_RESTORE_FAILED');
    expect(failed.error?.message).toMatch(new RegExp(`line \\d+ failed: .*${sep} is referenced`));
    expect(failed.error?.message).toContain(`>`);
    expect(failed.error?.message).toContain(`-X ${sep}`);
    expect(h.backend.lastFailedInput()?.input).toBe(failed.batch);
    expect(log.lines('error').join('\n')).toMatch(/iptables sync failed; the next sync rewrites everything/);
    // nat (where it failed) is exactly as before the sync; filter was committed first and is consistent on its own.
    expect(h.kernel.dump().tables.get('nat')).toEqual(withOther.tables.get('nat'));
    expect(before.tables.get('nat')).not.toEqual(withOther.tables.get('nat'));
    // Once the blocker is gone the next sync is full and succeeds.
    await h.kernel.flushChain('nat', 'OTHER');
    const next = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(next.full).toBe(true);
    expect(next.error).toBeUndefined();
    expect(h.kernel.chains('nat')).not.toContain(sep);
  });

  it('never throws: an unexpected error comes back in result.error', async () => {
    const h = harness();
    h.kernel.restoreHook = () => 'iptables-restore: unable to initialize table nat';
    const r = await h.backend.sync({ state: cluster().checkout(), forceFull: false });
    expect(r.error?.code).toBe('KPROXY_ERR_RESTORE_FAILED');
    expect(r.linesWritten).toBe(0);
    h.kernel.restoreHook = null;
    expect((await h.backend.sync({ state: cluster().checkout(), forceFull: false })).full).toBe(true);
  });
});

describe('iptables proxier: untrusted values', () => {
  function checkoutWith(extra: ServicePort, endpoints: Endpoint[]): StateCheckout {
    const c = cluster().checkout();
    const services = new Map(c.services);
    services.set(extra.id, extra);
    const eps = new Map(c.endpoints);
    eps.set(extra.id, endpoints);
    return { ...c, services, endpoints: eps };
  }
  const base = cluster().checkout().services.values().next().value!;

  it('skips a service whose name would break the restore text, programs the others, and says why', async () => {
    const log = new MemoryLog();
    const h = harness({ logger: log.logger });
    const hostile = { ...base, id: 'ns1/evil"\n-A INPUT -j ACCEPT:http/TCP', name: 'ns1/evil"\n-A INPUT -j ACCEPT:http', service: 'ns1/evil' };
    const r = await h.backend.sync({ state: checkoutWith(hostile, []), forceFull: true });
    expect(r.error).toBeUndefined();
    expect(r.batch).not.toContain('evil');
    expect(h.kernel.rules('nat', 'KUBE-SERVICES').filter((s) => s.includes('cluster IP'))).toHaveLength(2);
    expect(r.skippedServicePorts?.get(hostile.id)).toMatch(/not a valid "namespace\/name:port"/);
    expect(log.lines('warn').join('\n')).toMatch(/service port skipped/);
    expect(h.kernel.rules('filter', 'INPUT').join('\n')).not.toContain('-j ACCEPT');
  });

  it('skips a service with a malformed endpoint or address', async () => {
    const h = harness();
    const badEp = {
      ip: '10.0.0.1 -j ACCEPT',
      port: 80,
      key: '10.0.0.1 -j ACCEPT:80',
      isLocal: false,
      ready: true,
      serving: true,
      terminating: false,
      nodeName: '',
      zone: '',
      zoneHints: [],
      nodeHints: [],
    };
    const sp = { ...base, id: 'ns1/c:http/TCP', name: 'ns1/c:http', service: 'ns1/c', clusterIP: '10.96.0.3' };
    let r = await h.backend.sync({ state: checkoutWith(sp, [badEp]), forceFull: true });
    expect(r.error).toBeUndefined();
    expect(r.skippedServicePorts?.get(sp.id)).toMatch(/endpoint IP/);
    r = await h.backend.sync({ state: checkoutWith({ ...sp, externalIPs: ['1.2.3.4/32'] }, []), forceFull: true });
    expect(r.error).toBeUndefined();
    expect(r.skippedServicePorts?.get(sp.id)).toMatch(/external IP/);
  });
});

describe('iptables proxier: large clusters', () => {
  it('drops per-endpoint comments above 1000 endpoints, like kube-proxy', async () => {
    const endpoints = Array.from({ length: 1001 }, (_, i) => ep(`10.${100 + Math.floor(i / 250)}.${i % 250}.1`));
    const state = stateFromObjects('node-a', [
      makeService('ns1', 'big', { clusterIP: '10.96.0.9', ports: tcp('http', 80) }),
      makeSlice('ns1', 'big', 'big-1', endpoints.slice(0, 1000), tcp('http', 8080)),
      makeSlice('ns1', 'big', 'big-2', endpoints.slice(1000), tcp('http', 8080)),
    ]);
    const h = harness({ config: testConfig({ clusterCIDRs: ['10.244.0.0/16'] }) });
    const r = await h.backend.sync({ state: state.checkout(), forceFull: true });
    expect(r.error).toBeUndefined();
    const nat = h.kernel.dump().tables.get('nat')!;
    const seps = [...nat.chains.values()].filter((c) => c.name.startsWith('KUBE-SEP-'));
    expect(seps).toHaveLength(1001);
    expect(seps.every((c) => c.rules.every((rule) => rule.comment === null))).toBe(true);
    const svc = [...nat.chains.values()].find((c) => c.name.startsWith('KUBE-SVC-'))!;
    expect(svc.rules.filter((rule) => rule.target?.startsWith('KUBE-SEP-')).every((rule) => rule.comment === null)).toBe(true);
    // Service-level rules keep their comments.
    expect(svc.rules[0].comment).toBe('ns1/big:http cluster IP');
    expect(h.kernel.rules('nat', 'KUBE-SERVICES')[0]).toContain('"ns1/big:http cluster IP"');

    // 1000 endpoints is not "large": comments come back (and the switch is a full rewrite).
    state.onEndpointSlice(makeSlice('ns1', 'big', 'big-2', [], tcp('http', 8080)), null);
    const small = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(small.full).toBe(true);
    expect(small.batch).toContain('-m comment --comment ns1/big:http -s 10.100.0.1 -j KUBE-MARK-MASQ');
  });
});

describe('iptables proxier: tampering', () => {
  it('notices a flushed canary within about a second and asks for a full sync', async () => {
    const h = harness();
    const reasons: string[] = [];
    const stop = h.backend.watchTampering!((reason) => reasons.push(reason));
    await h.clock.advanceAsync(3000);
    expect(reasons).toEqual([]);
    h.kernel.flushAll();
    await h.clock.advanceAsync(1200);
    expect(reasons).toEqual(['chain KUBE-PROXY-CANARY was deleted from table mangle']);
    // The canaries are back, so the monitor stays quiet until the next flush.
    expect(await h.kernel.chainExists('mangle', 'KUBE-PROXY-CANARY')).toBe(true);
    await h.clock.advanceAsync(5000);
    expect(reasons).toHaveLength(1);
    stop();
    h.kernel.flushAll();
    await h.clock.advanceAsync(5000);
    expect(reasons).toHaveLength(1);
  });

  it('waits for the other tables to be flushed too before reporting', async () => {
    const h = harness();
    const reasons: string[] = [];
    h.backend.watchTampering!((reason) => reasons.push(reason));
    await h.clock.advanceAsync(1000);
    // Only mangle is flushed so far; nat and filter follow 2 s later.
    await h.kernel.deleteChain('mangle', 'KUBE-PROXY-CANARY');
    await h.clock.advanceAsync(2000);
    expect(reasons).toEqual([]);
    await h.kernel.deleteChain('nat', 'KUBE-PROXY-CANARY');
    await h.kernel.deleteChain('filter', 'KUBE-PROXY-CANARY');
    await h.clock.advanceAsync(200);
    expect(reasons).toHaveLength(1);
  });
});

describe('iptables proxier: big nat rewrites in several commits (nft)', () => {
  function many(n: number) {
    const objects = [];
    for (let i = 0; i < n; i++) {
      objects.push(makeService('ns1', `s${i}`, { type: 'NodePort', clusterIP: `10.96.1.${i}`, ports: [{ name: 'http', port: 80, protocol: 'TCP', nodePort: 30000 + i }] }));
      objects.push(makeSlice('ns1', `s${i}`, `s${i}-1`, [ep(`10.244.${i}.1`), ep(`10.244.${i}.2`), ep(`10.244.${i}.3`)], tcp('http', 8080)));
    }
    return stateFromObjects('node-a', objects);
  }

  it('commits whole service ports in blocks, fixed chains last, and ends in the same kernel state', async () => {
    const config = testConfig({ clusterCIDRs: ['10.244.0.0/16'] });
    const split = harness({ config, rulesPerCommit: 40 });
    const whole = harness({ config, rulesPerCommit: Infinity });
    const state = many(30);
    const c = state.checkout();
    const r = await split.backend.sync({ state: c, forceFull: true });
    expect(r.error).toBeUndefined();
    expect((await whole.backend.sync({ state: c, forceFull: true })).error).toBeUndefined();
    const natBlocks = parseIptablesScript(r.batch!).tables.filter((t) => t.name === 'nat');
    expect(natBlocks.length).toBeGreaterThan(5);
    // Each service port's chains are in one block, and KUBE-SERVICES is only in the last one.
    const blockOf = new Map<string, number>();
    natBlocks.forEach((b, i) => b.entries.forEach((e) => e.kind === 'chain' && blockOf.set(e.name, i)));
    expect(blockOf.get('KUBE-SERVICES')).toBe(natBlocks.length - 1);
    for (const b of natBlocks.slice(1, -1)) expect(b.entries.filter((e) => e.kind === 'command').length).toBeLessThanOrEqual(40);
    // The fake refuses a jump to a chain that does not exist at that point: the blocks applied in order.
    expect(split.kernel.dump()).toEqual(whole.kernel.dump());
  });

  it('commits the endpoint chains of a port bigger than a commit ahead of its service chains, and ends in the same kernel state', async () => {
    const config = testConfig({ clusterCIDRs: ['10.244.0.0/16'] });
    const eps = (n: number, from = 0) => Array.from({ length: n }, (_, i) => ep(`10.245.${(from + i) >> 8}.${(from + i) & 255}`));
    const objects = [
      makeService('ns1', 'big', { type: 'NodePort', clusterIP: '10.96.2.1', ports: [{ name: 'http', port: 80, protocol: 'TCP', nodePort: 31000 }] }),
      makeSlice('ns1', 'big', 'big-1', eps(60), tcp('http', 8080)),
      ...[0, 1, 2].flatMap((i) => [
        makeService('ns1', `s${i}`, { type: 'NodePort', clusterIP: `10.96.1.${i}`, ports: [{ name: 'http', port: 80, protocol: 'TCP', nodePort: 30000 + i }] }),
        makeSlice('ns1', `s${i}`, `s${i}-1`, [ep(`10.244.${i}.1`), ep(`10.244.${i}.2`)], tcp('http', 8080)),
      ]),
    ];
    const state = stateFromObjects('node-a', objects);
    const split = harness({ config, rulesPerCommit: 40 });
    const whole = harness({ config, rulesPerCommit: Infinity });
    const r = await split.backend.sync({ state: state.checkout(), forceFull: true });
    expect(r.error).toBeUndefined();
    expect((await whole.backend.sync({ state: state.checkout(), forceFull: true })).error).toBeUndefined();
    expect(split.kernel.dump()).toEqual(whole.kernel.dump());
    const nat = parseIptablesScript(r.batch!).tables.filter((t) => t.name === 'nat');
    const blockOf = new Map<string, number>();
    nat.forEach((b, i) => b.entries.forEach((e) => e.kind === 'chain' && blockOf.set(e.name, i)));
    const svc = [...blockOf.keys()].find((c) => c.startsWith('KUBE-SVC-') && split.kernel.rules('nat', c).length > 60)!;
    const seps = split.kernel
      .rules('nat', svc)
      .map((x) => x.split(' -j ')[1])
      .filter((c) => c.startsWith('KUBE-SEP-'));
    expect(seps).toHaveLength(60);
    // 60 endpoint chains of 2 rules: blocks of at most 40 rules (20 chains) ahead of the block with KUBE-SVC-, KUBE-SERVICES last.
    expect(new Set(seps.map((c) => blockOf.get(c))).size).toBe(3);
    for (const c of seps) expect(blockOf.get(c)!).toBeLessThan(blockOf.get(svc)!);
    for (const b of nat.slice(1, -1))
      if (b.entries.some((e) => e.kind === 'chain' && e.name.startsWith('KUBE-SEP-'))) expect(b.entries.filter((e) => e.kind === 'command').length).toBeLessThanOrEqual(40);
    expect(blockOf.get('KUBE-SERVICES')).toBe(nat.length - 1);

    // A partial sync of the big port (one endpoint more) splits the same way and lands where a whole rewrite does.
    state.onEndpointSlice(null, makeSlice('ns1', 'big', 'big-2', eps(1, 60), tcp('http', 8080)));
    const partial = await split.backend.sync({ state: state.checkout(), forceFull: false });
    expect(partial.error).toBeUndefined();
    expect(partial.full).toBe(false);
    expect(parseIptablesScript(partial.batch!).tables.filter((t) => t.name === 'nat').length).toBeGreaterThan(3);
    await whole.backend.sync({ state: state.checkout(), forceFull: false });
    expect(split.kernel.dump()).toEqual(whole.kernel.dump());
  });

  it('keeps deleting stale chains in the final block', async () => {
    const h = harness({ config: testConfig({ clusterCIDRs: ['10.244.0.0/16'] }), rulesPerCommit: 40 });
    const state = many(30);
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    for (let i = 0; i < 12; i++) state.onService(makeService('ns1', `s${i}`, {}), null);
    for (let i = 12; i < 30; i++) state.onEndpointSlice(null, makeSlice('ns1', `s${i}`, `s${i}-1`, [ep(`10.244.${i}.9`)], tcp('http', 8080)));
    const r = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(r.error).toBeUndefined();
    expect(r.full).toBe(false);
    const nat = parseIptablesScript(r.batch!).tables.filter((t) => t.name === 'nat');
    expect(nat.length).toBeGreaterThan(2);
    expect(nat.at(-1)!.entries.some((e) => e.kind === 'command' && e.op === 'X')).toBe(true);
    const natChains = h.kernel.chains('nat');
    expect(natChains.filter((c) => c.startsWith('KUBE-SVC-'))).toHaveLength(18);
    expect(natChains.filter((c) => c.startsWith('KUBE-SEP-'))).toHaveLength(18);
  });

  it('does not split for legacy iptables, which rewrites the whole table at every commit', async () => {
    const h = harness({ kernel: new SimulatedIptables({ flavor: 'legacy' }) });
    const r = await h.backend.sync({ state: many(300).checkout(), forceFull: true });
    expect(parseIptablesScript(r.batch!).tables.filter((t) => t.name === 'nat')).toHaveLength(1);
  });
});

import { describe, expect, it } from 'vitest';
import type { BackendSyncResult } from '../../proxy/backend.ts';
import { nftHarness, testConfig } from '../../proxy/nftables/testing.ts';
import type { SyncRecord } from '../../proxy/sync-loop.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../../proxy/testing.ts';
import { categorizeEndpoints } from '../../proxy/topology.ts';
import { findDrift } from '../drift.ts';
import type { KernelChain, KernelTables } from '../kernel-view.ts';
import { noYield } from '../yield.ts';
import { parseNftTableJson } from '../../kernel/nft-listing.ts';
import { ruleTarget } from './tables.ts';
import { NftablesView } from './view.ts';

/**
 * node-a's nftables view of a small cluster:
 *   ns1/web  LoadBalancer 10.96.0.1:80/TCP, node port 30080, LB IP 192.0.2.10 (source range 203.0.113.0/24),
 *            ClientIP affinity, endpoints 10.244.0.1 (node-a), 10.244.1.1 (node-b)
 *   ns1/dns  ClusterIP 10.96.0.10:53/UDP, no endpoints
 *   ns1/ext  NodePort 10.96.0.20:8080/TCP (30020), external IP 198.51.100.7, externalTrafficPolicy Local, one endpoint on node-b
 */
const config = testConfig({ mode: 'nftables', clusterCIDRs: ['10.244.0.0/16'] });
const tcp = (port: number) => [{ name: 'http', port, protocol: 'TCP' }];
const objects = () => [
  makeService(
    'ns1',
    'web',
    {
      type: 'LoadBalancer',
      clusterIP: '10.96.0.1',
      ports: [{ name: 'http', port: 80, protocol: 'TCP', nodePort: 30080 }],
      loadBalancerSourceRanges: ['203.0.113.0/24'],
      sessionAffinity: 'ClientIP',
    },
    { status: { loadBalancer: { ingress: [{ ip: '192.0.2.10' }] } } },
  ),
  makeSlice('ns1', 'web', 'web-1', [ep('10.244.0.1', { nodeName: 'node-a' }), ep('10.244.1.1', { nodeName: 'node-b' })], tcp(8080)),
  makeService('ns1', 'dns', { clusterIP: '10.96.0.10', ports: [{ name: 'dns', port: 53, protocol: 'UDP' }] }),
  makeService('ns1', 'ext', {
    type: 'NodePort',
    clusterIP: '10.96.0.20',
    externalIPs: ['198.51.100.7'],
    externalTrafficPolicy: 'Local',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP', nodePort: 30020 }],
  }),
  makeSlice('ns1', 'ext', 'ext-1', [ep('10.244.1.5', { nodeName: 'node-b' })], tcp(8080)),
];

let seq = 0;
function record(ok: boolean, error?: string): SyncRecord {
  seq++;
  return {
    family: 'IPv4',
    seq,
    trigger: 'change',
    startedAt: seq * 1000,
    finishedAt: seq * 1000 + 5,
    full: true,
    ok,
    durationMs: 5,
    buildMs: 1,
    applyMs: 4,
    linesWritten: 0,
    bytesWritten: 0,
    servicesWritten: 0,
    servicesChanged: [],
    servicesChangedCount: 0,
    servicePorts: 0,
    endpoints: 0,
    rulesByTable: {},
    networkProgrammingMs: [],
    consecutiveFailures: ok ? 0 : 1,
    ...(error ? { error: { code: 'KPROXY_ERR_NFT_TRANSACTION', message: error } } : {}),
  };
}

async function synced() {
  const h = nftHarness({ config });
  const view = new NftablesView({ backend: h.backend, simulated: true, pause: noYield });
  const state = stateFromObjects('node-a', objects());
  const sync = async () => {
    const r: BackendSyncResult = await h.backend.sync({ state: state.checkout(), forceFull: false });
    view.noteSync(record(r.error === undefined, r.error?.message), r);
    return r;
  };
  await sync();
  return { h, view, state, sync };
}

const chainOf = (t: KernelTables, chain: string): KernelChain => {
  const c = t.tables.get('kube-proxy')?.chains.get(chain);
  if (!c) throw new Error(`no ${chain} in [${[...(t.tables.get('kube-proxy')?.chains.keys() ?? [])].join(', ')}]`);
  return c;
};
const webPort = (state: ReturnType<typeof stateFromObjects>) => {
  const c = state.checkout();
  const sp = [...c.services.values()].find((s) => s.serviceName === 'web')!;
  return { sp, eps: c.endpoints.get(sp.id) ?? [] };
};

describe('nftables kernel view: the table as the kernel lists it', () => {
  it('lists the kube-proxy table with base chains first (their hook and priority), regular chains, then sets and maps with their elements', async () => {
    const { view } = await synced();
    const k = await view.read();
    expect([...k.tables.keys()]).toEqual(['kube-proxy']);
    const names = [...k.tables.get('kube-proxy')!.chains.keys()];
    expect(names.slice(0, 3)).toEqual(['filter-forward', 'filter-input', 'filter-output']);
    expect(chainOf(k, 'nat-prerouting')).toMatchObject({ builtin: true, policy: 'nat hook prerouting priority -100' });
    expect(chainOf(k, 'services').rules.map((r) => [r.spec, r.target])).toEqual([
      ['ip daddr . meta l4proto . th dport vmap @service-ips', '@service-ips'],
      ['fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports', '@service-nodeports'],
    ]);
    const map = chainOf(k, '@service-ips');
    expect(map.policy).toBe('map ipv4_addr . inet_proto . inet_service : verdict');
    const web = map.rules.find((r) => r.spec.startsWith('10.96.0.1 . tcp . 80 : goto service-'))!;
    expect(web.target).toMatch(/^service-[A-Z2-7]{8}-ns1\/web\/tcp\/http$/);
    expect(chainOf(k, '@no-endpoint-services').rules.map((r) => r.spec)).toEqual([
      '10.96.0.10 . udp . 53 : goto reject-chain comment "ns1/dns:dns"',
      '198.51.100.7 . tcp . 8080 : drop comment "ns1/ext:http"',
    ]);
    // Affinity sets are listed with the clients the kernel holds.
    expect(names.some((n) => n.startsWith('@affinity-'))).toBe(true);
    expect(k.chainCount).toBe(names.length);
  });

  it('reads rule counters where a rule has one, and points a numgen vmap at no single chain', () => {
    expect(ruleTarget('numgen random mod 2 vmap { 0 : goto endpoint-a , 1 : goto endpoint-b }')).toBeNull();
    expect(ruleTarget('ip saddr @affinity-x goto endpoint-x')).toBe('endpoint-x');
    expect(ruleTarget('update @affinity-x { ip saddr }')).toBe('@affinity-x');
    expect(ruleTarget('ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"')).toBe('@cluster-ips');
    expect(ruleTarget('meta l4proto tcp dnat to 10.244.0.1:8080')).toBe('dnat');
    expect(ruleTarget('ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports')).toBe('@service-nodeports');
  });

  it('shows the figures of a rule with a counter (read from nft -j JSON), and does not count them as drift', async () => {
    const json = JSON.stringify({
      nftables: [
        { metainfo: { json_schema_version: 1 } },
        { table: { family: 'ip', name: 'kube-proxy', handle: 1 } },
        { chain: { family: 'ip', table: 'kube-proxy', name: 'services', handle: 2 } },
        { rule: { family: 'ip', table: 'kube-proxy', chain: 'services', handle: 3, expr: [{ counter: { packets: 12, bytes: 720 } }, { jump: { target: 'mark-for-masquerade' } }] } },
      ],
    });
    const runner = { listTable: async () => parseNftTableJson(json, 'ip', 'kube-proxy'), run: async () => {}, deleteTable: async () => false };
    const view = new NftablesView({ backend: { runner, family: 'IPv4', intended: () => null, lastFailedInput: () => null }, simulated: false, pause: noYield });
    const services = chainOf(await view.read(), 'services');
    expect(services).toMatchObject({ packets: 12, bytes: 720 });
    expect(services.rules[0]).toMatchObject({ spec: 'counter packets 12 bytes 720 jump mark-for-masquerade', target: 'mark-for-masquerade', packets: 12, bytes: 720 });
    expect(view.ruleKey('kube-proxy', services.rules[0])).toBe(view.ruleKey('kube-proxy', { ...services.rules[0], spec: 'counter packets 99 bytes 9900 jump mark-for-masquerade' }));
  });
});

describe('nftables kernel view: what kproxy wrote, and drift', () => {
  it('finds no drift right after a sync, and names a deleted element, a hand-added chain and an extra rule', async () => {
    const { h, view } = await synced();
    const intended = (await view.intended())!;
    expect(await findDrift(intended, await view.read(), view, noYield)).toEqual([]);
    await h.kernel.run('delete element ip kube-proxy cluster-ips { 10.96.0.20 }\nadd chain ip kube-proxy by-hand\nadd rule ip kube-proxy services ip daddr 10.1.2.3 drop\n');
    const found = await findDrift(intended, await view.read(), view, noYield);
    expect(found.map((f) => [f.chain, f.kind])).toEqual(
      expect.arrayContaining([
        ['@cluster-ips', 'missing-rule'],
        ['services', 'unexpected-rule'],
        ['by-hand', 'unexpected-chain'],
      ]),
    );
  });

  it('is empty after a cleanup (everything still listed is drift) and comes back with the next sync', async () => {
    const { view, sync } = await synced();
    const v = view.intendedVersion();
    view.noteCleanup();
    expect(view.intendedVersion()).toBeGreaterThan(v);
    expect((await view.intended())!.chainCount).toBe(0);
    await sync();
    expect((await view.intended())!.chainCount).toBeGreaterThan(10);
  });

  it('keeps the last accepted and the last refused transaction, and writes what it wrote as nft -f input', async () => {
    const { h, view, state, sync } = await synced();
    expect(view.lastInput()!.body.textSync()).toMatch(/^add table ip kube-proxy/);
    state.onEndpointSlice(null, makeSlice('ns1', 'dns', 'dns-1', [ep('10.244.1.53', { nodeName: 'node-b' })], [{ name: 'dns', port: 53, protocol: 'UDP' }]));
    h.kernel.runHook = () => '/dev/stdin:2:1-10: Error: Could not process rule: No such file or directory';
    const failed = await sync();
    expect(view.lastFailedInput()).toMatchObject({ error: expect.stringContaining('No such file or directory') });
    expect(view.lastFailedInput()!.body.textSync()).toBe(failed.batch);
    h.kernel.runHook = null;
    // What kproxy wrote is still what the last successful sync left, elements included: no drift.
    expect(await findDrift((await view.intended())!, await view.read(), view, noYield)).toEqual([]);
    const text = (await view.formatIntended((await view.intended())!)).join('');
    expect(text).toMatch(/^add table ip kube-proxy \{ comment "rules for kube-proxy" ; \}\n/);
    expect(text).toContain('add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips');
    expect(text).toMatch(/^add element ip kube-proxy service-ips \{ 10\.96\.0\.1 \. tcp \. 80 : goto service-\S+ \}$/m);
  });
});

describe('nftables kernel view: a service port', () => {
  it("follows the port's map elements: firewall-ips, service-ips and service-nodeports to its chains", async () => {
    const { view, state } = await synced();
    const { sp, eps } = webPort(state);
    const o = view.servicePort(sp, eps, categorizeEndpoints(eps, sp, 'node-a', ''));
    const svc = o.owned.find((c) => c.role === 'service')!.chain;
    const ext = o.owned.find((c) => c.role === 'external')!.chain;
    const fw = o.owned.find((c) => c.role === 'firewall')!.chain;
    expect(o.flows).toEqual([
      { kind: 'clusterIP', address: '10.96.0.1:80/TCP', path: ['@service-ips', svc], policy: 'Cluster', outcome: 'endpoints' },
      { kind: 'nodePort', address: 'node:30080/TCP', path: ['@service-nodeports', ext, svc], policy: 'Cluster', outcome: 'endpoints' },
      {
        kind: 'loadBalancerIP',
        address: '192.0.2.10:80/TCP',
        path: ['@firewall-ips', fw, '@service-ips', ext, svc],
        policy: 'Cluster',
        outcome: 'endpoints',
        note: `only from 203.0.113.0/24; other sources are dropped by ${fw} (filter, before DNAT)`,
      },
    ]);
    expect(o.owned.map((c) => c.role)).toEqual(['firewall', 'external', 'service', 'endpoint', 'endpoint', 'affinity', 'affinity']);
    expect(o.endpointObject('10.244.1.1:8080')).toMatch(/^endpoint-[A-Z2-7]{8}-ns1\/web\/tcp\/http__10\.244\.1\.1\/8080$/);
    expect(o.owned.filter((c) => c.role === 'affinity').map((c) => c.chain)).toEqual(o.owned.filter((c) => c.role === 'endpoint').map((c) => c.chain.replace('endpoint-', '@affinity-')));
    // Its elements in the shared maps are its entry rules; another port's are not.
    const k = await view.read();
    const mine = chainOf(k, '@service-ips').rules.filter((r) => o.isEntryRule(r));
    expect(mine.map((r) => r.spec.split(' : ')[0])).toEqual(['10.96.0.1 . tcp . 80', '192.0.2.10 . tcp . 80']);
  });

  it('shows a port without endpoints rejected through no-endpoint-services, and an ETP Local one without local endpoints dropped', async () => {
    const { view, state } = await synced();
    const c = state.checkout();
    const port = (name: string) => {
      const sp = [...c.services.values()].find((s) => s.serviceName === name)!;
      const eps = c.endpoints.get(sp.id) ?? [];
      return view.servicePort(sp, eps, categorizeEndpoints(eps, sp, 'node-a', ''));
    };
    expect(port('dns').flows).toEqual([expect.objectContaining({ kind: 'clusterIP', path: ['@no-endpoint-services', 'reject-chain'], outcome: 'reject' })]);
    const ext = port('ext').flows;
    expect(ext[0]).toMatchObject({ kind: 'clusterIP', outcome: 'endpoints', policy: 'Cluster' });
    expect(ext[1]).toMatchObject({
      kind: 'nodePort',
      address: 'node:30020/TCP',
      path: ['@service-nodeports', expect.stringMatching(/^external-/), '@no-endpoint-nodeports'],
      policy: 'Local',
      outcome: 'drop',
    });
    expect(ext[2]).toMatchObject({
      kind: 'externalIP',
      address: '198.51.100.7:8080/TCP',
      path: ['@service-ips', expect.stringMatching(/^external-/), '@no-endpoint-services'],
      policy: 'Local',
      outcome: 'drop',
    });
  });
});

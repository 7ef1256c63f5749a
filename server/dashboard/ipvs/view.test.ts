import { describe, expect, it } from 'vitest';
import { findDrift } from '../drift.ts';
import type { KernelChain, KernelTables } from '../kernel-view.ts';
import { noYield } from '../yield.ts';
import { silentLogger } from '../../log.ts';
import { cleanupIptables } from '../../proxy/xtables/cleanup.ts';
import { ipvsConfig } from '../../proxy/ipvs/testing.ts';
import { ipvsCluster, ipvsViewHarness } from './testing.ts';

const WEB = '10.96.0.1:80/TCP';
const chainOf = (t: KernelTables, table: string, chain: string): KernelChain => {
  const c = t.tables.get(table)?.chains.get(chain);
  if (!c) throw new Error(`no ${table}/${chain} in [${[...(t.tables.get(table)?.chains.keys() ?? [])].join(', ')}]`);
  return c;
};
const specs = (c: KernelChain) => c.rules.map((r) => r.spec);

async function synced() {
  const h = ipvsViewHarness();
  const cluster = ipvsCluster();
  await h.sync(cluster.state);
  return { h, cluster };
}

describe('IPVS kernel view: what the kernel holds', () => {
  it('lists each virtual server with its scheduler and its real servers with weights and connection counts', async () => {
    const { h } = await synced();
    h.ipvs.setConnections(WEB, '10.244.1.1:8080', 3, 12);
    h.ipvs.setConnections(WEB, '10.244.1.2:8080', 1, 0);
    const k = await h.view.read();
    expect([...k.tables.keys()]).toEqual(['ipvs', 'ipsets', 'addresses', 'nat', 'filter']);
    expect([...k.tables.get('ipvs')!.chains.keys()]).toEqual(['TCP 10.0.0.10:30080', 'TCP 10.96.0.1:80', 'TCP 10.96.0.20:8080', 'TCP 192.0.2.10:80', 'TCP 198.51.100.7:8080', 'UDP 10.96.0.10:53']);
    const web = chainOf(k, 'ipvs', 'TCP 10.96.0.1:80');
    expect(web.policy).toBe('rr');
    expect(specs(web)).toEqual(['-> 10.244.0.1:8080 Masq weight 1', '-> 10.244.1.1:8080 Masq weight 1', '-> 10.244.1.2:8080 Masq weight 1']);
    expect(web.rules.map((r) => [r.ipvs!.weight, r.ipvs!.active, r.ipvs!.inactive, r.ipvs!.draining])).toEqual([
      [1, 0, 0, false],
      [1, 3, 12, false],
      [1, 1, 0, false],
    ]);
    expect(web.ipvs).toMatchObject({ protocol: 'TCP', address: '10.96.0.1', port: 80, scheduler: 'rr', persistence: 0, active: 4, inactive: 12 });
    expect(chainOf(k, 'ipvs', 'UDP 10.96.0.10:53').rules).toEqual([]);
  });

  it('shows persistence (ClientIP affinity) and scheduler flags in the virtual server settings', async () => {
    const h = ipvsViewHarness(ipvsConfig({ ipvs: { scheduler: 'mh' } }));
    const cluster = ipvsCluster();
    await h.sync(cluster.state);
    await h.ipvs.restore('-E -t 10.96.0.1:80 -s mh -p 600 -b mh-port\n');
    const k = await h.view.read();
    expect(chainOf(k, 'ipvs', 'TCP 10.96.0.1:80').policy).toBe('mh (mh-port) persistent 600');
    expect(chainOf(k, 'ipvs', 'TCP 10.96.0.1:80').ipvs).toMatchObject({ scheduler: 'mh', persistence: 600, flags: ['mh-port'] });
  });

  it('carries traffic counters and per-second rates between two reads', async () => {
    const { h } = await synced();
    const traffic = { conns: 10, inPackets: 100, outPackets: 80, inBytes: 6000, outBytes: 90_000 };
    h.ipvs.addTraffic(WEB, '10.244.1.1:8080', traffic);
    const first = chainOf(await h.view.read(), 'ipvs', 'TCP 10.96.0.1:80');
    expect(first).toMatchObject({ packets: 180, bytes: 96_000, ipvs: { conns: 10, inPackets: 100, outBytes: 90_000, rate: null } });
    expect(first.rules[1]).toMatchObject({ packets: 180, bytes: 96_000, ipvs: { conns: 10, rate: null } });

    h.clock.advance(5_000);
    h.ipvs.addTraffic(WEB, '10.244.1.1:8080', { conns: 5, inPackets: 50, outPackets: 50, inBytes: 1000, outBytes: 4000 });
    const second = chainOf(await h.view.read(), 'ipvs', 'TCP 10.96.0.1:80');
    expect(second.ipvs!.rate).toEqual({ conns: 1, packets: 20, bytes: 1000 });
    expect(second.rules[1].ipvs!.rate).toEqual({ conns: 1, packets: 20, bytes: 1000 });
    expect(second.rules[0].ipvs!.rate).toEqual({ conns: 0, packets: 0, bytes: 0 });
  });

  it('gives no rate for a virtual server whose counters started over (deleted and created again)', async () => {
    const { h } = await synced();
    h.ipvs.addTraffic(WEB, '10.244.1.1:8080', { conns: 10, inPackets: 100, outPackets: 80, inBytes: 6000, outBytes: 9000 });
    await h.view.read();
    await h.ipvs.restore('-D -t 10.96.0.1:80\n-A -t 10.96.0.1:80 -s rr\n-a -t 10.96.0.1:80 -r 10.244.1.1:8080 -m -w 1\n');
    h.clock.advance(5_000);
    expect(chainOf(await h.view.read(), 'ipvs', 'TCP 10.96.0.1:80').ipvs!.rate).toBeNull();
  });

  it('lists every set with its type and sorted members, and the addresses on kube-ipvs0', async () => {
    const { h } = await synced();
    const k = await h.view.read();
    const clusterIP = chainOf(k, 'ipsets', 'KUBE-CLUSTER-IP');
    expect(clusterIP.policy).toBe('hash:ip,port family inet');
    expect(specs(clusterIP)).toEqual(['10.96.0.1,tcp:80', '10.96.0.10,udp:53', '10.96.0.20,tcp:8080']);
    expect(chainOf(k, 'ipsets', 'KUBE-NODE-PORT-TCP')).toMatchObject({ policy: 'bitmap:port', rules: [{ spec: '30080' }] });
    expect(specs(chainOf(k, 'ipsets', 'KUBE-LOAD-BALANCER-SOURCE-CIDR'))).toEqual(['192.0.2.10,tcp:80,203.0.113.0/24']);
    expect(specs(chainOf(k, 'addresses', 'kube-ipvs0'))).toEqual(['10.96.0.1/32', '10.96.0.10/32', '10.96.0.20/32', '192.0.2.10/32', '198.51.100.7/32']);
  });

  it("keeps IPVS mode's nat and filter tables from iptables-save, with counters", async () => {
    const { h } = await synced();
    const k = await h.view.read();
    expect(specs(chainOf(k, 'nat', 'KUBE-SERVICES'))).toContain('-m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT');
    expect(chainOf(k, 'filter', 'KUBE-SOURCE-RANGES-FIREWALL').rules.at(-1)).toMatchObject({ spec: '-j DROP', target: 'DROP' });
    expect(k.tables.has('mangle')).toBe(false);
  });
});

describe('IPVS kernel view: graceful termination', () => {
  it('shows a removed endpoint as a draining real server at weight 0 with the time it started, and no drift', async () => {
    const { h, cluster } = await synced();
    h.clock.advance(60_000);
    const since = h.clock.now();
    cluster.webEndpoints(['10.244.0.1', '10.244.1.1']);
    await h.sync(cluster.state);
    h.ipvs.setConnections(WEB, '10.244.1.2:8080', 2, 1);
    const k = await h.view.read();
    const gone = chainOf(k, 'ipvs', 'TCP 10.96.0.1:80').rules[2];
    expect(gone.spec).toBe('-> 10.244.1.2:8080 Masq weight 0');
    expect(gone.ipvs).toMatchObject({ weight: 0, draining: true, drainingSince: since, active: 2, inactive: 1 });
    const intended = (await h.view.intended())!;
    expect(chainOf(intended, 'ipvs', 'TCP 10.96.0.1:80').rules[2].ipvs).toMatchObject({ weight: 0, draining: true, drainingSince: since });
    expect(await findDrift(intended, k, h.view, noYield)).toEqual([]);
  });

  it('does not call a weight-0 real server draining when kproxy did not set it', async () => {
    const { h } = await synced();
    await h.ipvs.restore('-e -t 10.96.0.1:80 -r 10.244.1.1:8080 -m -w 0\n');
    const k = await h.view.read();
    expect(chainOf(k, 'ipvs', 'TCP 10.96.0.1:80').rules[1].ipvs).toMatchObject({ weight: 0, draining: false });
    expect(chainOf(k, 'ipvs', 'TCP 10.96.0.1:80').rules[1].ipvs!.drainingSince).toBeUndefined();
  });
});

describe('IPVS kernel view: drift', () => {
  const drift = async (h: Awaited<ReturnType<typeof synced>>['h']) => findDrift((await h.view.intended())!, await h.view.read(), h.view, noYield);

  it('finds nothing right after a sync', async () => {
    const { h } = await synced();
    expect(await drift(h)).toEqual([]);
  });

  it('finds real servers, virtual servers, settings, set members, addresses and rules changed behind its back', async () => {
    const { h } = await synced();
    await h.ipvs.restore('-d -t 10.96.0.1:80 -r 10.244.1.2:8080\n-e -t 10.96.0.1:80 -r 10.244.1.1:8080 -m -w 5\n-A -t 10.96.0.99:80 -s rr\n-E -u 10.96.0.10:53 -s lc\n-D -t 198.51.100.7:8080\n');
    await h.ipset.restore('del KUBE-CLUSTER-IP 10.96.0.20,tcp:8080\nadd KUBE-NODE-PORT-TCP 31999\n');
    await h.netlink.batch('addr del 10.96.0.20/32 dev kube-ipvs0\n');
    await h.iptables.restore('*filter\n:KUBE-SOURCE-RANGES-FIREWALL - [0:0]\nCOMMIT\n', { noflush: true });
    const found = (await drift(h)).map((f) => `${f.kind} ${f.table}/${f.chain}: ${f.detail}`);
    expect(found).toEqual(
      expect.arrayContaining([
        'missing-rule ipvs/TCP 10.96.0.1:80: -> 10.244.1.1:8080 Masq weight 1',
        'missing-rule ipvs/TCP 10.96.0.1:80: -> 10.244.1.2:8080 Masq weight 1',
        'unexpected-rule ipvs/TCP 10.96.0.1:80: -> 10.244.1.1:8080 Masq weight 5',
        'missing-chain ipvs/TCP 198.51.100.7:8080: kproxy wrote 1 rules; the kernel has no such chain',
        'settings ipvs/UDP 10.96.0.10:53: kproxy wrote "rr"; the kernel has "lc"',
        'missing-rule ipsets/KUBE-CLUSTER-IP: 10.96.0.20,tcp:8080',
        'unexpected-rule ipsets/KUBE-NODE-PORT-TCP: 31999',
        'missing-rule addresses/kube-ipvs0: 10.96.0.20/32',
        'missing-rule filter/KUBE-SOURCE-RANGES-FIREWALL: -m comment --comment "Kubernetes service load balancer ip + port + source cidr for packet filter purpose" -m set --match-set KUBE-LOAD-BALANCER-SOURCE-CIDR dst,dst,src -j RETURN',
      ]),
    );
    expect(found.filter((f) => f.startsWith('unexpected-chain'))).toEqual([
      'unexpected-chain ipvs/TCP 10.96.0.99:80: 0 rules in a chain kproxy did not write (left by an earlier proxy, or added by hand)',
    ]);
    expect(found).toHaveLength(11);
  });

  it('leaves virtual servers in excludeCIDRs, other sets and lost jump rules to what they are', async () => {
    const h = ipvsViewHarness(ipvsConfig({ ipvs: { excludeCIDRs: ['172.16.0.0/12'] } }));
    const cluster = ipvsCluster();
    await h.sync(cluster.state);
    await h.ipvs.restore('-A -t 172.16.0.5:80 -s wlc\n');
    await h.ipset.restore('create cali40-hosts hash:ip family inet\n');
    await h.iptables.deleteRule('nat', 'PREROUTING', ['-m', 'comment', '--comment', 'kubernetes service portals', '-j', 'KUBE-SERVICES']);
    const found = await drift(h);
    expect(found).toEqual([{ table: 'nat', chain: 'PREROUTING', kind: 'missing-jump', detail: '-m comment --comment "kubernetes service portals" -j KUBE-SERVICES' }]);
  });

  it('expects an empty kernel after a cleanup, and sees what is left', async () => {
    const { h } = await synced();
    const before = h.view.intendedVersion();
    // As the daemon's cleanup does: the rules first (they hold the sets), then IPVS objects.
    await cleanupIptables({ runners: [h.iptables], logger: silentLogger });
    await h.backend.cleanup();
    expect(h.view.intendedVersion()).toBeGreaterThan(before);
    const intended = (await h.view.intended())!;
    expect(intended.chainCount).toBe(0);
    expect(await drift(h)).toEqual([]);
    await h.ipvs.restore('-A -t 10.96.0.1:80 -s rr\n');
    await h.iptables.restore('*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n', { noflush: true });
    expect((await drift(h)).map((f) => `${f.kind} ${f.table}/${f.chain}`)).toEqual(['unexpected-chain ipvs/TCP 10.96.0.1:80', 'unexpected-chain nat/KUBE-SERVICES']);
  });
});

describe('IPVS kernel view: bookkeeping', () => {
  it('builds the intended tables once per sync and changes its version with each successful sync', async () => {
    const { h, cluster } = await synced();
    const v1 = h.view.intendedVersion();
    const a = await h.view.intended();
    expect(await h.view.intended()).toBe(a);
    cluster.webEndpoints(['10.244.0.1']);
    await h.sync(cluster.state);
    expect(h.view.intendedVersion()).toBeGreaterThan(v1);
    expect(await h.view.intended()).not.toBe(a);
  });

  it('keeps the last accepted and the last refused batch for download', async () => {
    const { h } = await synced();
    const record = (seq: number, ok: boolean) => ({ seq, ok, finishedAt: 1000 + seq, ...(ok ? {} : { error: { code: 'KPROXY_ERR_IPVS', message: 'refused' } }) }) as never;
    h.view.noteSync(record(1, true), { full: true, batch: '# ipvsadm -R\n-A -t 10.96.0.1:80 -s rr\n' } as never);
    h.view.noteSync(record(2, false), { full: false, batch: '# ipvsadm -R\n-a bad\n' } as never);
    h.view.noteSync(record(3, true), { full: false } as never);
    expect(h.view.lastInput()).toMatchObject({ seq: 1, full: true });
    expect(h.view.lastInput()!.body.textSync()).toBe('# ipvsadm -R\n-A -t 10.96.0.1:80 -s rr\n');
    expect(h.view.lastFailedInput()).toMatchObject({ seq: 2, error: 'refused' });
  });

  it('formats the intended objects in the formats the tools list and take', async () => {
    const { h } = await synced();
    const text = (await h.view.formatIntended((await h.view.intended())!)).join('');
    const part = (header: string) =>
      text
        .split(/^# /m)
        .find((p) => p.startsWith(header))!
        .split('\n')
        .slice(1)
        .join('\n');
    expect(part('ipvsadm -Sn')).toBe(h.ipvs.saveText());
    expect(part('ipset save')).toBe(h.ipset.saveText());
    expect(part('ip addr show kube-ipvs0')).toContain('10.96.0.1/32\n');
    expect(part('iptables-save')).toMatch(/^\*nat\n[\s\S]*COMMIT\n\*filter\n[\s\S]*COMMIT\n$/);
  });
});

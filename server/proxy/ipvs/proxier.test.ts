import { describe, expect, it } from 'vitest';
import { MemoryLog } from '../../log.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { ipvsConfig, ipvsHarness } from './testing.ts';

const tcp = (name: string, port: number) => [{ name, port, protocol: 'TCP' }];

function cluster() {
  return stateFromObjects('node-a', [
    makeService('ns1', 'a', { clusterIP: '10.96.0.1', ports: tcp('http', 80) }),
    makeService('ns1', 'b', { clusterIP: '10.96.0.2', ports: tcp('http', 80) }),
    makeSlice('ns1', 'a', 'a-1', [ep('10.244.0.1', { nodeName: 'node-a' }), ep('10.244.1.1', { nodeName: 'node-b' })], tcp('http', 8080)),
    makeSlice('ns1', 'b', 'b-1', [ep('10.244.0.2', { nodeName: 'node-a' })], tcp('http', 8080)),
  ]);
}

const lines = (batch: string) => batch.split('\n').filter((l) => l !== '');

describe('IPVS proxier: reading and writing the kernel', () => {
  it('reads ipvsadm, ipset and ip once per sync and writes one batch per program', async () => {
    const h = ipvsHarness();
    const r = await h.sync(cluster());
    expect(r.full).toBe(true);
    expect(h.ipvs.calls.map((c) => c.op)).toEqual(['save', 'restore']);
    expect(h.ipset.calls.map((c) => c.op)).toEqual(['save', 'restore']);
    expect(h.netlink.calls.map((c) => c.op)).toEqual(['show', 'batch']);
    expect(h.iptables.callsOf('iptables-save')).toHaveLength(1);
    expect(h.iptables.callsOf('iptables-restore')).toHaveLength(1);
    expect(h.ipvs.saveText()).toBe(
      '-A -t 10.96.0.1:80 -s rr\n-a -t 10.96.0.1:80 -r 10.244.0.1:8080 -m -w 1\n-a -t 10.96.0.1:80 -r 10.244.1.1:8080 -m -w 1\n' +
        '-A -t 10.96.0.2:80 -s rr\n-a -t 10.96.0.2:80 -r 10.244.0.2:8080 -m -w 1\n',
    );
    expect(h.netlink.addresses('kube-ipvs0')).toEqual(['10.96.0.1', '10.96.0.2']);
    expect([...h.ipset.sets().get('KUBE-IPVS-IPS')!.entries].sort()).toEqual(['10.96.0.1', '10.96.0.2']);
    expect(r.rulesByTable).toMatchObject({ 'virtual-servers': 2, 'real-servers': 3 });
    expect(r.batch).toMatch(/^# ip -batch -\nlink add kube-ipvs0 type dummy\n/);
    expect(r.batch).toContain('# ipvsadm -R\n-A -t 10.96.0.1:80 -s rr\n');
  });

  it('writes nothing when nothing changed, and no iptables-restore unless the rules change', async () => {
    const h = ipvsHarness();
    const state = cluster();
    await h.sync(state);
    const second = await h.sync(state);
    expect(second.full).toBe(false);
    expect(second.linesWritten).toBe(0);
    expect(h.ipvs.restores).toHaveLength(1);
    expect(h.ipset.restores).toHaveLength(1);
    expect(h.netlink.batches).toHaveLength(1);
    expect(h.iptables.callsOf('iptables-restore')).toHaveLength(1);
    // Still one read of each table per sync.
    expect(h.ipvs.calls.filter((c) => c.op === 'save')).toHaveLength(2);
  });

  it('partial syncs touch only changed services; full syncs repair everything', async () => {
    const h = ipvsHarness();
    const state = cluster();
    await h.sync(state);
    // Someone deletes a real server of service b behind kproxy's back.
    await h.ipvs.restore('-d -t 10.96.0.2:80 -r 10.244.0.2:8080\n');
    state.onEndpointSlice(
      makeSlice('ns1', 'a', 'a-1', [ep('10.244.0.1', { nodeName: 'node-a' }), ep('10.244.1.1', { nodeName: 'node-b' })], tcp('http', 8080)),
      makeSlice('ns1', 'a', 'a-1', [ep('10.244.0.1', { nodeName: 'node-a' }), ep('10.244.1.1', { nodeName: 'node-b' }), ep('10.244.2.1', { nodeName: 'node-c' })], tcp('http', 8080)),
    );
    const partial = await h.sync(state);
    expect(partial.full).toBe(false);
    expect(partial.servicesWritten).toBe(1);
    expect(lines(h.ipvs.restores.at(-1)!)).toEqual(['-a -t 10.96.0.1:80 -r 10.244.2.1:8080 -m -w 1']);
    expect(h.ipvs.saveText()).not.toContain('-a -t 10.96.0.2:80');
    const full = await h.sync(state, true);
    expect(full.full).toBe(true);
    expect(lines(h.ipvs.restores.at(-1)!)).toEqual(['-a -t 10.96.0.2:80 -r 10.244.0.2:8080 -m -w 1']);
  });

  it('removes a deleted service: virtual server, address and set entries', async () => {
    const h = ipvsHarness();
    const state = cluster();
    await h.sync(state);
    state.onService(makeService('ns1', 'b', { clusterIP: '10.96.0.2', ports: tcp('http', 80) }), null);
    const r = await h.sync(state);
    expect(r.full).toBe(false);
    expect(lines(h.ipvs.restores.at(-1)!)).toEqual(['-D -t 10.96.0.2:80']);
    expect(lines(h.netlink.batches.at(-1)!)).toEqual(['addr del 10.96.0.2/32 dev kube-ipvs0']);
    expect(lines(h.ipset.restores.at(-1)!)).toEqual(['del KUBE-LOOP-BACK 10.244.0.2,tcp:8080,10.244.0.2 -exist', 'del KUBE-CLUSTER-IP 10.96.0.2,tcp:80 -exist', 'del KUBE-IPVS-IPS 10.96.0.2 -exist']);
    expect(h.netlink.addresses('kube-ipvs0')).toEqual(['10.96.0.1']);
  });

  it('edits a virtual server in place when its scheduler options change (session affinity)', async () => {
    const h = ipvsHarness();
    const state = cluster();
    await h.sync(state);
    state.onService(
      makeService('ns1', 'a', { clusterIP: '10.96.0.1', ports: tcp('http', 80) }),
      makeService('ns1', 'a', { clusterIP: '10.96.0.1', ports: tcp('http', 80), sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } } }),
    );
    await h.sync(state);
    expect(lines(h.ipvs.restores.at(-1)!)).toEqual(['-E -t 10.96.0.1:80 -s rr -p 60']);
  });

  it('removes leftover virtual servers on full syncs, but not those in excludeCIDRs', async () => {
    const h = ipvsHarness({ config: ipvsConfig({ ipvs: { excludeCIDRs: ['172.16.0.0/12'] } }) });
    await h.ipvs.restore('-A -t 10.96.9.9:80 -s rr\n-A -t 172.16.0.5:80 -s wlc\n');
    await h.sync(cluster());
    const keys = h.ipvs.services().map((s) => `${s.address}:${s.port}`);
    expect(keys).toContain('172.16.0.5:80');
    expect(keys).not.toContain('10.96.9.9:80');
  });

  it('takes over from the iptables mode: its service chains and filter chains go', async () => {
    const h = ipvsHarness();
    await h.iptables.restore(
      '*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-NODEPORTS - [0:0]\n:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]\n-A KUBE-SERVICES -j KUBE-SVC-AAAAAAAAAAAAAAAA\n-A KUBE-SERVICES -j KUBE-NODEPORTS\nCOMMIT\n' +
        '*filter\n:KUBE-EXTERNAL-SERVICES - [0:0]\n:KUBE-SERVICES - [0:0]\n-A INPUT -m conntrack --ctstate NEW -j KUBE-EXTERNAL-SERVICES\n-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -j REJECT\n-A OUTPUT -j KUBE-SERVICES\nCOMMIT\n',
    );
    await h.sync(cluster());
    expect(h.iptables.chains('nat')).not.toContain('KUBE-SVC-AAAAAAAAAAAAAAAA');
    expect(h.iptables.chains('nat')).not.toContain('KUBE-NODEPORTS');
    expect(h.iptables.chains('filter')).not.toContain('KUBE-SERVICES');
    expect(h.iptables.rules('filter', 'INPUT').join('\n')).not.toContain('KUBE-EXTERNAL-SERVICES');
    expect(h.iptables.rules('filter', 'INPUT').join('\n')).toContain('KUBE-IPVS-FILTER');
  });

  it('skips a service port it cannot program safely and programs the others', async () => {
    const log = new MemoryLog();
    const h = ipvsHarness({ logger: log.logger });
    const state = cluster();
    const checkout = state.checkout();
    const bad = { ...checkout.services.get('ns1/a:http/TCP')!, clusterIP: '10.96.0.001' };
    const services = new Map(checkout.services);
    services.set('ns1/a:http/TCP', bad);
    const r = await h.backend.sync({ state: { ...checkout, services }, forceFull: true });
    expect(r.error).toBeUndefined();
    expect(h.ipvs.services().map((s) => s.address)).toEqual(['10.96.0.2']);
    expect(r.skippedServicePorts?.get('ns1/a:http/TCP')).toContain('cluster IP');
    expect(log.lines('warn').join('\n')).toContain('service port skipped');
  });
});

describe('IPVS proxier: full sets', () => {
  /** ranges: n non-overlapping /32 source ranges from 100.64.0.0. */
  const ranges = (n: number) => Array.from({ length: n }, (_, i) => `100.${64 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}/32`);
  const lb = (name: string, ip: string, lbIP: string, ports: number, sourceRanges: string[]) =>
    makeService(
      'ns1',
      name,
      {
        type: 'LoadBalancer',
        clusterIP: ip,
        loadBalancerSourceRanges: sourceRanges,
        ports: Array.from({ length: ports }, (_, i) => ({ name: `p${i}`, port: 1000 + i, protocol: 'TCP', nodePort: 30000 + i })),
      },
      { status: { loadBalancer: { ingress: [{ ip: lbIP }] } } },
    );

  it('leaves out a service port whose entries a set has no room for (65,536 at most), says why, and programs the others', async () => {
    const log = new MemoryLog();
    const h = ipvsHarness({ logger: log.logger });
    // 16 ports x 4,096 ranges fill KUBE-LOAD-BALANCER-SOURCE-CIDR exactly; b's one more entry does not fit.
    const a = lb('a', '10.96.0.1', '198.51.100.1', 16, ranges(4096));
    const state = stateFromObjects('node-a', [
      a,
      lb('b', '10.96.0.2', '198.51.100.2', 1, ['203.0.113.0/24']),
      makeService('ns1', 'c', { clusterIP: '10.96.0.3', ports: tcp('http', 80) }),
      makeSlice(
        'ns1',
        'a',
        'a-1',
        [ep('10.244.1.1', { nodeName: 'node-b' })],
        Array.from({ length: 16 }, (_, i) => ({ name: `p${i}`, port: 8000 + i, protocol: 'TCP' })),
      ),
      makeSlice('ns1', 'b', 'b-1', [ep('10.244.1.2', { nodeName: 'node-b' })], [{ name: 'p0', port: 8080, protocol: 'TCP' }]),
      makeSlice('ns1', 'c', 'c-1', [ep('10.244.1.3', { nodeName: 'node-b' })], tcp('http', 8080)),
    ]);
    const r = await h.sync(state);
    expect(h.ipset.sets().get('KUBE-LOAD-BALANCER-SOURCE-CIDR')!.entries.size).toBe(65536);
    expect(r.skippedServicePorts?.get('ns1/b:p0/TCP')).toBe(
      'its 1 entries do not fit in ipset KUBE-LOAD-BALANCER-SOURCE-CIDR, which holds at most 65536 and has 65536 from the service ports sorted before it (the kernel would refuse the rest: "Hash is full")',
    );
    expect([...r.skippedServicePorts!.keys()]).toEqual(['ns1/b:p0/TCP']);
    // b is left out whole (no virtual server, no address); a and c are programmed.
    expect(h.ipvs.services().map((x) => `${x.address}:${x.port}`)).not.toContain('10.96.0.2:1000');
    expect(h.ipvs.services().map((x) => `${x.address}:${x.port}`)).toContain('10.96.0.3:80');
    expect(h.netlink.addresses('kube-ipvs0')).not.toContain('198.51.100.2');
    expect(log.lines('warn').join('\n')).toContain('service port skipped: its ipset entries do not fit');

    // a loses its ranges (a partial change of a alone): b fits now, in the same sync, though b did not change.
    state.onService(a, { ...a, spec: { ...a.spec, loadBalancerSourceRanges: ranges(1) } });
    const next = await h.sync(state);
    expect(next.full).toBe(true);
    expect(next.skippedServicePorts?.size).toBe(0);
    expect(h.ipvs.services().map((x) => `${x.address}:${x.port}`)).toContain('198.51.100.2:1000');
    expect(h.ipset.sets().get('KUBE-LOAD-BALANCER-SOURCE-CIDR')!.entries.size).toBe(17);
  });
});

describe('IPVS proxier: conflicts', () => {
  it('gives a virtual server claimed by two service ports to the first one (sorted) and warns', async () => {
    const log = new MemoryLog();
    const h = ipvsHarness({ logger: log.logger });
    const state = stateFromObjects('node-a', [
      makeService('ns1', 'a', { clusterIP: '10.96.0.1', externalIPs: ['203.0.113.9'], ports: tcp('http', 80) }),
      makeService('ns1', 'b', { clusterIP: '10.96.0.2', externalIPs: ['203.0.113.9'], ports: tcp('http', 80) }),
      makeSlice('ns1', 'a', 'a-1', [ep('10.244.1.1', { nodeName: 'node-b' })], tcp('http', 8080)),
      makeSlice('ns1', 'b', 'b-1', [ep('10.244.1.2', { nodeName: 'node-b' })], tcp('http', 8080)),
    ]);
    await h.sync(state);
    expect(
      h.ipvs
        .services()
        .find((s) => s.address === '203.0.113.9')!
        .reals.map((r) => r.address),
    ).toEqual(['10.244.1.1']);
    expect(log.lines('warn').join('\n')).toContain('virtual server claimed by two service ports');
  });
});

describe('IPVS proxier: failures', () => {
  it('reports an ipvsadm refusal with KPROXY_ERR_IPVS and makes the next sync full', async () => {
    const h = ipvsHarness();
    const state = cluster();
    h.ipvs.failNext = 'Memory allocation problem';
    const r = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(r.error?.code).toBe('KPROXY_ERR_IPVS');
    expect(r.error?.message).toContain('Memory allocation problem');
    expect(r.batch).toContain('# ipvsadm -R');
    const again = await h.sync(state);
    expect(again.full).toBe(true);
    expect(h.ipvs.services()).toHaveLength(2);
  });

  it('counts a refused iptables-restore as kube-proxy does (KPROXY_ERR_RESTORE_FAILED), showing the refused line', async () => {
    const h = ipvsHarness();
    h.iptables.restoreHook = () => 'iptables-restore: line 3 failed';
    const r = await h.backend.sync({ state: cluster().checkout(), forceFull: true });
    // The code kubeproxy_sync_proxy_rules_iptables_restore_failures_total counts (server/proxy/metrics/kube-proxy-metrics.ts).
    expect(r.error?.code).toBe('KPROXY_ERR_RESTORE_FAILED');
    expect(r.error?.message).toContain('iptables-restore: line 3 failed');
  });

  it('reports a refused address change with KPROXY_ERR_NETLINK before touching IPVS', async () => {
    const h = ipvsHarness();
    h.netlink.dummySupported = false;
    const r = await h.backend.sync({ state: cluster().checkout(), forceFull: true });
    expect(r.error?.code).toBe('KPROXY_ERR_NETLINK');
    expect(r.error?.message).toContain('Unknown device type');
    expect(h.ipvs.restores).toHaveLength(0);
    expect(h.ipset.restores).toHaveLength(0);
  });
});

describe('IPVS proxier: init', () => {
  it('sets kube-proxy sysctls, strictARP and the IPVS timeouts', async () => {
    const h = ipvsHarness({ config: ipvsConfig({ ipvs: { strictARP: true, tcpTimeoutMs: 900_000, udpTimeoutMs: 300_000 } }), kernelRelease: '5.4.0-150-generic' });
    await h.backend.init!();
    expect(Object.fromEntries(h.sysctl.writes.map((w) => [w.name, w.value]))).toEqual({
      'net/ipv4/vs/conntrack': '1',
      'net/ipv4/vs/conn_reuse_mode': '0',
      'net/ipv4/vs/expire_nodest_conn': '1',
      'net/ipv4/vs/expire_quiescent_template': '1',
      'net/ipv4/ip_forward': '1',
      'net/ipv4/conf/all/arp_ignore': '1',
      'net/ipv4/conf/all/arp_announce': '2',
    });
    expect(h.ipvs.restores).toEqual(['--set 900 0 300\n']);
    expect(h.ipvs.timeouts).toEqual({ tcp: 900, tcpFin: 120, udp: 300 });
  });

  it('leaves conn_reuse_mode alone on kernels from 5.9 and arp settings without strictARP', async () => {
    const h = ipvsHarness({ kernelRelease: '6.1.0' });
    await h.backend.init!();
    const names = h.sysctl.writes.map((w) => w.name);
    expect(names).not.toContain('net/ipv4/vs/conn_reuse_mode');
    expect(names).not.toContain('net/ipv4/conf/all/arp_ignore');
    expect(h.ipvs.restores).toEqual([]);
  });
});

import { describe, expect, it } from 'vitest';
import { servicePortsFromService, usesClusterEndpoints, usesLocalEndpoints, type ServicePort } from './service-port.ts';
import { makeService } from './testing.ts';

function ports(svc: ReturnType<typeof makeService>): ServicePort[] {
  const r = servicePortsFromService(svc, 'IPv4');
  if (r.kind !== 'ports') throw new Error(`ignored: ${r.reason}`);
  return r.ports;
}

describe('servicePortsFromService', () => {
  it('names ports like kube-proxy ServicePortName.String()', () => {
    const [p] = ports(makeService('ns1', 'svc1'));
    expect(p.name).toBe('ns1/svc1:p80');
    expect(p.id).toBe('ns1/svc1:p80/TCP');
    const [unnamed] = ports(makeService('ns1', 'svc2', { ports: [{ port: 53, protocol: 'UDP' }] }));
    expect(unnamed.name).toBe('ns1/svc2');
    expect(unnamed.protocol).toBe('UDP');
  });

  it('reads every field a proxier needs', () => {
    const svc = makeService(
      'shop',
      'web',
      {
        type: 'LoadBalancer',
        clusterIP: '10.96.10.30',
        externalIPs: ['192.0.2.20', '2001:db8::1'],
        loadBalancerSourceRanges: [' 203.0.113.7/24 ', '2001:db8::/32'],
        externalTrafficPolicy: 'Local',
        healthCheckNodePort: 32100,
        sessionAffinity: 'ClientIP',
        sessionAffinityConfig: { clientIP: { timeoutSeconds: 600 } },
        ports: [{ name: 'https', port: 443, nodePort: 30443 }],
      },
      { status: { loadBalancer: { ingress: [{ ip: '192.0.2.10' }, { ip: '192.0.2.11', ipMode: 'Proxy' }, { hostname: 'lb.example.com' }] } } },
    );
    const [p] = ports(svc);
    expect(p).toMatchObject({
      type: 'LoadBalancer',
      clusterIP: '10.96.10.30',
      port: 443,
      nodePort: 30443,
      protocol: 'TCP',
      externalIPs: ['192.0.2.20'],
      loadBalancerVIPs: ['192.0.2.10'],
      loadBalancerSourceRanges: ['203.0.113.0/24'],
      stickyMaxAgeSeconds: 600,
      externalPolicyLocal: true,
      internalPolicyLocal: false,
      healthCheckNodePort: 32100,
    });
  });

  it('defaults ClientIP affinity to 10800 s and leaves it off otherwise', () => {
    expect(ports(makeService('a', 'b', { sessionAffinity: 'ClientIP' }))[0].stickyMaxAgeSeconds).toBe(10800);
    expect(ports(makeService('a', 'b', { sessionAffinity: 'None' }))[0].stickyMaxAgeSeconds).toBe(0);
  });

  it('ignores what a proxy must not program', () => {
    const cases: [ReturnType<typeof makeService>, RegExp][] = [
      [makeService('a', 'headless', { clusterIP: 'None' }), /headless/],
      [makeService('a', 'ext', { type: 'ExternalName', externalName: 'x.example.com', clusterIP: undefined }), /ExternalName/],
      [makeService('a', 'v6', { clusterIP: 'fd00::1', clusterIPs: ['fd00::1'] }), /no IPv4 cluster IP/],
      [makeService('a', 'mesh', {}, { metadata: { labels: { 'service.kubernetes.io/service-proxy-name': 'mesh' } } }), /another service proxy/],
    ];
    for (const [svc, why] of cases) {
      const r = servicePortsFromService(svc, 'IPv4');
      expect(r.kind).toBe('ignored');
      expect(r.kind === 'ignored' && r.reason).toMatch(why);
    }
  });

  it('uses the cluster IP of its own family in a dual-stack service', () => {
    const svc = makeService('a', 'dual', { clusterIP: 'fd00::10', clusterIPs: ['fd00::10', '10.96.0.10'] });
    expect(ports(svc)[0].clusterIP).toBe('10.96.0.10');
    const v6 = servicePortsFromService(svc, 'IPv6');
    expect(v6.kind === 'ports' && v6.ports[0].clusterIP).toBe('fd00::10');
  });

  it('reads each family of SingleStack, PreferDualStack and RequireDualStack Services from clusterIPs and ipFamilies', () => {
    const conv = (spec: Parameters<typeof makeService>[2]) =>
      (['IPv4', 'IPv6'] as const).map((f) => {
        const r = servicePortsFromService(makeService('a', 's', spec), f);
        return r.kind === 'ports' ? r.ports[0].clusterIP : r.reason;
      });
    expect(conv({ clusterIP: '10.96.0.1', clusterIPs: ['10.96.0.1'], ipFamilies: ['IPv4'], ipFamilyPolicy: 'SingleStack' })).toEqual(['10.96.0.1', 'it has no IPv6 cluster IP']);
    expect(conv({ clusterIP: 'FD00:0::1', clusterIPs: ['FD00:0::1'], ipFamilies: ['IPv6'], ipFamilyPolicy: 'SingleStack' })).toEqual(['it has no IPv4 cluster IP', 'fd00::1']);
    expect(conv({ clusterIP: '10.96.0.1', clusterIPs: ['10.96.0.1', 'fd00::1'], ipFamilies: ['IPv4', 'IPv6'], ipFamilyPolicy: 'PreferDualStack' })).toEqual(['10.96.0.1', 'fd00::1']);
    expect(conv({ clusterIP: '10.96.0.1', clusterIPs: ['10.96.0.1'], ipFamilies: ['IPv4'], ipFamilyPolicy: 'PreferDualStack' })).toEqual(['10.96.0.1', 'it has no IPv6 cluster IP']);
    expect(conv({ clusterIP: 'fd00::1', clusterIPs: ['fd00::1', '10.96.0.1'], ipFamilies: ['IPv6', 'IPv4'], ipFamilyPolicy: 'RequireDualStack' })).toEqual(['10.96.0.1', 'fd00::1']);
  });

  it('keeps the external and load balancer IPs and source ranges of each family in canonical form', () => {
    const svc = makeService(
      'a',
      'lb',
      {
        type: 'LoadBalancer',
        clusterIPs: ['10.96.0.1', 'fd00::1'],
        externalIPs: ['192.0.2.1', '2001:DB8::0:1'],
        loadBalancerSourceRanges: ['203.0.113.0/24', '2001:db8:1::/48'],
        ports: [{ name: 'p', port: 80, protocol: 'TCP', nodePort: 30080 }],
      },
      { status: { loadBalancer: { ingress: [{ ip: '198.51.100.1' }, { ip: '2001:db8:0:0::5' }] } } },
    );
    const v6 = servicePortsFromService(svc, 'IPv6');
    expect(v6.kind === 'ports' && v6.ports[0]).toMatchObject({ clusterIP: 'fd00::1', externalIPs: ['2001:db8::1'], loadBalancerVIPs: ['2001:db8::5'], loadBalancerSourceRanges: ['2001:db8:1::/48'] });
    expect(ports(svc)[0]).toMatchObject({ clusterIP: '10.96.0.1', externalIPs: ['192.0.2.1'], loadBalancerVIPs: ['198.51.100.1'], loadBalancerSourceRanges: ['203.0.113.0/24'] });
  });

  it.each([
    [{ clusterIPs: ['10.96.0.1', '10.96.0.2'] }, 'spec.clusterIPs ["10.96.0.1","10.96.0.2"]: may hold at most one address per family (a dual-stack Service has one IPv4 and one IPv6)'],
    [
      { clusterIP: '::ffff:10.96.0.1', clusterIPs: ['::ffff:10.96.0.1'] },
      'spec.clusterIPs[0] "::ffff:10.96.0.1": is an IPv4-mapped IPv6 address, which Kubernetes does not accept (write 10.96.0.1 instead)',
    ],
    [{ clusterIPs: ['10.96.0.1', 'fd00::1'], ipFamilies: ['IPv6', 'IPv4'] }, 'spec.ipFamilies[0] "IPv6": does not match spec.clusterIPs[0] (IPv4)'],
    [{ clusterIPs: ['10.96.0.1', 'fd00::1'], ipFamilies: ['IPv4'] }, 'spec.ipFamilies ["IPv4"]: must name the family of each of the 2 cluster IPs'],
    [{ clusterIPs: ['10.96.0.1'], ipFamilyPolicy: 'RequireDualStack' }, 'spec.clusterIPs ["10.96.0.1"]: must hold an IPv4 and an IPv6 address for ipFamilyPolicy RequireDualStack'],
    [{ clusterIPs: ['10.96.0.1', 'fd00::1'], ipFamilyPolicy: 'SingleStack' }, 'spec.clusterIPs ["10.96.0.1","fd00::1"]: must hold one address for ipFamilyPolicy SingleStack'],
    [{ ipFamilyPolicy: 'DualStack' }, 'spec.ipFamilyPolicy "DualStack": must be SingleStack, PreferDualStack or RequireDualStack'],
    [{ clusterIPs: ['10.96.0.1', 'fd00::1'], externalIPs: ['fd00::1::2'] }, 'spec.externalIPs[0] "fd00::1::2": is not an IP address'],
  ])('refuses an inconsistent or malformed dual-stack Service in every family (%j)', (spec, why) => {
    for (const f of ['IPv4', 'IPv6'] as const) expect(() => servicePortsFromService(makeService('a', 'bad', spec), f)).toThrow(`Service a/bad: ${why}`);
  });

  it('accepts up to 4,096 source ranges per IP family, so a dual-stack load balancer may list 4,096 of each', () => {
    const v4 = Array.from({ length: 4096 }, (_, i) => `100.${64 + (i >> 8)}.${i & 255}.0/24`);
    const v6 = Array.from({ length: 4096 }, (_, i) => `fd00:5000:${(i + 1).toString(16)}::/48`);
    const lb = (ranges: string[]) =>
      makeService(
        'a',
        'lb',
        { type: 'LoadBalancer', clusterIPs: ['10.96.0.1', 'fd00::1'], loadBalancerSourceRanges: ranges, ports: [{ name: 'p', port: 80, protocol: 'TCP', nodePort: 30080 }] },
        { status: { loadBalancer: { ingress: [{ ip: '198.51.100.1' }] } } },
      );
    for (const [f, want] of [
      ['IPv4', v4],
      ['IPv6', v6],
    ] as const) {
      const r = servicePortsFromService(lb([...v4, ...v6]), f);
      expect(r.kind === 'ports' && r.ports[0].loadBalancerSourceRanges).toEqual(want);
    }
    const tooMany = lb([...v4, '203.0.113.0/24']);
    for (const f of ['IPv4', 'IPv6'] as const)
      expect(() => servicePortsFromService(tooMany, f)).toThrow('Service a/lb: spec.loadBalancerSourceRanges "more than 4096 IPv4 ranges": at most 4096 per IP family are accepted');
  });

  it('only externally visible services get externalTrafficPolicy Local', () => {
    const p = ports(makeService('a', 'b', { externalTrafficPolicy: 'Local' }))[0];
    expect(p.externalPolicyLocal).toBe(false);
    const withIP = ports(makeService('a', 'b', { externalTrafficPolicy: 'Local', externalIPs: ['192.0.2.1'] }))[0];
    expect(withIP.externalPolicyLocal).toBe(true);
    expect(withIP.healthCheckNodePort).toBe(0); // health checks only for LoadBalancers
  });

  it('decides which endpoint sets a port uses, as kube-proxy does', () => {
    const itpLocal = ports(makeService('a', 'b', { internalTrafficPolicy: 'Local' }))[0];
    expect([usesClusterEndpoints(itpLocal), usesLocalEndpoints(itpLocal)]).toEqual([false, true]);
    const etpLocal = ports(makeService('a', 'b', { type: 'NodePort', externalTrafficPolicy: 'Local', ports: [{ name: 'p', port: 80, nodePort: 30001 }] }))[0];
    expect([usesClusterEndpoints(etpLocal), usesLocalEndpoints(etpLocal)]).toEqual([true, true]);
  });

  it.each([
    [{ clusterIP: '10.96.0.300' }, /spec.clusterIPs\[0\] "10.96.0.300": is not an IP address/],
    [{ ports: [{ name: 'p', port: 0 }] }, /spec.ports\[0\].port 0: must be a port from 1 to 65535/],
    [{ ports: [{ name: 'p', port: 65536 }] }, /spec.ports\[0\].port 65536/],
    [{ ports: [{ name: 'p', port: 80, protocol: 'ICMP' }] }, /spec.ports\[0\].protocol "ICMP": must be TCP, UDP or SCTP/],
    [
      {
        ports: [
          { name: 'a', port: 80 },
          { name: 'b', port: 80 },
        ],
      },
      /spec.ports\[1\].port "80\/TCP": is used by another port/,
    ],
    [
      {
        ports: [
          { name: 'a', port: 80 },
          { name: 'a', port: 81 },
        ],
      },
      /spec.ports\[1\].name "a": is used by another port/,
    ],
    [{ ports: [{ port: 80 }, { name: 'b', port: 81 }] }, /spec.ports\[0\].name "": is required/],
    [{ ports: [] }, /spec.ports \[\]: must list at least one port/],
    [{ ports: undefined }, /spec.ports is missing/],
    [{ externalIPs: ['nope'] }, /spec.externalIPs\[0\] "nope"/],
    [{ loadBalancerSourceRanges: ['10.0.0.0/33'] }, /spec.loadBalancerSourceRanges\[0\]/],
    [{ sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 0 } } }, /timeoutSeconds 0/],
    [{ type: 'Weird' }, /spec.type "Weird"/],
    [{ externalTrafficPolicy: 'Nearby' }, /spec.externalTrafficPolicy "Nearby"/],
    [{ ports: Array.from({ length: 2000 }, (_, i) => ({ name: `p${i}`, port: i + 1 })) }, /2000 ports.*at most 1024/],
  ])('refuses an invalid service (%j) naming the object and field', (spec, message) => {
    const svc = makeService('shop', 'bad', spec as never);
    expect(() => servicePortsFromService(svc, 'IPv4')).toThrow(message);
    expect(() => servicePortsFromService(svc, 'IPv4')).toThrow(/^Service shop\/bad: /);
  });

  it.each([
    ['0.0.0.0', 'may not be unspecified (0.0.0.0)'],
    ['::', 'may not be unspecified (::)'],
    ['127.0.0.1', 'may not be in the loopback range (127.0.0.0/8, ::1/128)'],
    ['::1', 'may not be in the loopback range (127.0.0.0/8, ::1/128)'],
    ['169.254.169.254', 'may not be in the link-local range (169.254.0.0/16, fe80::/10)'],
    ['fe80::1', 'may not be in the link-local range (169.254.0.0/16, fe80::/10)'],
    ['224.0.0.1', 'may not be in the link-local multicast range (224.0.0.0/24, ff02::/16)'],
    ['ff02::2', 'may not be in the link-local multicast range (224.0.0.0/24, ff02::/16)'],
  ])("refuses an external IP the API server refuses (%s), in either family's proxier of a dual-stack Service", (ip, why) => {
    const svc = makeService('shop', 'web', { clusterIPs: ['10.96.0.1', 'fd00::1'], ipFamilies: ['IPv4', 'IPv6'], externalIPs: ['192.0.2.10', ip] });
    for (const family of ['IPv4', 'IPv6'] as const) {
      expect(() => servicePortsFromService(svc, family)).toThrow(`Service shop/web: spec.externalIPs[1] ${JSON.stringify(ip)}: ${why}`);
    }
  });

  it('keeps a global multicast or broadcast external IP, which the API server accepts too', () => {
    expect(ports(makeService('shop', 'web', { externalIPs: ['239.1.2.3', '255.255.255.255'] }))[0].externalIPs).toEqual(['239.1.2.3', '255.255.255.255']);
  });

  it('refuses an oversized name', () => {
    expect(() => servicePortsFromService(makeService('shop', 'x'.repeat(64)), 'IPv4')).toThrow(/metadata.name/);
  });

  it('refuses a name that is no DNS label (a dot or a slash), as the API server does', () => {
    for (const name of ['web.evil', 'web/evil', 'Web']) {
      expect(() => servicePortsFromService(makeService('shop', name), 'IPv4'), name).toThrow(
        `Service shop/${name}: metadata.name ${JSON.stringify(name)}: must be a DNS label of at most 63 characters`,
      );
    }
    expect(ports(makeService('shop', '1web'))[0].service).toBe('shop/1web');
  });

  it('reads sloppy IPv4 with leading zeros as decimal, like the API server did', () => {
    expect(ports(makeService('a', 'b', { clusterIP: '010.096.000.001' }))[0].clusterIP).toBe('10.96.0.1');
  });
});

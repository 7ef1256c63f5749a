import { describe, expect, it } from 'vitest';
import type { Endpoint } from '../endpoint.ts';
import { detectLocalByCIDR } from '../local-detector.ts';
import type { ServicePort } from '../service-port.ts';
import { ChainNames } from '../xtables/chain-names.ts';
import { ProbabilityCache } from '../xtables/restore-writer.ts';
import { buildFixedRules } from './fixed-rules.ts';
import { masqueradeMark } from '../masquerade-mark.ts';
import { buildServicePortRules, type BuildContext } from './rules.ts';

const ctx6: BuildContext = {
  family: 'IPv6',
  nodeName: 'node-a',
  zone: '',
  masqueradeMark: masqueradeMark(14),
  masqueradeAll: false,
  localDetector: detectLocalByCIDR('fd00:10::/64'),
  localhostNodePorts: false,
  nodePortsMatchAll: true,
  nodePortIPs: [],
  nodeIP: '2001:db8::1',
  conntrackTCPLiberal: false,
  randomFully: true,
  nfacct: { ctStateInvalid: false, localhostNodePorts: false },
  largeClusterMode: false,
};

const sp6: ServicePort = {
  id: 'ns1/svc1:p80/TCP',
  name: 'ns1/svc1:p80',
  namespace: 'ns1',
  serviceName: 'svc1',
  service: 'ns1/svc1',
  portName: 'p80',
  protocol: 'TCP',
  type: 'NodePort',
  clusterIP: 'fd00:172:30::41',
  port: 80,
  nodePort: 3001,
  externalIPs: [],
  loadBalancerVIPs: [],
  loadBalancerSourceRanges: [],
  stickyMaxAgeSeconds: 0,
  externalPolicyLocal: false,
  internalPolicyLocal: false,
  healthCheckNodePort: 0,
  trafficDistribution: '',
};

const ep6: Endpoint = {
  ip: 'fd00:10:180::1',
  port: 80,
  key: '[fd00:10:180::1]:80',
  isLocal: true,
  ready: true,
  serving: true,
  terminating: false,
  nodeName: 'node-a',
  zone: '',
  zoneHints: [],
  nodeHints: [],
};

describe('rule builder', () => {
  it('writes IPv6 endpoints as [ip]:port for DNAT and bare for the hairpin match', () => {
    const r = buildServicePortRules(sp6, [ep6], ctx6, new ChainNames(), new ProbabilityCache());
    expect(r.rulesText).toContain(' -s fd00:10:180::1 -j KUBE-MARK-MASQ\n');
    expect(r.rulesText).toContain('-j DNAT --to-destination [fd00:10:180::1]:80\n');
    expect(r.rulesText).toContain('! -s fd00:10::/64 -j KUBE-MARK-MASQ');
    expect(r.endpointChains.get('[fd00:10:180::1]:80')).toMatch(/^KUBE-SEP-[A-Z2-7]{16}$/);
  });

  it('keeps IPv6 node ports off ::1, as kube-proxy does', () => {
    const fixed = buildFixedRules(ctx6);
    expect(fixed.natTail.text()).toBe(
      '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL ! -d ::1/128 -j KUBE-NODEPORTS\n',
    );
    expect(fixed.filterChains).not.toContain('KUBE-FIREWALL');
    expect(buildFixedRules({ ...ctx6, nodePortsMatchAll: false, nodePortIPs: ['::1', '2001:db8::1'] }).warnings).toEqual([
      '--nodeport-addresses includes localhost (::1) but localhost node ports are not supported on IPv6',
    ]);
  });

  it('refuses values of the wrong family or form instead of writing them', () => {
    const names = new ChainNames();
    const probs = new ProbabilityCache();
    expect(() => buildServicePortRules({ ...sp6, clusterIP: '10.0.0.1' }, [], ctx6, names, probs)).toThrow(/cluster IP "10.0.0.1" is not a canonical IPv6 address/);
    expect(() => buildServicePortRules({ ...sp6, loadBalancerSourceRanges: ['fd00::1/64'] }, [], ctx6, names, probs)).toThrow(/source range/);
    expect(() => buildServicePortRules({ ...sp6, port: 70000 }, [], ctx6, names, probs)).toThrow(/port 70000 is not a port/);
    expect(() => buildServicePortRules({ ...sp6, protocol: 'ICMP' as never }, [], ctx6, names, probs)).toThrow(/protocol/);
    expect(() => buildServicePortRules(sp6, [{ ...ep6, key: '[fd00:10:180::1]:81' }], ctx6, names, probs)).toThrow(/endpoint key/);
  });

  it('writes a service port whose namespace, name and port name are at their longest (63 characters each), every comment within 255', () => {
    const ns = 'n'.repeat(63);
    const svc = 's'.repeat(63);
    const port = 'p'.repeat(63);
    const name = `${ns}/${svc}:${port}`;
    const sp: ServicePort = {
      ...sp6,
      id: `${name}/TCP`,
      name,
      namespace: ns,
      serviceName: svc,
      service: `${ns}/${svc}`,
      portName: port,
      type: 'LoadBalancer',
      port: 65535,
      externalIPs: ['2001:db8::5'],
      loadBalancerVIPs: ['2001:db8::6'],
      loadBalancerSourceRanges: ['2001:db8:1::/48'],
      externalPolicyLocal: true,
      healthCheckNodePort: 32767,
      stickyMaxAgeSeconds: 86400,
    };
    const longest: Endpoint = { ...ep6, ip: 'fd64:6464:6464:6464:ffff:ffff:ffff:fff0', port: 65535, key: '[fd64:6464:6464:6464:ffff:ffff:ffff:fff0]:65535' };
    const r = buildServicePortRules(sp, [longest, { ...ep6, isLocal: false }], ctx6, new ChainNames(), new ProbabilityCache());
    const text = r.filterText + r.jumpsText + r.rulesText;
    const comments = [...text.matchAll(/--comment ("[^"]*"|\S+)/g)].map((m) => m[1].replace(/^"|"$/g, ''));
    expect(comments).toContain(`other traffic to ${name} will be dropped by KUBE-PROXY-FIREWALL`);
    expect(comments).toContain(`${name} -> ${longest.key}`);
    expect(Math.max(...comments.map((c) => c.length))).toBe(247);
    expect(() => buildServicePortRules({ ...sp, name: `${name}x`, id: `${name}x/TCP` }, [], ctx6, new ChainNames(), new ProbabilityCache())).toThrow(/is not a valid "namespace\/name:port"/);
  });

  it("reuses the previous build's endpoint chain names", () => {
    const names = new ChainNames();
    const first = buildServicePortRules(sp6, [ep6], ctx6, names, new ProbabilityCache());
    const planted = { ...first, endpointChains: new Map([[ep6.key, 'KUBE-SEP-REUSEDREUSEDREUS']]) };
    const second = buildServicePortRules(sp6, [ep6], ctx6, names, new ProbabilityCache(), planted);
    expect(second.chains).toContain('KUBE-SEP-REUSEDREUSEDREUS');
  });
});

import { describe, expect, it } from 'vitest';
import { RuleBuildError } from '../../errors.ts';
import type { Endpoint } from '../endpoint.ts';
import type { ServicePort } from '../service-port.ts';
import { buildServicePortObjects, type IpvsContext } from './builder.ts';

const sp = (over: Partial<ServicePort> = {}): ServicePort => ({
  id: 'ns1/a:http/TCP',
  name: 'ns1/a:http',
  namespace: 'ns1',
  serviceName: 'a',
  service: 'ns1/a',
  portName: 'http',
  protocol: 'TCP',
  type: 'ClusterIP',
  clusterIP: '10.96.0.1',
  port: 80,
  nodePort: 0,
  externalIPs: [],
  loadBalancerVIPs: [],
  loadBalancerSourceRanges: [],
  stickyMaxAgeSeconds: 0,
  externalPolicyLocal: false,
  internalPolicyLocal: false,
  healthCheckNodePort: 0,
  trafficDistribution: '',
  ...over,
});

const endpoint = (ip: string, port: number, isLocal = false): Endpoint => ({
  ip,
  port,
  key: ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`,
  isLocal,
  ready: true,
  serving: true,
  terminating: false,
  nodeName: isLocal ? 'node-a' : 'node-b',
  zone: '',
  zoneHints: [],
  nodeHints: [],
});

const ctx: IpvsContext = { family: 'IPv4', nodeName: 'node-a', zone: '', scheduler: 'rr', nodePortIPs: ['10.0.0.10'], nodeAddresses: ['10.0.0.10'], nodeIP: '10.0.0.10' };

describe('IPVS builder', () => {
  it('turns an IPv6 service port into bracketed virtual servers, host addresses and inet6 entries', () => {
    const o = buildServicePortObjects(sp({ clusterIP: 'fd00::1' }), [endpoint('fd00:10::5', 8080, true)], { ...ctx, family: 'IPv6', nodePortIPs: [], nodeAddresses: [], nodeIP: null });
    expect(o.virtualServers.map((v) => [v.key, [...v.reals.keys()]])).toEqual([['[fd00::1]:80/TCP', ['[fd00:10::5]:8080']]]);
    expect(o.binds).toEqual(['fd00::1']);
    expect(Object.fromEntries(o.entries)).toEqual({ loopBack: ['fd00:10::5,tcp:8080,fd00:10::5'], clusterIP: ['fd00::1,tcp:80'] });
  });

  it('counts a Local policy that had to fall back to other nodes (kubeproxy_sync_proxy_rules_no_local_endpoints_total)', () => {
    const o = buildServicePortObjects(sp({ type: 'NodePort', nodePort: 30080, externalPolicyLocal: true }), [endpoint('10.244.1.1', 8080)], ctx);
    expect(o.noLocalExternal).toBe(true);
    expect(o.noLocalInternal).toBe(false);
    expect(o.virtualServers.find((v) => v.role === 'node port')!.reals.size).toBe(1);
  });

  it('refuses values that could not be written safely, so the caller skips only this service port', () => {
    expect(() => buildServicePortObjects(sp(), [endpoint('10.244.1.01', 8080)], ctx)).toThrow(RuleBuildError);
    expect(() => buildServicePortObjects(sp(), [endpoint('10.244.1.1', 0)], ctx)).toThrow(RuleBuildError);
    expect(() => buildServicePortObjects(sp({ externalIPs: ['1.2.3.4 -s 0.0.0.0/0'] }), [], ctx)).toThrow(RuleBuildError);
    expect(() => buildServicePortObjects(sp(), [endpoint('fd00::5', 8080)], ctx)).toThrow(/canonical IPv4/);
  });
});

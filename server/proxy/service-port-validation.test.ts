import { describe, expect, it } from 'vitest';
import type { Endpoint } from './endpoint.ts';
import { servicePortsFromService, type ServicePort } from './service-port.ts';
import { MAX_SERVICE_PORT_NAME, validateEndpoint, validateServicePort } from './service-port-validation.ts';
import { makeService } from './testing.ts';

function port(): ServicePort {
  const r = servicePortsFromService(makeService('ns', 's', { type: 'NodePort', ports: [{ name: 'p80', port: 80, nodePort: 30080 }] }), 'IPv4');
  if (r.kind !== 'ports') throw new Error('ignored');
  return r.ports[0];
}

const endpoint: Endpoint = {
  key: '10.244.0.1:8080',
  ip: '10.244.0.1',
  port: 8080,
  isLocal: false,
  ready: true,
  serving: true,
  terminating: false,
  nodeName: 'node-b',
  zone: '',
  zoneHints: [],
  nodeHints: [],
};

describe('the second wall before the kernel', () => {
  it('lets a valid service port and endpoint through', () => {
    expect(() => validateServicePort(port(), 'IPv4')).not.toThrow();
    expect(() => validateEndpoint(endpoint, 'IPv4')).not.toThrow();
  });

  it('refuses, as a RuleBuildError naming the value, what no mode may write', () => {
    const refused =
      (sp: Partial<ServicePort>, family: 'IPv4' | 'IPv6' = 'IPv4') =>
      () =>
        validateServicePort({ ...port(), ...sp }, family);
    expect(refused({ name: 'ns/s:p80 -j ACCEPT' })).toThrow(/service port name "ns\/s:p80 -j ACCEPT" is not a valid "namespace\/name:port"/);
    expect(refused({ name: `${'n'.repeat(63)}/${'s'.repeat(63)}:${'p'.repeat(64)}` })).toThrow(/is not a valid/);
    expect(refused({ protocol: 'ICMP' as never })).toThrow(/protocol "ICMP" is not TCP, UDP or SCTP/);
    expect(refused({ clusterIP: '010.96.0.1' })).toThrow(/cluster IP "010.96.0.1" is not a canonical IPv4 address/);
    expect(refused({}, 'IPv6')).toThrow(/cluster IP "10.96.0.1" is not a canonical IPv6 address/);
    expect(refused({ nodePort: 70000 })).toThrow(/node port 70000 is not a port/);
    expect(refused({ externalIPs: ['1.2.3.4\n'] })).toThrow(/external IP/);
    expect(refused({ loadBalancerSourceRanges: ['10.0.0.1/8'] })).toThrow(/source range "10.0.0.1\/8" is not a canonical IPv4 CIDR/);
    expect(refused({ stickyMaxAgeSeconds: 86401 })).toThrow(/session affinity timeout 86401 is out of range/);
    expect(() => validateEndpoint({ ...endpoint, key: '10.244.0.1:8081' }, 'IPv4')).toThrow(/endpoint key "10.244.0.1:8081" does not match 10.244.0.1:8080/);
    expect(() => validateEndpoint({ ...endpoint, port: 0 }, 'IPv4')).toThrow(/endpoint port 0 is not a port/);
    expect(() => validateEndpoint(endpoint, 'IPv6')).toThrow(/endpoint IP "10.244.0.1" is not a canonical IPv6 address/);
  });

  it("takes a name at the API's longest: three DNS labels", () => {
    const name = `${'n'.repeat(63)}/${'s'.repeat(63)}:${'p'.repeat(63)}`;
    expect(name).toHaveLength(MAX_SERVICE_PORT_NAME);
    expect(() => validateServicePort({ ...port(), name }, 'IPv4')).not.toThrow();
  });
});

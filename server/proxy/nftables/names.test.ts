import { describe, expect, it } from 'vitest';
import { endpointNameBase, hashAndTruncate, isServiceChainName, servicePortNameBase, servicePortNames } from './names.ts';

/** Expectations from kube-proxy's own tests (pkg/proxy/nftables/proxier_test.go). */
const LONG_NS = 'very-long-namespace-name-abcdefghijklmnopqrstuvwxyz0123456789xx';
const LONG_SVC = 'very-long-service-name-why-would-you-even-do-this-i-mean-really';
const LONG_PORT = 'port-443-providing-the-hypertext-transmission-protocol-with-tls';

describe('kube-proxy nftables names', () => {
  it('names service port chains as upstream does', () => {
    expect(servicePortNames('ns1', 'svc1', 'tcp', 'p80').clusterPolicy).toBe('service-ULMVA6XW-ns1/svc1/tcp/p80');
    expect(servicePortNameBase('testing', 'service', 'tcp', 'http')).toBe('P4ZYZVCF-testing/service/tcp/http');
    expect(servicePortNameBase('testing', 'service', 'tcp', 'https')).toBe('LZBRENCP-testing/service/tcp/https');
    expect(servicePortNameBase(LONG_NS, LONG_SVC, 'sctp', LONG_PORT)).toBe(`KR6NACJP-${LONG_NS}/${LONG_SVC}/sctp/${LONG_PORT}`);
    const n = servicePortNames('ns2', 'svc2', 'tcp', 'p80');
    expect([n.clusterPolicy, n.external]).toEqual(['service-42NFTM6N-ns2/svc2/tcp/p80', 'external-42NFTM6N-ns2/svc2/tcp/p80']);
    expect(servicePortNames('ns5', 'svc5', 'tcp', 'p80').firewall).toBe('firewall-HVFWP5L3-ns5/svc5/tcp/p80');
  });

  it('names endpoint chains as upstream does, IPv6 colons as dots, truncated past 240 characters', () => {
    expect('endpoint-' + endpointNameBase('ns1', 'svc1', 'tcp', 'p80', '10.180.0.1:80')).toBe('endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80');
    expect(endpointNameBase('testing', 'service', 'tcp', 'http', '10.180.0.1:80')).toBe('JO2XBXZR-testing/service/tcp/http__10.180.0.1/80');
    expect(endpointNameBase('testing', 'service', 'tcp', 'http', '10.180.0.2:80')).toBe('5S6H3H22-testing/service/tcp/http__10.180.0.2/80');
    expect(endpointNameBase('testing', 'service', 'tcp', 'http', '[fd80:abcd:12::a1b2:c3d4:e5f6:9999]:80')).toBe('U7E2ET36-testing/service/tcp/http__fd80.abcd.12..a1b2.c3d4.e5f6.9999/80');
    expect(endpointNameBase(LONG_NS, LONG_SVC, 'sctp', LONG_PORT, '[1234:5678:9abc:def0::abc:1234]:443')).toBe(`5YS7AFEA-${LONG_NS}/${LONG_SVC}/sctp/${LONG_PORT}__1234.5678.9abc.def0..abc.1234/443`);
    expect(endpointNameBase(LONG_NS, LONG_SVC, 'sctp', LONG_PORT, '[1234:5678:9abc:def0::abcd:1234:5678]:443')).toBe(
      `CI6C53Q3-${LONG_NS}/${LONG_SVC}/sctp/${LONG_PORT}__1234.5678.9abc.def0..abcd.1234...`,
    );
    expect(endpointNameBase(LONG_NS, LONG_SVC, 'sctp', LONG_PORT, '[1234:5678:9abc:def0::abcd:1234:8765]:443')).toBe(
      `2FLXFK6X-${LONG_NS}/${LONG_SVC}/sctp/${LONG_PORT}__1234.5678.9abc.def0..abcd.1234...`,
    );
    expect(hashAndTruncate('x'.repeat(300))).toHaveLength(240);
  });

  it('tells service chains from fixed ones by the slash', () => {
    expect(isServiceChainName('service-ULMVA6XW-ns1/svc1/tcp/p80')).toBe(true);
    expect(isServiceChainName('services')).toBe(false);
    expect(isServiceChainName('nodeport-endpoints-check')).toBe(false);
  });
});

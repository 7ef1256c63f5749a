import { describe, expect, it } from 'vitest';
import { anonymousElements, countsOf, verdictTargets } from './nft-counts.ts';
import type { NftTable } from './nft-types.ts';

describe('verdictTargets', () => {
  it.each([
    ['jump mark-for-masquerade', ['mark-for-masquerade']],
    ['ip saddr 10.0.0.1 jump mark-for-masquerade', ['mark-for-masquerade']],
    [
      'numgen random mod 2 vmap { 0 : goto endpoint-A-ns/s/tcp/p__10.0.0.1/80 , 1 : goto endpoint-B-ns/s/tcp/p__10.0.0.2/80 }',
      ['endpoint-A-ns/s/tcp/p__10.0.0.1/80', 'endpoint-B-ns/s/tcp/p__10.0.0.2/80'],
    ],
    ['goto reject-chain', ['reject-chain']],
    ['fib saddr type local goto service-X comment "short-circuit local traffic"', ['service-X']],
    ['ip daddr @cluster-ips reject comment "do not jump here"', []],
    ['meta l4proto tcp dnat to 10.0.0.1:80', []],
    ['drop', []],
  ])('%s names %j', (text, want) => {
    expect(verdictTargets(text)).toEqual(want);
  });
});

describe('anonymousElements', () => {
  it('counts the kernel elements of an interval set: a start and an end per range, after the end of the gap below the first', () => {
    expect(anonymousElements('ip saddr != { 10.0.0.0/24 , 192.0.2.7 } drop', 'ip')).toBe(5);
  });
  it('counts a verdict map, and nothing for a rule without an anonymous set', () => {
    expect(anonymousElements('numgen random mod 3 vmap { 0 : goto a , 1 : goto b , 2 : goto c }', 'ip')).toBe(3);
    expect(anonymousElements('jump a', 'ip')).toBe(0);
  });
  it('says a rule it cannot compile cannot be counted (null)', () => {
    expect(anonymousElements('ip saddr { 10.0.0.1 } log prefix "x"', 'ip')).toBeNull();
  });
});

describe('countsOf', () => {
  const chain = (name: string, rules: string[]) => [name, { name, base: null, comment: null, rules }] as const;
  const table: NftTable = {
    family: 'ip',
    name: 't',
    chains: new Map([
      chain('services', ['ip daddr . meta l4proto . th dport vmap @service-ips']),
      chain('svc', ['numgen random mod 2 vmap { 0 : goto ep1 , 1 : goto ep2 }']),
      chain('ep1', ['jump masq', 'meta l4proto tcp dnat to 10.0.0.1:80']),
      chain('ep2', ['meta l4proto tcp dnat to 10.0.0.2:80']),
      chain('masq', []),
      chain('fw', ['ip saddr != { 10.0.0.0/24 } drop']),
    ]),
    sets: new Map([
      [
        'service-ips',
        {
          name: 'service-ips',
          map: true,
          type: 'ipv4_addr . inet_proto . inet_service',
          flags: [],
          timeoutSeconds: null,
          comment: null,
          elements: new Map([['10.96.0.1 . tcp . 80', { key: '10.96.0.1 . tcp . 80', value: 'goto svc', comment: null }]]),
        },
      ],
      [
        'cluster-ips',
        { name: 'cluster-ips', map: false, type: 'ipv4_addr', flags: [], timeoutSeconds: null, comment: null, elements: new Map([['10.96.0.1', { key: '10.96.0.1', value: null, comment: null }]]) },
      ],
    ]),
  };

  it("gives every chain nf_tables' use count: its rules and the verdicts that name it, from rules and map elements", () => {
    const c = countsOf(table, { sets: ['cluster-ips', 'service-ips', 'missing'], anonymousIn: ['fw', 'svc', 'missing'] });
    expect(Object.fromEntries(c.chainUse)).toEqual({ services: 1, svc: 2, ep1: 3, ep2: 2, masq: 1, fw: 1 });
    expect(Object.fromEntries(c.elements)).toEqual({ 'cluster-ips': 1, 'service-ips': 1 });
    expect(Object.fromEntries(c.anonymous)).toEqual({ fw: [3], svc: [2] });
    expect([...c.setNames]).toEqual(['service-ips', 'cluster-ips']);
  });
});

import { describe, expect, it } from 'vitest';
import { compileNftRule, keyMatches, partMatches } from './nft-rule.ts';

describe('nftables rules in kproxy dialect', () => {
  it('reads every rule shape a kube-proxy table holds', () => {
    const rules = [
      'ct state new jump firewall-check',
      'ip daddr . meta l4proto . th dport vmap @service-ips',
      'fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports',
      'ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"',
      'ip daddr { 10.96.0.0/16 , 10.97.0.0/16 } drop',
      'mark and 0x00004000 == 0 return',
      'mark set mark xor 0x00004000',
      'masquerade fully-random',
      'ip daddr 10.96.0.10 ip saddr != 10.244.0.0/16 jump mark-for-masquerade',
      'iif "cbr0" goto service-X comment "short-circuit pod traffic"',
      'ip saddr @affinity-X goto endpoint-X',
      'numgen random mod 3 vmap { 0 : goto endpoint-A , 1 : goto endpoint-B , 2 : goto endpoint-C }',
      'update @affinity-X { ip saddr }',
      'meta l4proto tcp dnat to 10.244.0.11:8080',
      'meta l4proto tcp dnat to [fd00::11]:8080',
      'counter packets 12 bytes 720 jump services',
    ];
    for (const r of rules) expect(compileNftRule(r).unknown, r).toBeNull();
    const vmap = compileNftRule('numgen random mod 3 vmap { 0 : goto endpoint-A , 1 : goto endpoint-B , 2 : goto endpoint-C }').statements[0];
    expect(vmap.s === 'vmap' && 'pairs' in vmap.map ? vmap.map.pairs.map(([k, v]) => [k, v]) : null).toEqual([
      ['0', { kind: 'goto', chain: 'endpoint-A' }],
      ['1', { kind: 'goto', chain: 'endpoint-B' }],
      ['2', { kind: 'goto', chain: 'endpoint-C' }],
    ]);
    expect(compileNftRule('ip daddr @cluster-ips reject comment "x y"').comment).toBe('x y');
  });

  it('says what it cannot read', () => {
    expect(compileNftRule('limit rate 5/second accept').unknown).toBe('limit');
    expect(compileNftRule('<{"xt":{}}>').unknown).toBe('<{"xt":{}}>');
  });

  it('matches set element keys: exact parts, prefixes and ranges', () => {
    expect(keyMatches('10.96.0.10 . tcp . 80', ['10.96.0.10', 'tcp', '80'])).toBe(true);
    expect(keyMatches('10.96.0.10 . tcp . 80', ['10.96.0.10', 'udp', '80'])).toBe(false);
    expect(partMatches('10.0.0.0/8', '10.1.2.3')).toBe(true);
    expect(partMatches('10.0.0.1-10.0.0.5', '10.0.0.4')).toBe(true);
    expect(partMatches('30000-32767', '30080')).toBe(true);
    expect(partMatches('fd00::/64', 'fd00::5')).toBe(true);
    expect(partMatches('0x00004000', '16384')).toBe(true);
  });
});

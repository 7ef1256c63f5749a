import { describe, expect, it } from 'vitest';
import { compileIptablesRule, testRule, type MatchEnv } from './iptables-rule.ts';
import { initialPacket, type Packet } from './packet.ts';

const env: MatchEnv = { facts: { localAddresses: new Set(['10.0.0.10']) }, sets: (name, flags, p) => (name === 'KUBE-CLUSTER-IP' ? flags.join() === 'dst,dst' && p.dst === '10.96.0.10' : null) };
const pkt = (over: Partial<Packet> = {}): Packet => ({
  ...initialPacket({ proto: 'tcp', src: '10.0.0.2', srcPort: null, dst: '10.96.0.10', dstPort: 80, from: 'external' }, 'IPv4'),
  ...over,
});
const matches = (spec: string, p = pkt()) => testRule(compileIptablesRule(spec), p, env);

describe('iptables rules as tests on a packet', () => {
  it('matches addresses, prefixes and negations as iptables-save lists them', () => {
    expect(matches('-d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-X')).toBe(true);
    expect(matches('-d 10.96.0.10/32 -p tcp -m tcp --dport 81 -j KUBE-SVC-X')).toBe(false);
    expect(matches('-d 10.96.0.10/32 -p udp -m udp --dport 80 -j KUBE-SVC-X')).toBe(false);
    expect(matches('! -s 10.244.0.0/16 -j KUBE-MARK-MASQ')).toBe(true);
    expect(matches('! -s 10.244.0.0/16 -j KUBE-MARK-MASQ', pkt({ src: '10.244.3.4' }))).toBe(false);
    expect(matches('-m tcp -p tcp --dport 30000:32767 -j X', pkt({ dstPort: 30080 }))).toBe(true);
  });

  it('answers addrtype from the node addresses, conntrack for a new connection, and the mark', () => {
    expect(matches('-m addrtype --dst-type LOCAL -j KUBE-NODEPORTS', pkt({ dst: '10.0.0.10' }))).toBe(true);
    expect(matches('-m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j KUBE-NODEPORTS', pkt({ dst: '127.0.0.1' }))).toBe(false);
    expect(matches('-m addrtype --src-type LOCAL -j KUBE-MARK-MASQ', pkt({ src: '10.0.0.10' }))).toBe(true);
    expect(matches('-m conntrack --ctstate NEW -j X')).toBe(true);
    expect(matches('-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT')).toBe(false);
    expect(matches('-m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP', pkt({ dnat: true }))).toBe(false);
    expect(matches('-m mark ! --mark 0x4000/0x4000 -j RETURN')).toBe(true);
    expect(matches('-m mark ! --mark 0x4000/0x4000 -j RETURN', pkt({ mark: 0x4000 }))).toBe(false);
  });

  it('reads statistic probabilities, recent lists and targets with their options', () => {
    const r = compileIptablesRule('-m comment --comment "ns/svc:p80 -> 10.0.0.1:80" -m statistic --mode random --probability 0.33333333349 -j KUBE-SEP-A');
    expect(r.probability).toBeCloseTo(1 / 3, 6);
    expect(r.comment).toBe('ns/svc:p80 -> 10.0.0.1:80');
    expect(r.target).toBe('KUBE-SEP-A');
    const rec = compileIptablesRule('-m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-A --mask 255.255.255.255 --rsource -j KUBE-SEP-A');
    expect(rec.recent).toEqual({ name: 'KUBE-SEP-A', op: 'rcheck', seconds: 10800 });
    expect(rec.unknown).toBeNull();
    const dnat = compileIptablesRule('-p tcp -m tcp -j DNAT --to-destination 10.244.0.11:8080');
    expect(dnat.targetOptions.get('--to-destination')).toBe('10.244.0.11:8080');
    expect(compileIptablesRule('-j MARK --set-xmark 0x4000/0x4000').targetOptions.get('--set-xmark')).toBe('0x4000/0x4000');
  });

  it('looks ipsets up with their direction flags', () => {
    expect(matches('-m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT')).toBe(true);
    expect(matches('-m set ! --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT')).toBe(false);
    // A set the read does not hold cannot be decided.
    expect(matches('-m set --match-set KUBE-OTHER dst -j ACCEPT')).toBeNull();
  });

  it('marks a rule with a match it does not know, instead of guessing', () => {
    expect(compileIptablesRule('-m hashlimit --hashlimit-upto 5/sec -j ACCEPT').unknown).toBe('-m hashlimit');
    expect(compileIptablesRule('-o eth0 -j ACCEPT').unknown).toMatch(/^-o eth0/);
    expect(compileIptablesRule('-m statistic --mode nth --every 2 -j X').unknown).toBe('-m statistic --mode nth');
  });
});

import { describe, expect, it } from 'vitest';
import { iptablesRuleKey } from './rule-key.ts';

/** Pairs seen on iptables 1.8.9, legacy and nft: what kproxy wrote, and what iptables-save listed. */
const SAME: [string, string][] = [
  [
    '-m comment --comment "shop/frontend:http cluster IP" -m tcp -p tcp -d 10.96.10.10 --dport 80 -j KUBE-SVC-PY4JZH2ITZYEO4CN',
    '-d 10.96.10.10/32 -p tcp -m comment --comment "shop/frontend:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-PY4JZH2ITZYEO4CN',
  ],
  ['-m comment --comment "kubernetes forwarding rules" -m mark --mark 0x00004000/0x00004000 -j ACCEPT', '-m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT'],
  ['-j MARK --or-mark 0x00004000', '-j MARK --set-xmark 0x4000/0x4000'],
  ['-j MARK --xor-mark 0x00004000', '-j MARK --set-xmark 0x4000/0x0'],
  [
    '-m comment --comment "shop/frontend:http -> 10.244.0.11:8080" -m statistic --mode random --probability 0.3333333333 -j KUBE-SEP-4D7UCQPER7AI3MAD',
    '-m comment --comment "shop/frontend:http -> 10.244.0.11:8080" -m statistic --mode random --probability 0.33333333349 -j KUBE-SEP-4D7UCQPER7AI3MAD',
  ],
  // 1/839 of a Service with 1,000 endpoints: the kernel keeps 2559575 / 2^31, which lists as 0.00119189499 (8 decimals: 0.00119189, not 0.00119190).
  ['-m statistic --mode random --probability 0.0011918951 -j KUBE-SEP-5AGZHSVK7ZKLRTQM', '-m statistic --mode random --probability 0.00119189499 -j KUBE-SEP-5AGZHSVK7ZKLRTQM'],
  ['-m statistic --mode random --probability 0.0001000000 -j KUBE-SEP-X', '-m statistic --mode random --probability 0.00009999983 -j KUBE-SEP-X'],
  [
    '-m comment --comment shop/cart:http -m recent --name KUBE-SEP-5Q32LHCXSXB3MW2J --set -m tcp -p tcp -j DNAT --to-destination 10.244.0.71:8080',
    '-p tcp -m comment --comment "shop/cart:http" -m recent --set --name KUBE-SEP-5Q32LHCXSXB3MW2J --mask 255.255.255.255 --rsource -m tcp -j DNAT --to-destination 10.244.0.71:8080',
  ],
  [
    '-m comment --comment "shop/payments:http has no endpoints" -m tcp -p tcp -d 10.96.10.80 --dport 80 -j REJECT',
    '-d 10.96.10.80/32 -p tcp -m comment --comment "shop/payments:http has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable',
  ],
  [
    '-m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP',
    '! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP',
  ],
];

const DIFFERENT: [string, string][] = [
  ['-d 10.96.10.10 --dport 80 -j KUBE-SVC-A', '-d 10.96.10.11 --dport 80 -j KUBE-SVC-A'],
  ['-d 10.96.10.10 --dport 80 -j KUBE-SVC-A', '-d 10.96.10.10 --dport 80 -j KUBE-SVC-B'],
  ['-s 10.0.0.0/8 -j ACCEPT', '! -s 10.0.0.0/8 -j ACCEPT'],
  ['-m statistic --mode random --probability 0.3333333333 -j X', '-m statistic --mode random --probability 0.5000000000 -j X'],
  // 1/9999 and 1/10000: neighbours at 10,000 endpoints, two fixed-point values apart.
  ['-m statistic --mode random --probability 0.0001000100 -j X', '-m statistic --mode random --probability 0.0001000000 -j X'],
  ['-j MARK --or-mark 0x4000', '-j MARK --xor-mark 0x4000'],
  ['-j REJECT', '-j REJECT --reject-with tcp-reset'],
  ['-j DNAT --to-destination 10.244.0.1:80', '-j DNAT --to-destination 10.244.0.1:81'],
];

describe('iptablesRuleKey', () => {
  it.each(SAME)('makes what kproxy wrote equal what the kernel lists: %s', (written, listed) => {
    expect(iptablesRuleKey(listed)).toBe(iptablesRuleKey(written));
  });

  it.each(DIFFERENT)('keeps rules that mean different things apart: %s', (a, b) => {
    expect(iptablesRuleKey(a)).not.toBe(iptablesRuleKey(b));
  });

  it('compares a rule with unbalanced quotes as written', () => {
    expect(iptablesRuleKey('-m comment --comment "open')).toBe('-m comment --comment "open');
  });
});

import { describe, expect, it } from 'vitest';
import { parseIptablesSave } from '../../kernel/iptables-save-parser.ts';
import { detectLocalByCIDR, NO_LOCAL_DETECTOR } from '../local-detector.ts';
import { buildIptablesRules, staleModeChains, type IptablesContext } from './iptables-rules.ts';
import type { SetKey } from './names.ts';

const ctx: IptablesContext = { family: 'IPv4', masqueradeMark: '0x00004000', masqueradeAll: false, localDetector: detectLocalByCIDR('10.244.0.0/16'), randomFully: true };

/** chain lists a chain's rules as kube-proxy's checkIptables sees them: target, matched set, source. */
function chain(text: string, table: string, name: string): string[] {
  const dump = parseIptablesSave(text);
  return (dump.tables.get(table)?.chains.get(name)?.rules ?? []).map((r) => {
    const set = /--match-set (\S+)/.exec(r.spec)?.[1];
    const src = /(?:^|[^!] )-s (\S+)/.exec(r.spec)?.[1];
    return [r.target, set && `set ${set}`, src && `src ${src}`].filter(Boolean).join(' ');
  });
}

const sets = (...k: SetKey[]) => new Set<SetKey>(k);

describe('IPVS mode iptables rules (kube-proxy proxier_test expectations)', () => {
  it('TestLoadBalancer: KUBE-SERVICES and KUBE-LOAD-BALANCER', () => {
    const { text } = buildIptablesRules(ctx, sets('clusterIP', 'loadBalancer'), []);
    expect(chain(text, 'nat', 'KUBE-SERVICES')).toEqual([
      'RETURN src 127.0.0.0/8',
      'KUBE-LOAD-BALANCER set KUBE-LOAD-BALANCER',
      'KUBE-MARK-MASQ set KUBE-CLUSTER-IP',
      'KUBE-NODE-PORT',
      'ACCEPT set KUBE-CLUSTER-IP',
      'ACCEPT set KUBE-LOAD-BALANCER',
    ]);
    expect(chain(text, 'nat', 'KUBE-LOAD-BALANCER')).toEqual(['KUBE-MARK-MASQ']);
  });

  it('TestOnlyLocalNodePorts: LOCAL node ports return before masquerade; health check ports accepted', () => {
    const { text } = buildIptablesRules(ctx, sets('clusterIP', 'nodePortTCP', 'nodePortLocalTCP'), []);
    expect(chain(text, 'nat', 'KUBE-NODE-PORT')).toEqual(['RETURN set KUBE-NODE-PORT-LOCAL-TCP', 'KUBE-MARK-MASQ set KUBE-NODE-PORT-TCP']);
    expect(chain(text, 'filter', 'KUBE-NODE-PORT')).toEqual(['ACCEPT set KUBE-HEALTH-CHECK-NODE-PORT']);
    expect(text).toContain('-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port with externalTrafficPolicy=local" -m set --match-set KUBE-NODE-PORT-LOCAL-TCP dst -j RETURN');
  });

  it('TestAcceptIPVSTraffic: external IPs are masqueraded and accepted from off the node', () => {
    const { text } = buildIptablesRules(ctx, sets('clusterIP', 'loadBalancer', 'externalIP'), []);
    expect(chain(text, 'nat', 'KUBE-SERVICES')).toEqual([
      'RETURN src 127.0.0.0/8',
      'KUBE-LOAD-BALANCER set KUBE-LOAD-BALANCER',
      'KUBE-MARK-MASQ set KUBE-CLUSTER-IP',
      'KUBE-MARK-MASQ set KUBE-EXTERNAL-IP',
      'ACCEPT set KUBE-EXTERNAL-IP',
      'ACCEPT set KUBE-EXTERNAL-IP',
      'KUBE-NODE-PORT',
      'ACCEPT set KUBE-CLUSTER-IP',
      'ACCEPT set KUBE-LOAD-BALANCER',
    ]);
    expect(text).toContain('-m set --match-set KUBE-EXTERNAL-IP dst,dst -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT');
  });

  it('TestLoadBalancerSourceRanges: the firewall sub-chain returns allowed sources and drops the rest', () => {
    const { text } = buildIptablesRules(ctx, sets('clusterIP', 'loadBalancer', 'loadBalancerFW', 'loadBalancerSourceCIDR'), [{ ip: '1.2.3.4', protocol: 'tcp', port: 80 }]);
    expect(chain(text, 'filter', 'KUBE-PROXY-FIREWALL')).toEqual(['KUBE-SOURCE-RANGES-FIREWALL set KUBE-LOAD-BALANCER-FW']);
    expect(chain(text, 'filter', 'KUBE-SOURCE-RANGES-FIREWALL')).toEqual(['RETURN set KUBE-LOAD-BALANCER-SOURCE-CIDR', 'DROP']);
    expect(text).toContain('-A KUBE-IPVS-OUT-FILTER -s 1.2.3.4 -m ipvs --vaddr 1.2.3.4 --vproto tcp --vport 80 -j DROP');
  });

  it('always filters new connections to service addresses that no service port claims (kubernetes#72236)', () => {
    const { text } = buildIptablesRules(ctx, sets(), []);
    expect(chain(text, 'filter', 'KUBE-IPVS-FILTER')).toEqual([
      'RETURN set KUBE-LOAD-BALANCER',
      'RETURN set KUBE-CLUSTER-IP',
      'RETURN set KUBE-EXTERNAL-IP',
      'RETURN set KUBE-EXTERNAL-IP-LOCAL',
      'RETURN set KUBE-HEALTH-CHECK-NODE-PORT',
      'REJECT set KUBE-IPVS-IPS',
    ]);
    expect(chain(text, 'nat', 'KUBE-SERVICES')).toEqual(['RETURN src 127.0.0.0/8', 'KUBE-NODE-PORT']);
    expect(chain(text, 'nat', 'KUBE-POSTROUTING')).toEqual(['RETURN', 'MARK', 'MASQUERADE']);
  });

  it('masquerades hairpin traffic before the mark rules of KUBE-POSTROUTING', () => {
    const { text } = buildIptablesRules(ctx, sets('loopBack'), []);
    expect(chain(text, 'nat', 'KUBE-POSTROUTING')).toEqual(['MASQUERADE set KUBE-LOOP-BACK', 'RETURN', 'MARK', 'MASQUERADE']);
  });

  it('masquerades cluster IP traffic by the local detector, masqueradeAll, or the VIP source without a detector', () => {
    const rule = (c: IptablesContext) =>
      buildIptablesRules(c, sets('clusterIP'), [])
        .text.split('\n')
        .find((l) => l.includes('--match-set KUBE-CLUSTER-IP') && l.includes('KUBE-MARK-MASQ'));
    expect(rule(ctx)).toContain('--match-set KUBE-CLUSTER-IP dst,dst ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ');
    expect(rule({ ...ctx, masqueradeAll: true })).toContain('--match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ');
    expect(rule({ ...ctx, localDetector: NO_LOCAL_DETECTOR })).toContain('--match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ');
  });

  it('uses the KUBE-6- sets and ::1 for IPv6', () => {
    const { text } = buildIptablesRules({ ...ctx, family: 'IPv6', localDetector: NO_LOCAL_DETECTOR }, sets('clusterIP', 'nodePortLocalSCTP'), []);
    expect(text).toContain('-A KUBE-SERVICES -s ::1/128 -j RETURN');
    expect(text).toContain('--match-set KUBE-6-CLUSTER-IP src,dst');
    expect(text).toContain('--match-set KUBE-6-NODE-PORT-LOCAL-SCTP-HAS dst,dst -j RETURN');
    expect(text).toContain('--match-set KUBE-6-IPVS-IPS dst -j REJECT');
  });

  it('counts the rules it writes', () => {
    const r = buildIptablesRules(ctx, sets('clusterIP'), []);
    // nat: localhost RETURN, cluster IP masquerade, node ports, LB masquerade, cluster IP ACCEPT, 3 postrouting, mark.
    expect(r.rulesByTable).toEqual({ nat: 9, filter: 10 });
  });
});

describe('leftovers of the iptables mode', () => {
  const dump = parseIptablesSave(`*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]
:KUBE-SEP-BBBBBBBBBBBBBBBB - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A KUBE-SERVICES -j KUBE-SVC-AAAAAAAAAAAAAAAA
-A KUBE-SVC-AAAAAAAAAAAAAAAA -j KUBE-SEP-BBBBBBBBBBBBBBBB
COMMIT
*filter
:INPUT ACCEPT [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FIREWALL - [0:0]
-A INPUT -m conntrack --ctstate NEW -j KUBE-EXTERNAL-SERVICES
-A INPUT -j KUBE-FIREWALL
COMMIT
`);

  it('are found with their jump rules, except jumps from chains IPVS mode rewrites anyway', () => {
    const stale = staleModeChains(dump);
    expect(stale.nat).toEqual({ chains: ['KUBE-NODEPORTS', 'KUBE-SEP-BBBBBBBBBBBBBBBB', 'KUBE-SVC-AAAAAAAAAAAAAAAA'], jumps: [] });
    expect(stale.filter).toEqual({ chains: ['KUBE-EXTERNAL-SERVICES'], jumps: ['INPUT -m conntrack --ctstate NEW -j KUBE-EXTERNAL-SERVICES'] });
    const { text } = buildIptablesRules(ctx, sets(), [], stale);
    expect(text).toContain(':KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]\n');
    expect(text).toContain('-D INPUT -m conntrack --ctstate NEW -j KUBE-EXTERNAL-SERVICES\n-X KUBE-EXTERNAL-SERVICES\nCOMMIT\n');
  });
});

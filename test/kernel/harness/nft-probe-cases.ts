/**
 * Transactions whose outcome real nft 1.0.6 (on Linux 6.18) decides, used to
 * hold SimulatedNft to the same answers: the unit test
 * (server/kernel/nft-simulated.test.ts) runs them against the simulation, the
 * kernel tier against real nft in a private namespace (nft-simulation.test.ts),
 * and both must agree step by step and on the table they end with. `refused`
 * is the errno text nft reports. Test data: it lives with the kernel tier's
 * harness, not in server/kernel/, whose files the build ships.
 */
export interface NftProbeStep {
  readonly input: string;
  readonly refused?: 'File exists' | 'No such file or directory' | 'Device or resource busy' | 'Operation not supported' | 'comment too long, 128 characters maximum allowed';
}

export interface NftProbeCase {
  readonly name: string;
  readonly steps: readonly NftProbeStep[];
}

const T = 'ip kproxy-probe';

const SETUP = [
  `add table ${T}`,
  `add chain ${T} nat-prerouting { type nat hook prerouting priority -100 ; }`,
  `add chain ${T} filter-forward { type filter hook forward priority 0 ; }`,
  `add chain ${T} services`,
  `add chain ${T} svc`,
  `add chain ${T} ep`,
  `add chain ${T} other`,
  `add map ${T} service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }`,
  `add set ${T} cluster-ips { type ipv4_addr ; comment "Active ClusterIPs" ; }`,
  `add set ${T} aff { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }`,
  `add rule ${T} nat-prerouting jump services`,
  `add rule ${T} services ip daddr . meta l4proto . th dport vmap @service-ips`,
  `add rule ${T} svc ip saddr @aff goto ep`,
  `add rule ${T} svc numgen random mod 1 vmap { 0 : goto ep }`,
  `add rule ${T} ep update @aff { ip saddr }`,
  `add rule ${T} ep meta l4proto tcp dnat to 10.180.0.1:80`,
  `add element ${T} service-ips { 172.30.0.41 . tcp . 80 : goto svc }`,
  `add element ${T} cluster-ips { 172.30.0.41 }`,
].join('\n');

export const NFT_PROBE_CASES: readonly NftProbeCase[] = [
  {
    name: 'elements: the same again is a no-op, another verdict is refused, a missing one cannot be deleted',
    steps: [
      { input: SETUP },
      { input: `add element ${T} service-ips { 172.30.0.41 . tcp . 80 : goto svc }` },
      { input: `add element ${T} service-ips { 172.30.0.41 . tcp . 80 : goto other }`, refused: 'File exists' },
      { input: `add element ${T} service-ips { 172.30.0.41 . tcp . 80 comment "ns/svc:p" : goto svc }` },
      { input: `delete element ${T} service-ips { 172.30.0.99 . tcp . 80 }`, refused: 'No such file or directory' },
      { input: `delete element ${T} service-ips { 172.30.0.41 . tcp . 80 }\nadd element ${T} service-ips { 172.30.0.41 . tcp . 80 : goto other }` },
      { input: `add element ${T} service-ips { 172.30.0.42 . tcp . 80 : goto nowhere }`, refused: 'No such file or directory' },
    ],
  },
  {
    name: 'chains: a referenced chain cannot be deleted, one unhooked earlier in the same transaction can',
    steps: [
      { input: SETUP },
      { input: `delete chain ${T} svc`, refused: 'Device or resource busy' },
      { input: `delete chain ${T} ep`, refused: 'Device or resource busy' },
      { input: `flush chain ${T} svc\ndelete chain ${T} ep` },
      { input: `delete element ${T} service-ips { 172.30.0.41 . tcp . 80 }\ndelete chain ${T} svc` },
      { input: `flush chain ${T} nowhere`, refused: 'No such file or directory' },
      { input: `add rule ${T} other jump nowhere`, refused: 'No such file or directory' },
    ],
  },
  {
    name: 'sets: a referenced set cannot go, one whose rules are flushed in the same transaction can; re-adding one updates its timeout, not its comment',
    steps: [
      { input: SETUP },
      { input: `delete set ${T} aff`, refused: 'Device or resource busy' },
      { input: `add set ${T} aff { type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; }` },
      { input: `add set ${T} cluster-ips { type ipv4_addr ; comment "another comment" ; }` },
      { input: `add set ${T} cluster-ips { type ipv4_addr ; }` },
      { input: `add set ${T} cluster-ips { type inet_service ; }`, refused: 'File exists' },
      { input: `flush chain ${T} svc\nflush chain ${T} ep\ndelete set ${T} aff\nadd set ${T} aff { type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; }\nadd rule ${T} svc ip saddr @aff goto ep` },
    ],
  },
  {
    name: 'base chains: another priority is refused in place; dnat only from nat chains',
    steps: [
      { input: SETUP },
      { input: `add chain ${T} nat-prerouting { type nat hook prerouting priority -90 ; }`, refused: 'Operation not supported' },
      { input: `add chain ${T} nat-prerouting { type nat hook prerouting priority -100 ; }` },
      { input: `add rule ${T} filter-forward jump services`, refused: 'Operation not supported' },
      {
        input: `flush chain ${T} nat-prerouting\ndelete chain ${T} nat-prerouting\nadd chain ${T} nat-prerouting { type nat hook prerouting priority -110 ; }\nadd rule ${T} nat-prerouting jump services`,
      },
    ],
  },
  {
    name: 'comments: 128 bytes are taken, 129 refuse the whole transaction (an element, a rule, a set)',
    steps: [
      { input: SETUP },
      { input: `add element ${T} service-ips { 172.30.0.43 . tcp . 80 comment "${'c'.repeat(128)}" : goto svc }` },
      { input: `add element ${T} service-ips { 172.30.0.44 . tcp . 80 comment "${'c'.repeat(129)}" : goto svc }`, refused: 'comment too long, 128 characters maximum allowed' },
      { input: `add chain ${T} fresh\nadd rule ${T} other accept comment "${'r'.repeat(129)}"`, refused: 'comment too long, 128 characters maximum allowed' },
      { input: `add set ${T} long { type ipv4_addr ; comment "${'s'.repeat(129)}" ; }`, refused: 'comment too long, 128 characters maximum allowed' },
    ],
  },
  {
    name: 'a transaction is all or nothing',
    steps: [
      { input: SETUP },
      { input: `add chain ${T} fresh\nadd rule ${T} fresh drop\nadd element ${T} cluster-ips { 172.30.0.50 }\nadd element ${T} service-ips { 172.30.0.41 . tcp . 80 : drop }`, refused: 'File exists' },
      { input: `delete table ${T}\ndelete table ${T}`, refused: 'No such file or directory' },
    ],
  },
];

import type { ChainView } from './protocol.ts';

/**
 * What the pages show of nftables mode's objects: the tables "kube-proxy"
 * (`ip kube-proxy`) and "ip6-kube-proxy" (`ip6 kube-proxy`), whose chains keep
 * their names and whose sets and maps are listed as "@name" with their
 * elements as lines. Pure helpers: the components only lay out what these return.
 */

/** isNftTable: the dashboard table is an nftables table (nftables mode's kube-proxy table of either family). */
export function isNftTable(table: string): boolean {
  return table === 'kube-proxy' || table === 'ip6-kube-proxy';
}

/** isNftSet: a "chain" of an nftables table that is a set or a verdict map ("@service-ips"). */
export function isNftSet(name: string): boolean {
  return name.startsWith('@');
}

const VERDICTS = new Set(['accept', 'drop', 'reject', 'return', 'continue', 'masquerade', 'dnat', 'snat']);

/** nftLinkable: a rule's target names a chain or a set of the table (not a verdict), so it can be followed. */
export function nftLinkable(target: string | null): target is string {
  return target !== null && !VERDICTS.has(target);
}

/** nftJumps: the chains a rule's text goes to or jumps to ("numgen … vmap { 0 : goto a , 1 : goto b }" has several). */
export function nftJumps(spec: string): string[] {
  return [...spec.matchAll(/(?:^| )(?:goto|jump) ([^\s,}]+)/g)].map((m) => m[1]);
}

const SET_ROLE: Record<string, string> = {
  '@service-ips': 'verdict map: service IPs',
  '@service-nodeports': 'verdict map: node ports',
  '@firewall-ips': 'verdict map: source ranges',
  '@no-endpoint-services': 'verdict map: no endpoints',
  '@no-endpoint-nodeports': 'verdict map: no endpoints',
  '@cluster-ips': 'set: active cluster IPs',
};

/**
 * nftSub labels an object on an nftables flow: what a map is for, and for a
 * policy chain how it picks an endpoint ("Cluster · numgen mod 3", after the
 * ClientIP affinity sets when it has them): short, a box holds ~32 characters.
 */
export function nftSub(name: string, role: string | undefined, chains: readonly ChainView[]): string {
  if (SET_ROLE[name]) return SET_ROLE[name];
  if (name === 'reject-chain') return 'reject';
  const chain = chains.find((c) => c.name === name && c.role !== 'entry');
  const numgen = chain?.rules.map((r) => /numgen random (mod \d+)/.exec(r.text)?.[1]).find(Boolean);
  const affinity = chain?.rules.some((r) => / @affinity-/.test(r.text)) ?? false;
  const how = [affinity ? 'affinity' : '', numgen ? `numgen ${numgen}` : ''].filter(Boolean).join(', ');
  switch (role) {
    case 'service':
      return how ? `Cluster · ${how}` : 'Cluster policy';
    case 'local':
      return how ? `Local · ${how}` : 'Local policy: this node only';
    case 'external':
      return 'external traffic';
    case 'firewall':
      return 'source ranges (before DNAT)';
    default:
      return role ?? '';
  }
}

import type { NftChain, NftSet, NftTable } from '../../kernel/nft-types.ts';
import type { KernelChain, KernelRule, KernelTable } from '../kernel-view.ts';
import type { Yield } from '../yield.ts';

/**
 * nftables in the dashboard's one shape (tables → chains → rules): the table
 * `ip kube-proxy` is the dashboard table "kube-proxy" (the IPv6 family's
 * `ip6 kube-proxy` becomes "ip6-kube-proxy" in family-view.ts). Its chains
 * keep their names; its sets and maps are "chains" named as nft rules refer
 * to them, "@service-ips", whose "rules" are their elements
 * ("10.96.0.10 . tcp . 80 : goto service-…"). So a rule's `vmap @service-ips`
 * links to the map, and a map element links to the chain it goes to.
 */

/** SET_PREFIX marks a set or map among a table's chains (nft's own spelling of a set reference). */
export const SET_PREFIX = '@';

/** setKey is the dashboard name of set or map `name`. */
export function setKey(name: string): string {
  return SET_PREFIX + name;
}

/** isSetKey: the dashboard name is a set's or a map's. */
export function isSetKey(name: string): boolean {
  return name.startsWith(SET_PREFIX);
}

const COUNTER = /(?:^| )counter packets (\d+) bytes (\d+)/;
const VERDICT_TARGET = /(?:^| )(?:goto|jump) (\S+)/g;

/**
 * ruleTarget is where a rule (or a map element) leads, for links: the one
 * chain it goes to or jumps to, else the verdict map (or else the set) it looks up ("@name"),
 * else its final verdict word. null when it leads to several chains (a
 * numgen vmap: the endpoint chains are each named in its text).
 */
export function ruleTarget(spec: string): string | null {
  const chains = new Set<string>();
  for (const m of spec.matchAll(VERDICT_TARGET)) chains.add(m[1]);
  if (chains.size === 1) return [...chains][0];
  if (chains.size > 1) return null;
  // A verdict map decides where the packet goes; a set it also matches ("ip daddr @nodeport-ips") only filters.
  const set = / vmap @([^\s{}]+)/.exec(spec) ?? /(?:^| )@([^\s{}]+)/.exec(spec);
  if (set) return setKey(set[1]);
  const last = /(accept|drop|reject|return|masquerade(?: \S+)?|dnat to \S+)(?: comment "[^"]*")?$/.exec(spec);
  return last ? last[1].split(' ')[0] : null;
}

/** ruleCounter reads a rule's own counter statement ("counter packets 12 bytes 720"), if it has one. */
export function ruleCounter(spec: string): { packets: number; bytes: number } {
  const m = COUNTER.exec(spec);
  return m ? { packets: Number(m[1]), bytes: Number(m[2]) } : { packets: 0, bytes: 0 };
}

/** chainPolicy describes a chain's hook ("nat hook prerouting priority -100"); null for a regular chain. */
export function chainPolicy(c: Pick<NftChain, 'base'>): string | null {
  return c.base ? `${c.base.type} hook ${c.base.hook} priority ${c.base.priority}` : null;
}

/** setPolicy describes a set's or map's definition ("map ipv4_addr . inet_proto . inet_service : verdict"). */
export function setPolicy(s: Pick<NftSet, 'map' | 'type' | 'flags' | 'timeoutSeconds'>): string {
  const parts = [`${s.map ? 'map' : 'set'} ${s.type}${s.map ? ' : verdict' : ''}`];
  if (s.flags.length) parts.push(`flags ${[...s.flags].sort().join(',')}`);
  if (s.timeoutSeconds !== null) parts.push(`timeout ${s.timeoutSeconds}s`);
  return parts.join(' · ');
}

/** elementSpec writes one element as nft lists it: "key", "key : verdict", with its comment. */
export function elementSpec(e: { key: string; value: string | null; comment: string | null }): string {
  return `${e.key}${e.value !== null ? ` : ${e.value}` : ''}${e.comment !== null ? ` comment "${e.comment}"` : ''}`;
}

function rule(spec: string): KernelRule {
  const c = ruleCounter(spec);
  return { spec, target: ruleTarget(spec), packets: c.packets, bytes: c.bytes };
}

export interface NftTableViewOptions {
  /** skipSets: sets left out (the affinity sets in what kproxy wrote: their elements are the kernel's, see view.ts). */
  skipSet?: (name: string) => boolean;
  pause: Yield;
}

/** PAUSE_EVERY: rules and elements converted between two turns of the event loop. */
const PAUSE_EVERY = 5000;

/**
 * nftKernelTable turns a listed (or wanted) nftables table into the
 * dashboard's KernelTable: chains in name order (base chains first), then
 * sets and maps in name order with their elements in key order. nftables
 * keeps no counters on chains; a rule's own `counter` statement gives its figures.
 */
export async function nftKernelTable(name: string, t: NftTable, opts: NftTableViewOptions): Promise<KernelTable> {
  const chains = new Map<string, KernelChain>();
  let work = 0;
  const step = async (n: number) => {
    work += n;
    if (work >= PAUSE_EVERY) {
      work = 0;
      await opts.pause();
    }
  };
  const byName = <T extends { name: string }>(xs: Iterable<T>) => [...xs].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const list = byName(t.chains.values());
  for (const c of [...list.filter((c) => c.base), ...list.filter((c) => !c.base)]) {
    const rules = c.rules.map(rule);
    let packets = 0;
    let bytes = 0;
    for (const r of rules) {
      packets += r.packets;
      bytes += r.bytes;
    }
    chains.set(c.name, { name: c.name, builtin: c.base !== null, policy: chainPolicy(c), packets, bytes, rules });
    await step(rules.length);
  }
  for (const s of byName(t.sets.values())) {
    if (opts.skipSet?.(s.name)) continue;
    const keys = [...s.elements.keys()].sort();
    const rules = keys.map((k) => {
      const e = s.elements.get(k)!;
      return { spec: elementSpec(e), target: e.value === null ? null : ruleTarget(e.value), packets: 0, bytes: 0 };
    });
    chains.set(setKey(s.name), { name: setKey(s.name), builtin: false, policy: setPolicy(s), packets: 0, bytes: 0, rules });
    await step(rules.length);
  }
  return { name, chains };
}

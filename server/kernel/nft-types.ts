/**
 * Plain data for one nftables table: what a listing returns, what the
 * simulated kernel holds, what the nftables backend builds and diffs. Rules
 * are text in the dialect kproxy writes (nft-listing.ts renders the kernel's
 * JSON into the same dialect, so a rule reads the same on both sides).
 */

/** NftFamily: the nftables address family of a table ("ip" for IPv4, "ip6" for IPv6). */
export type NftFamily = 'ip' | 'ip6';

export type NftChainType = 'filter' | 'nat' | 'route';
/** NFT_HOOKS: the netfilter hooks, in the kernel's numbering (NF_INET_PRE_ROUTING = 0 …). */
export const NFT_HOOKS = ['prerouting', 'input', 'forward', 'output', 'postrouting'] as const;
export type NftHook = (typeof NFT_HOOKS)[number];

/** NftBaseChain: a chain attached to a netfilter hook, with a numeric priority (nft 1.0.6 has no "dstnat" on output). */
export interface NftBaseChain {
  readonly type: NftChainType;
  readonly hook: NftHook;
  readonly priority: number;
}

export interface NftChain {
  readonly name: string;
  readonly base: NftBaseChain | null;
  /** comment: as written; nft 1.0.6 does not list chain comments in JSON, so a listing has null. */
  readonly comment: string | null;
  readonly rules: readonly string[];
}

export interface NftElement {
  /** key: "172.30.0.41 . tcp . 80", "tcp . 3001" or "10.0.0.1". */
  readonly key: string;
  /** value: a map element's verdict ("goto service-…", "drop"); null in a set. */
  readonly value: string | null;
  readonly comment: string | null;
}

export interface NftSet {
  readonly name: string;
  /** map: a verdict map (type … : verdict) rather than a set. */
  readonly map: boolean;
  /** type: the key type, "ipv4_addr" or "ipv4_addr . inet_proto . inet_service". */
  readonly type: string;
  /** flags: set flags other than "dynamic" (which nft 1.0.6 does not list in JSON), sorted. */
  readonly flags: readonly string[];
  /** timeoutSeconds: the set's default element timeout, or null. */
  readonly timeoutSeconds: number | null;
  readonly comment: string | null;
  /** elements by key; dynamic sets (affinity) are listed without their runtime elements. */
  readonly elements: ReadonlyMap<string, NftElement>;
}

export interface NftTable {
  readonly family: NftFamily;
  readonly name: string;
  readonly chains: ReadonlyMap<string, NftChain>;
  readonly sets: ReadonlyMap<string, NftSet>;
}

/** NftSetSpec is a set or map definition (without elements) as written. */
export interface NftSetSpec {
  readonly name: string;
  readonly map: boolean;
  readonly type: string;
  /** flags as written (may include "dynamic"). */
  readonly flags?: readonly string[];
  readonly timeoutSeconds?: number;
  readonly comment?: string;
}

/**
 * NftOp is one command of a transaction. A transaction is a list of them for
 * one table, written as `nft -f` text by formatTransaction (nft-script.ts).
 */
export type NftOp =
  | { readonly op: 'add'; readonly kind: 'table'; readonly comment?: string }
  | { readonly op: 'add'; readonly kind: 'chain'; readonly name: string; readonly base?: NftBaseChain; readonly comment?: string }
  | { readonly op: 'add'; readonly kind: 'set'; readonly spec: NftSetSpec }
  | { readonly op: 'add'; readonly kind: 'rule'; readonly chain: string; readonly rule: string }
  | { readonly op: 'add'; readonly kind: 'element'; readonly set: string; readonly key: string; readonly value?: string | null; readonly comment?: string | null }
  | { readonly op: 'flush'; readonly kind: 'chain'; readonly name: string }
  | { readonly op: 'flush'; readonly kind: 'set'; readonly name: string; readonly map: boolean }
  | { readonly op: 'delete'; readonly kind: 'chain'; readonly name: string }
  | { readonly op: 'delete'; readonly kind: 'set'; readonly name: string; readonly map: boolean }
  | { readonly op: 'delete'; readonly kind: 'element'; readonly set: string; readonly map: boolean; readonly key: string }
  | { readonly op: 'delete'; readonly kind: 'table' };

/** sameBaseChain compares two base chain specs (null: a regular chain). */
export function sameBaseChain(a: NftBaseChain | null | undefined, b: NftBaseChain | null | undefined): boolean {
  if (!a || !b) return !a && !b;
  return a.type === b.type && a.hook === b.hook && a.priority === b.priority;
}

/** comparableFlags: the flags a listing can show (nft 1.0.6's JSON leaves "dynamic" out), sorted. */
export function comparableFlags(flags: readonly string[] | undefined): string[] {
  return (flags ?? []).filter((f) => f !== 'dynamic').sort();
}

/** sameSetDefinition: a listed set matches a spec (kind, type, flags, timeout, comment). */
export function sameSetDefinition(held: NftSet, spec: NftSetSpec): boolean {
  return (
    held.map === spec.map &&
    held.type === spec.type &&
    comparableFlags(held.flags).join(',') === comparableFlags(spec.flags).join(',') &&
    held.timeoutSeconds === (spec.timeoutSeconds ?? null) &&
    held.comment === (spec.comment ?? null)
  );
}

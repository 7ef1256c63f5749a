import { join } from 'node:path';
import { silentLogger } from '../../../server/log.ts';
import { execFile, type ExecFn } from '../../../server/kernel/exec.ts';
import { startNfnlPipe } from '../../../server/kernel/nfnl-pipe.ts';
import { createNetlinkNftRunner, type NetlinkNftRunner } from '../../../server/kernel/nft-netlink.ts';
import { createNftRunner, type NftRunner } from '../../../server/kernel/nft.ts';
import type { NftTable } from '../../../server/kernel/nft-types.ts';
import type { IPFamily } from '../../../server/net/ip.ts';
import type { SyncVerification } from '../../../server/proxy/sync-verify.ts';

/** nsExecFn runs every program inside a namespace: what a runner spawned there would do. */
export function nsExecFn(ns: string): ExecFn {
  return (file, args, opts) => execFile('ip', ['netns', 'exec', ns, file, ...args], opts);
}

/** nsNft is the real nft runner inside a namespace. */
export function nsNft(ns: string): NftRunner {
  return createNftRunner({ exec: nsExecFn(ns) });
}

/**
 * tableShape is a table as comparable plain data: chains with their base and
 * rules, sets with their definition and elements, each sorted by name.
 */
export function tableShape(t: NftTable | null): unknown {
  if (!t) return null;
  const chains = [...t.chains.values()].sort((a, b) => (a.name < b.name ? -1 : 1)).map((c) => ({ name: c.name, base: c.base, rules: c.rules }));
  const sets = [...t.sets.values()].sort((a, b) => (a.name < b.name ? -1 : 1)).map((s) => ({ ...s, elements: [...s.elements.values()].sort((a, b) => (a.key < b.key ? -1 : 1)) }));
  return { family: t.family, name: t.name, chains, sets };
}

/**
 * tableLines is a table as sorted lines, one per chain rule and set element,
 * for comparing big tables and naming the first difference: chains by name
 * (each rule in its chain's order, which decides what a packet meets), sets
 * by name with their definition, elements by key.
 */
export function tableLines(t: NftTable | null): string[] {
  if (!t) return ['(no table)'];
  const out: string[] = [];
  const byName = <T extends { name: string }>(xs: Iterable<T>) => [...xs].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const c of byName(t.chains.values())) {
    out.push(`chain ${c.name}${c.base ? ` { type ${c.base.type} hook ${c.base.hook} priority ${c.base.priority} }` : ''}`);
    c.rules.forEach((r, i) => out.push(`  ${c.name} #${i + 1}: ${r}`));
  }
  for (const s of byName(t.sets.values())) {
    out.push(`${s.map ? 'map' : 'set'} ${s.name} { type ${s.type} flags ${s.flags.join(',')} timeout ${s.timeoutSeconds ?? '-'} comment ${JSON.stringify(s.comment)} }`);
    const keys = [...s.elements.keys()].sort();
    for (const k of keys) {
      const e = s.elements.get(k)!;
      out.push(`  ${s.name}: ${k}${e.value !== null ? ` : ${e.value}` : ''}${e.comment !== null ? ` comment ${JSON.stringify(e.comment)}` : ''}`);
    }
  }
  return out;
}

/** NftFamilyRun is what a differential child reports for one IP family's nftables backend. */
export interface NftFamilyRun {
  readonly family: IPFamily;
  readonly error: string | null;
  readonly skipped: Record<string, string>;
  readonly invalid: Record<string, string>;
  readonly ms: number;
  readonly applyMs: number;
  readonly lines: number;
  readonly bytes: number;
  /** wroteWith: what wrote the transaction ("netlink", "nft", or "nft (why the netlink runner handed it over)"). */
  readonly wroteWith: string;
  readonly verify: SyncVerification | null;
  /** listing: `nft -j list table` afterwards, as nft printed it. */
  readonly listing: string;
}

/** NFNL_PIPE: the helper `npm run build` makes (the kernel tier runs after the build). */
export const NFNL_PIPE = join(import.meta.dirname, '../../../dist/native/nfnl-pipe');

/** nsNetlinkNft is the netlink runner inside a namespace: its helper runs there (`ip netns exec`), nft is its fallback. */
export async function nsNetlinkNft(ns: string, opts: { phasedFrom?: number } = {}): Promise<NetlinkNftRunner> {
  const pipe = await startNfnlPipe(NFNL_PIPE, { prefix: ['ip', 'netns', 'exec', ns] });
  return createNetlinkNftRunner({ pipe, fallback: nsNft(ns), logger: silentLogger, ...opts });
}

/** listText: `nft list table FAMILY kube-proxy` in a namespace, as nft prints it. */
export async function listText(ns: string, family = 'ip', table = 'kube-proxy'): Promise<string> {
  const r = await execFile('ip', ['netns', 'exec', ns, 'nft', 'list', 'table', family, table], { timeoutMs: 60_000 });
  if (r.code !== 0) throw new Error(`nft list table ${family} ${table} in ${ns}: ${r.stderr.trim()}`);
  return r.stdout;
}

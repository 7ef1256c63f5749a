import { execFile, type ExecFn } from '../../../server/kernel/exec.ts';
import { createNftRunner, type NftRunner } from '../../../server/kernel/nft.ts';
import type { NftTable } from '../../../server/kernel/nft-types.ts';

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

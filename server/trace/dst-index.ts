import type { KernelChain, KernelRule } from '../dashboard/kernel-view.ts';

/**
 * DstIndex lets a walk skip, in a long chain, the rules that name another
 * destination: at 10,000 Services KUBE-SERVICES holds 10,000 rules of which a
 * packet can match only those for its own address and the few without a
 * destination. Built once per listed chain from the rule text (a regular
 * expression, far cheaper than reading every rule), kept while the read is.
 */
export interface DstIndex {
  /** byDst: rules whose `-d` is one address (a /32 or /128), by that address, in chain order. */
  readonly byDst: ReadonlyMap<string, readonly number[]>;
  /** rest: every other rule (no -d, a negated one, a network), in chain order. */
  readonly rest: readonly number[];
}

/** SMALL: chains shorter than this are walked rule by rule (an index would cost more than it saves). */
const SMALL = 64;

const DST = /(?:^| )(! )?(?:-d|--destination) ([0-9a-fA-F.:]+)(\/(?:32|128))?(?= |$)/;

/**
 * indexes: by the chain's rules array, not the chain: a parsed iptables chain
 * is a view made per lookup (dashboard/iptables/rule-store.ts) whose built
 * rules the store keeps while they are read, and an edited chain's rules are a
 * new array, so an index never outlives the rules it was built from.
 */
const indexes = new WeakMap<readonly KernelRule[], DstIndex | null>();

/** dstIndex indexes an iptables chain's rules by destination; null for a short chain. */
export function dstIndex(chain: KernelChain): DstIndex | null {
  const rules = chain.rules;
  let ix = indexes.get(rules);
  if (ix !== undefined) return ix;
  ix = null;
  if (rules.length >= SMALL) {
    const byDst = new Map<string, number[]>();
    const rest: number[] = [];
    rules.forEach((r, i) => {
      const m = DST.exec(r.spec);
      // A negated destination, or one listed twice, is left to the full reading.
      if (!m || m[1] || r.spec.indexOf(' -d ', (m.index ?? 0) + 1) > 0) rest.push(i);
      else {
        const list = byDst.get(m[2]);
        if (list) list.push(i);
        else byDst.set(m[2], [i]);
      }
    });
    ix = { byDst, rest };
  }
  indexes.set(rules, ix);
  return ix;
}

/**
 * candidates lists, in order, the rules at or after `from` a packet to `dst`
 * may match: every rule of a short chain, else its rules for dst and the rest.
 */
export function candidates(chain: KernelChain, dst: string, from: number): Iterable<number> {
  const ix = dstIndex(chain);
  if (!ix) return range(from, chain.rules.length);
  return merged(ix.byDst.get(dst) ?? [], ix.rest, from);
}

function* range(from: number, to: number): Iterable<number> {
  for (let i = from; i < to; i++) yield i;
}

function* merged(a: readonly number[], b: readonly number[], from: number): Iterable<number> {
  let i = lowerBound(a, from);
  let j = lowerBound(b, from);
  while (i < a.length || j < b.length) {
    if (j >= b.length || (i < a.length && a[i] < b[j])) yield a[i++];
    else yield b[j++];
  }
}

function lowerBound(xs: readonly number[], v: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

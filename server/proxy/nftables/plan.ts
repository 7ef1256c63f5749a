import { comparableFlags, sameBaseChain, type NftBaseChain, type NftElement, type NftOp, type NftSetSpec } from '../../kernel/nft-types.ts';
import type { ChainSpec } from './builder.ts';

/**
 * TxPlan collects what one sync changes in the table and writes it as one
 * transaction in an order nft accepts: the table; base chains that must be
 * re-created (a priority cannot change in place); every new chain and set
 * (a rule or verdict may only name what exists by then); flushes (chains to
 * rewrite, stale chains); sets that go (their rules are flushed above);
 * rules; element deletions; element additions. Pure: plain data in, ops out.
 */

/** HeldChain is what the kernel is known to hold for a chain. */
export interface HeldChain {
  readonly base: NftBaseChain | null;
  readonly rules: readonly string[];
}

/** HeldSet is what the kernel is known to hold for a set's definition. */
export interface HeldSet {
  readonly map: boolean;
  readonly type: string;
  readonly flags: readonly string[];
  readonly timeoutSeconds: number | null;
  readonly comment: string | null;
}

function sameRules(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** SetChange: how a held set differs from the wanted one. */
export type SetChange = 'none' | 'timeout' | 'recreate';

/** setChange compares a held set with a spec: a new timeout is taken by re-adding it; anything else needs a new set. */
export function setChange(held: HeldSet, spec: NftSetSpec): SetChange {
  if (held.map !== spec.map || held.type !== spec.type || held.comment !== (spec.comment ?? null)) return 'recreate';
  if (comparableFlags(held.flags).join(',') !== comparableFlags(spec.flags).join(',')) return 'recreate';
  return held.timeoutSeconds === (spec.timeoutSeconds ?? null) ? 'none' : 'timeout';
}

export class TxPlan {
  readonly #table: NftOp[] = [];
  readonly #recreate: NftOp[] = [];
  readonly #adds: NftOp[] = [];
  readonly #flushes: NftOp[] = [];
  readonly #setDeletes: NftOp[] = [];
  readonly #rules: NftOp[] = [];
  readonly #elementDeletes: NftOp[] = [];
  readonly #elementAdds: NftOp[] = [];
  /** chainsWritten: chains added or flushed and refilled. */
  chainsWritten = 0;
  rulesWritten = 0;

  addTable(comment: string): void {
    this.#table.push({ op: 'add', kind: 'table', comment });
  }

  /**
   * chain brings one chain to its wanted rules: nothing when they match,
   * else a flush and the rules (or, new, the chain and its rules). force
   * rewrites it even when it matches (a set it names is re-created).
   */
  chain(held: HeldChain | undefined, want: ChainSpec, force = false): void {
    const base = want.base ?? null;
    if (held && !sameBaseChain(held.base, base)) {
      // A base chain cannot change hook or priority in place (EOPNOTSUPP): it is deleted and added again.
      if (held.rules.length) this.#recreate.push({ op: 'flush', kind: 'chain', name: want.name });
      this.#recreate.push({ op: 'delete', kind: 'chain', name: want.name });
      held = undefined;
    }
    if (!held) {
      this.#adds.push({ op: 'add', kind: 'chain', name: want.name, ...(want.base ? { base: want.base } : {}), ...(want.comment !== undefined ? { comment: want.comment } : {}) });
    } else if (!force && sameRules(held.rules, want.rules)) {
      return;
    } else if (held.rules.length) {
      this.#flushes.push({ op: 'flush', kind: 'chain', name: want.name });
    }
    this.chainsWritten++;
    for (const rule of want.rules) this.#rules.push({ op: 'add', kind: 'rule', chain: want.name, rule });
    this.rulesWritten += want.rules.length;
  }

  /**
   * blindChain writes a chain whose kernel state is unknown (no listing): a
   * base chain is added plain and deleted first (so a new priority takes,
   * kube-proxy's trick), every chain is added, flushed and filled.
   */
  blindChain(want: ChainSpec): void {
    if (want.base) {
      this.#recreate.push({ op: 'add', kind: 'chain', name: want.name }, { op: 'delete', kind: 'chain', name: want.name });
    } else {
      this.#flushes.push({ op: 'flush', kind: 'chain', name: want.name });
    }
    this.#adds.push({ op: 'add', kind: 'chain', name: want.name, ...(want.base ? { base: want.base } : {}), ...(want.comment !== undefined ? { comment: want.comment } : {}) });
    this.chainsWritten++;
    for (const rule of want.rules) this.#rules.push({ op: 'add', kind: 'rule', chain: want.name, rule });
    this.rulesWritten += want.rules.length;
  }

  /** blindSet writes a set whose kernel state is unknown: added (its timeout taken) and flushed. */
  blindSet(spec: NftSetSpec): void {
    this.#adds.push({ op: 'add', kind: 'set', spec });
    this.#flushes.push({ op: 'flush', kind: 'set', name: spec.name, map: spec.map });
  }

  /** flushChain empties a chain that goes stale (it is deleted by a later transaction). */
  flushChain(name: string): void {
    this.#flushes.push({ op: 'flush', kind: 'chain', name });
  }

  /** removeChain empties and deletes a chain nothing references any more (a base chain kproxy no longer has). */
  removeChain(name: string, held: HeldChain): void {
    if (held.rules.length) this.#recreate.push({ op: 'flush', kind: 'chain', name });
    this.#recreate.push({ op: 'delete', kind: 'chain', name });
  }

  /**
   * set brings a set's definition to the spec: added when missing, re-added
   * for a new timeout, deleted and added for any other change (the caller
   * then rewrites the chains that name it and re-adds its elements).
   * Returns whether the set is new (empty) in this transaction.
   */
  set(held: HeldSet | undefined, spec: NftSetSpec): boolean {
    if (!held) {
      this.#adds.push({ op: 'add', kind: 'set', spec });
      return true;
    }
    const change = setChange(held, spec);
    if (change === 'none') return false;
    if (change === 'timeout') {
      this.#adds.push({ op: 'add', kind: 'set', spec });
      return false;
    }
    this.#setDeletes.push({ op: 'delete', kind: 'set', name: spec.name, map: held.map });
    // Added again after the delete, in the same group as the rules that name it.
    this.#rules.unshift({ op: 'add', kind: 'set', spec });
    return true;
  }

  /** deleteSet removes a set no rule will name after this transaction. */
  deleteSet(name: string, map: boolean): void {
    this.#setDeletes.push({ op: 'delete', kind: 'set', name, map });
  }

  /** element brings one element from what is held to what is wanted (either may be absent). */
  element(set: string, map: boolean, held: NftElement | undefined, want: NftElement | undefined): void {
    if (held && want && held.value === want.value && held.comment === want.comment) return;
    // nft refuses a new verdict for an existing key, and keeps an old comment: delete, then add.
    if (held) this.#elementDeletes.push({ op: 'delete', kind: 'element', set, map, key: held.key });
    if (want) this.#elementAdds.push({ op: 'add', kind: 'element', set, key: want.key, value: want.value, comment: want.comment });
  }

  /** addElement adds an element to a set that is new in this transaction. */
  addElement(set: string, want: NftElement): void {
    this.#elementAdds.push({ op: 'add', kind: 'element', set, key: want.key, value: want.value, comment: want.comment });
  }

  get empty(): boolean {
    return this.size === 0;
  }

  get size(): number {
    return (
      this.#table.length + this.#recreate.length + this.#adds.length + this.#flushes.length + this.#setDeletes.length + this.#rules.length + this.#elementDeletes.length + this.#elementAdds.length
    );
  }

  ops(): NftOp[] {
    return [...this.#table, ...this.#recreate, ...this.#adds, ...this.#flushes, ...this.#setDeletes, ...this.#rules, ...this.#elementDeletes, ...this.#elementAdds];
  }
}

import type { KernelChain, KernelRule } from '../kernel-view.ts';
import type { Yield } from '../yield.ts';

/** CACHE_RULES: rules kept built as objects at once, over every chain (the chains read last). */
const CACHE_RULES = 20_000;
/** CACHE_CHAINS: chains kept built at once. */
const CACHE_CHAINS = 64;
/** COMPACT_SLICE: rules copied by compact() between two yields (a few ms). */
export const COMPACT_SLICE = 10_000;

/**
 * RuleStore keeps the rules of parsed iptables text without an object per
 * rule: each rule is a range of the text it came from, its counters and its
 * jump target, in typed arrays. At 10,000 Services × 10 endpoints a listing
 * holds 330,000 rules; as objects (a rule, its spec string, its slot in its
 * chain's array) they cost about 330 bytes each beyond the text, and the
 * dashboard holds two such copies while someone looks (the kernel's, with
 * counters, and what kproxy wrote): here a rule costs 32 bytes beyond the text.
 *
 * A chain's rules are built as KernelRule objects when asked for
 * (StoredChain.rules), and the last few chains asked for stay built, so a
 * reader that walks one chain rule by rule builds it once.
 */
export class RuleStore {
  #texts: string[] = [];
  #text = new Uint32Array(0);
  #start = new Uint32Array(0);
  #end = new Uint32Array(0);
  #packets = new Float64Array(0);
  #bytes = new Float64Array(0);
  #target = new Int32Array(0);
  readonly #targets: string[] = [];
  readonly #targetIds = new Map<string, number>();
  #count = 0;
  /** #built: chains whose rules were built as objects, least recently asked first. */
  readonly #built = new Map<StoredChain, KernelRule[]>();
  #builtRules = 0;

  constructor(expectedRules = 0) {
    this.#grow(expectedRules);
  }

  /** count: rules stored, including those no chain refers to any more (compact() drops them). */
  get count(): number {
    return this.#count;
  }

  /** addText registers a text rules refer to by range; returns its index. */
  addText(text: string): number {
    this.#texts.push(text);
    return this.#texts.length - 1;
  }

  /** add stores one rule, text[start, end) of text number textIndex; returns its id. */
  add(textIndex: number, start: number, end: number, packets: number, bytes: number, target: string | null): number {
    if (this.#count === this.#start.length) this.#grow(Math.max(1024, Math.ceil(this.#count * 1.5)));
    const id = this.#count++;
    this.#text[id] = textIndex;
    this.#start[id] = start;
    this.#end[id] = end;
    this.#packets[id] = packets;
    this.#bytes[id] = bytes;
    this.#target[id] = target === null ? -1 : this.#targetId(target);
    return id;
  }

  /** addSpec stores a rule whose spec is a string of its own (a rule inserted by a command). */
  addSpec(spec: string, target: string | null): number {
    return this.add(this.addText(spec), 0, spec.length, 0, 0, target);
  }

  spec(id: number): string {
    return this.#texts[this.#text[id]!]!.slice(this.#start[id], this.#end[id]);
  }

  /** sameSpec: rule id's spec is exactly spec (compared in place). */
  sameSpec(id: number, spec: string): boolean {
    const start = this.#start[id]!;
    return this.#end[id]! - start === spec.length && this.#texts[this.#text[id]!]!.startsWith(spec, start);
  }

  /** hashSpecs: FNV-1a over the specs of ids, in order (each followed by a newline), read in place. */
  hashSpecs(ids: Iterable<number>): number {
    let h = 0x811c9dc5;
    for (const id of ids) {
      const text = this.#texts[this.#text[id]!]!;
      for (let i = this.#start[id]!, e = this.#end[id]!; i < e; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
      h = Math.imul(h ^ 10, 0x01000193);
    }
    return h >>> 0;
  }

  rule(id: number): KernelRule {
    const t = this.#target[id]!;
    return { spec: this.spec(id), target: t < 0 ? null : this.#targets[t]!, packets: this.#packets[id]!, bytes: this.#bytes[id]! };
  }

  /** rulesOf builds (or finds built) the rules of chain, in order. */
  rulesOf(chain: StoredChain, ids: Iterable<number>, length: number): KernelRule[] {
    const hit = this.#built.get(chain);
    if (hit) {
      this.#built.delete(chain);
      this.#built.set(chain, hit);
      return hit;
    }
    const rules: KernelRule[] = new Array<KernelRule>(length);
    let i = 0;
    for (const id of ids) rules[i++] = this.rule(id);
    this.#built.set(chain, rules);
    this.#builtRules += length;
    for (const [c, r] of this.#built) {
      if (this.#built.size <= 1 || (this.#built.size <= CACHE_CHAINS && this.#builtRules <= CACHE_RULES)) break;
      this.#built.delete(c);
      this.#builtRules -= r.length;
    }
    return rules;
  }

  /** forget drops chain's built rules (its rules changed). */
  forget(chain: StoredChain): void {
    const r = this.#built.get(chain);
    if (!r) return;
    this.#built.delete(chain);
    this.#builtRules -= r.length;
  }

  /**
   * compact rewrites the store with only the rules of chains, each chain's
   * rules together in order (so each is a range again), and drops texts no
   * rule refers to. It copies COMPACT_SLICE rules between two pauses (at
   * 10,000 Services × 10 endpoints, 330,000 rules held the event loop 100-150 ms
   * in one piece) into new columns beside the old ones, and swaps them in, with
   * every chain's new range, in one step at the end: a reader between two
   * slices sees the store as it was. The chains must not change meanwhile
   * (their owner applies no input while it compacts).
   */
  async compact(chains: readonly StoredChain[], pause: Yield, slice = COMPACT_SLICE): Promise<void> {
    let total = 0;
    for (const c of chains) total += c.ruleCount;
    const text = new Uint32Array(total);
    const start = new Uint32Array(total);
    const end = new Uint32Array(total);
    const packets = new Float64Array(total);
    const bytes = new Float64Array(total);
    const target = new Int32Array(total);
    const texts: string[] = [];
    const renumber = new Map<number, number>();
    const ranges = new Uint32Array(chains.length + 1);
    let at = 0;
    let work = 0;
    for (let ci = 0; ci < chains.length; ci++) {
      ranges[ci] = at;
      for (const id of chains[ci]!.ids()) {
        const ti = this.#text[id]!;
        let nt = renumber.get(ti);
        if (nt === undefined) {
          nt = texts.push(this.#texts[ti]!) - 1;
          renumber.set(ti, nt);
        }
        text[at] = nt;
        start[at] = this.#start[id]!;
        end[at] = this.#end[id]!;
        packets[at] = this.#packets[id]!;
        bytes[at] = this.#bytes[id]!;
        target[at] = this.#target[id]!;
        at++;
      }
      // Checked between chains: a chain's ids are read in one go, so no yield falls inside an edited chain's list.
      if ((work += chains[ci]!.ruleCount) >= slice && ci + 1 < chains.length) {
        work = 0;
        await pause();
      }
    }
    ranges[chains.length] = at;
    this.#texts = texts;
    this.#text = text;
    this.#start = start;
    this.#end = end;
    this.#packets = packets;
    this.#bytes = bytes;
    this.#target = target;
    this.#count = at;
    for (let ci = 0; ci < chains.length; ci++) chains[ci]!.setRange(ranges[ci]!, ranges[ci + 1]!);
  }

  #targetId(target: string): number {
    let id = this.#targetIds.get(target);
    if (id === undefined) {
      id = this.#targets.length;
      // A Map lookup flattens the string; the stored copy is the flat one.
      this.#targets.push(target);
      this.#targetIds.set(target, id);
    }
    return id;
  }

  #grow(capacity: number): void {
    if (capacity <= this.#start.length) return;
    const grow = <T extends Uint32Array | Float64Array | Int32Array>(a: T, make: (n: number) => T): T => {
      const b = make(capacity);
      b.set(a.subarray(0, this.#count));
      return b;
    };
    this.#text = grow(this.#text, (n) => new Uint32Array(n));
    this.#start = grow(this.#start, (n) => new Uint32Array(n));
    this.#end = grow(this.#end, (n) => new Uint32Array(n));
    this.#packets = grow(this.#packets, (n) => new Float64Array(n));
    this.#bytes = grow(this.#bytes, (n) => new Float64Array(n));
    this.#target = grow(this.#target, (n) => new Int32Array(n));
  }
}

/**
 * StoredChain is a KernelChain whose rules live in a RuleStore: a range of
 * rule ids while its rules were stored together, a list once it was edited
 * (an insert or a delete, a rule appended after other chains' rules).
 */
export class StoredChain implements KernelChain {
  readonly name: string;
  readonly builtin: boolean;
  policy: string | null;
  packets: number;
  bytes: number;
  readonly #store: RuleStore;
  #from = 0;
  #to = 0;
  #list: number[] | null = null;

  constructor(store: RuleStore, name: string, builtin: boolean, policy: string | null, packets: number, bytes: number) {
    this.#store = store;
    this.name = name;
    this.builtin = builtin;
    this.policy = policy;
    this.packets = packets;
    this.bytes = bytes;
  }

  get ruleCount(): number {
    return this.#list ? this.#list.length : this.#to - this.#from;
  }

  get rules(): readonly KernelRule[] {
    return this.#store.rulesOf(this, this.ids(), this.ruleCount);
  }

  specAt(i: number): string {
    return this.#store.spec(this.idAt(i));
  }

  specsHash(): number {
    return this.#store.hashSpecs(this.ids());
  }

  /** edited: the chain's rules are a list, not a range of the store. */
  get edited(): boolean {
    return this.#list !== null;
  }

  *ids(): Iterable<number> {
    if (this.#list) yield* this.#list;
    else for (let id = this.#from; id < this.#to; id++) yield id;
  }

  /** idAt: the id of the rule at index i. */
  idAt(i: number): number {
    return this.#list ? this.#list[i]! : this.#from + i;
  }

  setRange(from: number, to: number): void {
    this.#from = from;
    this.#to = to;
    this.#list = null;
    this.#store.forget(this);
  }

  /** append adds rule id at the end (a range grows when id follows it). */
  append(id: number): void {
    this.#store.forget(this);
    if (!this.#list) {
      if (this.#from === this.#to) {
        this.#from = id;
        this.#to = id + 1;
        return;
      }
      if (this.#to === id) {
        this.#to++;
        return;
      }
      this.#list = [...this.ids()];
    }
    this.#list.push(id);
  }

  /** insert puts rule id at index i. */
  insert(i: number, id: number): void {
    this.#edit().splice(i, 0, id);
  }

  /** remove takes out the rule at index i. */
  remove(i: number): void {
    this.#edit().splice(i, 1);
  }

  /** flush empties the chain. */
  flush(): void {
    this.setRange(0, 0);
  }

  #edit(): number[] {
    this.#store.forget(this);
    this.#list ??= [...this.ids()];
    return this.#list;
  }
}

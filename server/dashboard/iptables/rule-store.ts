import type { KernelChain, KernelRule } from '../kernel-view.ts';
import type { Yield } from '../yield.ts';

/** CACHE_RULES: rules kept built as objects at once, over every chain (the chains read last). */
const CACHE_RULES = 20_000;
/** CACHE_CHAINS: chains kept built at once. */
const CACHE_CHAINS = 64;
/** COMPACT_SLICE: rules copied by compact() between two yields (a few ms). */
export const COMPACT_SLICE = 10_000;
/** MAX_CHAINS: chain slots one ChainTable can number (its keys are a range of this size). */
const MAX_CHAINS = 2 ** 26;
/** NO_TARGET: a rule that jumps nowhere (RuleStore's #target). */
const NO_TARGET = -1;

/**
 * RuleStore keeps the rules of parsed iptables text without an object per
 * rule: each rule is a range of the text it came from, its counters and its
 * jump target, in typed arrays. At 10,000 Services × 10 endpoints a listing
 * holds 330,000 rules; as objects (a rule, its spec string, its slot in its
 * chain's array) they cost about 330 bytes each beyond the text, and the
 * dashboard holds two such copies while someone looks (the kernel's, with
 * counters, and what kproxy wrote): here a rule costs 17 bytes beyond the text,
 * and 16 more for counters once one is not zero (what kproxy wrote has none).
 * Its jump target is where the text spells it, not a string of its own: at
 * that size 130,000 rules jump to 130,000 chains, and a table of those names
 * cost about 8 MB a copy.
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
  /** #packets, #bytes: null while every rule's counters are zero (what kproxy wrote has none). */
  #packets: Float64Array | null = null;
  #bytes: Float64Array | null = null;
  /**
   * #target: where a rule's jump target is. At 10,000 Services × 10 endpoints
   * 130,000 rules each jump to a chain of their own, so targets are not kept as
   * strings: ≥ 0 is the target's offset in the rule's text (#targetLength
   * characters), NO_TARGET none, and below that an index into #targets (a
   * target the text does not spell as is, e.g. quoted).
   */
  #target = new Int32Array(0);
  #targetLength = new Uint8Array(0);
  readonly #targets: string[] = [];
  readonly #targetIds = new Map<string, number>();
  #count = 0;
  /** #built: chains (by ChainTable.keyOf) whose rules were built as objects, least recently asked first. */
  readonly #built = new Map<number, KernelRule[]>();
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
    if (packets !== 0 || bytes !== 0 || this.#packets) {
      this.#packets ??= new Float64Array(this.#start.length);
      this.#bytes ??= new Float64Array(this.#start.length);
      this.#packets[id] = packets;
      this.#bytes[id] = bytes;
    }
    if (target === null) this.#target[id] = NO_TARGET;
    else {
      // Any place in the rule's text that spells the target will do: it is read back as a slice.
      const n = target.length;
      const at = n <= 255 ? this.#texts[textIndex]!.lastIndexOf(target, end - n) : -1;
      if (at >= start) {
        this.#target[id] = at;
        this.#targetLength[id] = n;
      } else this.#target[id] = NO_TARGET - 1 - this.#targetId(target);
    }
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

  target(id: number): string | null {
    const t = this.#target[id]!;
    if (t >= 0) return this.#texts[this.#text[id]!]!.slice(t, t + this.#targetLength[id]!);
    return t === NO_TARGET ? null : this.#targets[NO_TARGET - 1 - t]!;
  }

  rule(id: number): KernelRule {
    return { spec: this.spec(id), target: this.target(id), packets: this.#packets?.[id] ?? 0, bytes: this.#bytes?.[id] ?? 0 };
  }

  /** #tables: ChainTables made over this store (each gets its own range of chain keys). */
  #tables = 0;

  /** tableKey: a new ChainTable's first chain key. */
  tableKey(): number {
    return this.#tables++ * MAX_CHAINS;
  }

  /** rulesOf builds (or finds built) the rules of chain (a ChainTable.keyOf), in order. */
  rulesOf(chain: number, ids: Iterable<number>, length: number): KernelRule[] {
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
  forget(chain: number): void {
    const r = this.#built.get(chain);
    if (!r) return;
    this.#built.delete(chain);
    this.#builtRules -= r.length;
  }

  /**
   * compact rewrites the store with only the rules of chains, each chain's
   * rules together in order (so each is a range again), their specs copied
   * into new texts of specs alone (one per slice): what a listing or a restore input holds
   * besides (counters, "-A CHAIN", declarations, rules no chain holds any
   * more) is let go with the texts, about a third of a listing at 10,000
   * Services × 10 endpoints. It copies COMPACT_SLICE rules between two pauses (at
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
    const oldPackets = this.#packets;
    const oldBytes = this.#bytes;
    const packets = oldPackets ? new Float64Array(total) : null;
    const bytes = oldBytes ? new Float64Array(total) : null;
    const target = new Int32Array(total);
    const targetLength = new Uint8Array(total);
    // The new texts: one per slice, joined from that slice's pieces (which die young); no join of them all,
    // which would copy the whole text again in one piece.
    const texts: string[] = [];
    let pieces: string[] = [];
    let pos = 0;
    const ranges = new Uint32Array(chains.length + 1);
    // Chain names go into the new texts too: a name sliced from the old one would keep it alive.
    const nameAt = new Uint32Array(chains.length);
    const names: string[] = new Array<string>(chains.length);
    let sliceStart = 0;
    const endSlice = (ci: number) => {
      const chunk = pieces.join('');
      for (let k = sliceStart; k < ci; k++) names[k] = chunk.slice(nameAt[k], nameAt[k]! + chains[k]!.name.length);
      texts.push(chunk);
      pieces = [];
      pos = 0;
      sliceStart = ci;
    };
    let at = 0;
    let work = 0;
    for (let ci = 0; ci < chains.length; ci++) {
      ranges[ci] = at;
      nameAt[ci] = pos;
      pieces.push(chains[ci]!.name);
      pos += chains[ci]!.name.length;
      for (const id of chains[ci]!.ids()) {
        const from = this.#start[id]!;
        const n = this.#end[id]! - from;
        pieces.push(this.#texts[this.#text[id]!]!.slice(from, from + n));
        text[at] = texts.length;
        start[at] = pos;
        end[at] = pos + n;
        if (packets) packets[at] = oldPackets![id]!;
        if (bytes) bytes[at] = oldBytes![id]!;
        const t = this.#target[id]!;
        target[at] = t >= 0 ? pos + (t - from) : t;
        targetLength[at] = this.#targetLength[id]!;
        pos += n;
        at++;
      }
      // Checked between chains: a chain's ids are read in one go, so no yield falls inside an edited chain's list.
      if ((work += chains[ci]!.ruleCount) >= slice && ci + 1 < chains.length) {
        work = 0;
        endSlice(ci + 1);
        await pause();
      }
    }
    endSlice(chains.length);
    ranges[chains.length] = at;
    this.#texts = texts;
    this.#text = text;
    this.#start = start;
    this.#end = end;
    this.#packets = packets;
    this.#bytes = bytes;
    this.#target = target;
    this.#targetLength = targetLength;
    this.#count = at;
    // One step for every chain (a reader sees the old store or the new one): no per-chain cache upkeep in it.
    this.#built.clear();
    this.#builtRules = 0;
    for (let ci = 0; ci < chains.length; ci++) chains[ci]!.settle(ranges[ci]!, ranges[ci + 1]!, names[ci]!);
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
    const grow = <T extends Uint32Array | Float64Array | Int32Array | Uint8Array>(a: T, make: (n: number) => T): T => {
      const b = make(capacity);
      b.set(a.subarray(0, this.#count));
      return b;
    };
    this.#text = grow(this.#text, (n) => new Uint32Array(n));
    this.#start = grow(this.#start, (n) => new Uint32Array(n));
    this.#end = grow(this.#end, (n) => new Uint32Array(n));
    if (this.#packets) this.#packets = grow(this.#packets, (n) => new Float64Array(n));
    if (this.#bytes) this.#bytes = grow(this.#bytes, (n) => new Float64Array(n));
    this.#target = grow(this.#target, (n) => new Int32Array(n));
    this.#targetLength = grow(this.#targetLength, (n) => new Uint8Array(n));
  }
}

/** ChainFacts: what few chains carry beyond a name and rules (built-in chains: policy and counters). */
interface ChainFacts {
  readonly builtin: boolean;
  readonly policy: string | null;
  readonly packets: number;
  readonly bytes: number;
}

const EMPTY_SLOT = 0;
/** GONE_SLOT: an index entry whose chain was deleted (a lookup goes on past it). */
const GONE_SLOT = -1;
/** FNV-1a over a string's UTF-16 units: the name index's hash. */
function hashName(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/**
 * ChainTable is one table's chains in listing order, kept in columns rather
 * than an object and a Map entry each: at 10,000 Services × 10 endpoints a
 * table has 130,000 chains, and the dashboard holds two copies while someone
 * looks; as a Map of chain objects they cost about 170 bytes each beyond
 * their names, here about 25. Per chain slot: its name, its rules (a range of
 * the store, or a list once edited), whether it exists; the few chains with
 * a policy or counters (the built-in ones) keep those in a side map. Names
 * are found through an open-addressing index over the slots.
 *
 * It is a ReadonlyMap of StoredChain views: each get() or iteration makes a
 * small view of a slot, which reads the columns (so a view stays current while
 * the slot is edited, and holding one holds nothing extra).
 */
export class ChainTable implements ReadonlyMap<string, StoredChain> {
  readonly store: RuleStore;
  readonly #base: number;
  #names: string[] = [];
  #from = new Uint32Array(16);
  #to = new Uint32Array(16);
  #live = new Uint8Array(16);
  readonly #lists = new Map<number, number[]>();
  readonly #facts = new Map<number, ChainFacts>();
  #slots = 0;
  #size = 0;
  /** #used: index entries taken, deleted ones included. */
  #used = 0;
  /** #index: open addressing over slots; each entry is slot + 1, EMPTY_SLOT when free. */
  #index = new Int32Array(32);

  constructor(store: RuleStore) {
    this.store = store;
    this.#base = store.tableKey();
  }

  get size(): number {
    return this.#size;
  }

  /** declare creates a chain or, when it exists, empties it in the same place; returns its view. */
  declare(name: string, facts?: ChainFacts): StoredChain {
    let slot = this.#find(name);
    if (slot < 0) {
      slot = this.#slots++;
      this.#grow();
      this.#names[slot] = name;
      this.#live[slot] = 1;
      this.#size++;
      this.#insertIndex(slot);
    } else this.setRange(slot, 0, 0);
    if (facts && (facts.builtin || facts.policy !== null || facts.packets !== 0 || facts.bytes !== 0)) this.#facts.set(slot, facts);
    else this.#facts.delete(slot);
    return new StoredChain(this, slot);
  }

  /** delete removes a chain (-X); a chain declared again later comes last, as in a Map. */
  delete(name: string): boolean {
    const slot = this.#find(name);
    if (slot < 0) return false;
    this.setRange(slot, 0, 0);
    this.#live[slot] = 0;
    this.#facts.delete(slot);
    this.#size--;
    const mask = this.#index.length - 1;
    let i = hashName(name) & mask;
    while (this.#index[i] !== slot + 1) i = (i + 1) & mask;
    this.#index[i] = GONE_SLOT;
    return true;
  }

  get(name: string): StoredChain | undefined {
    const slot = this.#find(name);
    return slot < 0 ? undefined : new StoredChain(this, slot);
  }

  has(name: string): boolean {
    return this.#find(name) >= 0;
  }

  *values(): MapIterator<StoredChain> {
    for (let slot = 0; slot < this.#slots; slot++) if (this.#live[slot]) yield new StoredChain(this, slot);
  }

  *keys(): MapIterator<string> {
    for (let slot = 0; slot < this.#slots; slot++) if (this.#live[slot]) yield this.#names[slot]!;
  }

  *entries(): MapIterator<[string, StoredChain]> {
    for (let slot = 0; slot < this.#slots; slot++) if (this.#live[slot]) yield [this.#names[slot]!, new StoredChain(this, slot)];
  }

  [Symbol.iterator](): MapIterator<[string, StoredChain]> {
    return this.entries();
  }

  forEach(fn: (value: StoredChain, key: string, map: ReadonlyMap<string, StoredChain>) => void, thisArg?: unknown): void {
    for (const [k, v] of this.entries()) fn.call(thisArg, v, k, this);
  }

  /** chains: a view of every chain, in order (one array, for a pass over all of them). */
  chains(): StoredChain[] {
    const out: StoredChain[] = [];
    for (let slot = 0; slot < this.#slots; slot++) if (this.#live[slot]) out.push(new StoredChain(this, slot));
    return out;
  }

  /**
   * settle gives a slot its range after RuleStore.compact, and its name as
   * another string of the same characters (a slice of the compacted text).
   * The store's cache of built rules is the caller's to clear.
   */
  settle(slot: number, from: number, to: number, name: string): void {
    this.#from[slot] = from;
    this.#to[slot] = to;
    if (this.#lists.size > 0) this.#lists.delete(slot);
    this.#names[slot] = name;
  }

  /** ruleTotal: the live chains' rules (KernelChains.ruleTotal), from the columns. */
  ruleTotal(): number {
    return this.counts().rules;
  }

  /** counts: live chains, their rules, and how many are edited lists, read from the columns (no views). */
  counts(): { chains: number; rules: number; edited: number } {
    let rules = 0;
    let edited = 0;
    for (let slot = 0; slot < this.#slots; slot++) {
      if (!this.#live[slot]) continue;
      const list = this.listOf(slot);
      if (list) {
        edited++;
        rules += list.length;
      } else rules += this.#to[slot]! - this.#from[slot]!;
    }
    return { chains: this.#size, rules, edited };
  }

  nameOf(slot: number): string {
    return this.#names[slot]!;
  }

  factsOf(slot: number): ChainFacts | undefined {
    return this.#facts.get(slot);
  }

  /** keyOf: a slot's key in the store's cache of built rules. */
  keyOf(slot: number): number {
    return this.#base + slot;
  }

  /** listOf: the slot's rules as an edited list, if they are one (most tables have none: no lookup then). */
  listOf(slot: number): number[] | undefined {
    return this.#lists.size > 0 ? this.#lists.get(slot) : undefined;
  }

  ruleCountOf(slot: number): number {
    const list = this.listOf(slot);
    return list ? list.length : this.#to[slot]! - this.#from[slot]!;
  }

  idAt(slot: number, i: number): number {
    const list = this.listOf(slot);
    return list ? list[i]! : this.#from[slot]! + i;
  }

  *ids(slot: number): Iterable<number> {
    const list = this.listOf(slot);
    if (list) yield* list;
    else for (let id = this.#from[slot]!, to = this.#to[slot]!; id < to; id++) yield id;
  }

  setRange(slot: number, from: number, to: number): void {
    this.#from[slot] = from;
    this.#to[slot] = to;
    this.#lists.delete(slot);
    this.store.forget(this.keyOf(slot));
  }

  append(slot: number, id: number): void {
    if (!this.listOf(slot)) {
      const from = this.#from[slot]!;
      const to = this.#to[slot]!;
      // An empty range, or one id follows: still a range.
      if (from === to || to === id) {
        this.store.forget(this.keyOf(slot));
        if (from === to) this.#from[slot] = id;
        this.#to[slot] = id + 1;
        return;
      }
    }
    this.edit(slot).push(id);
  }

  /** edit: the slot's rules as a list, made one if they were a range. */
  edit(slot: number): number[] {
    this.store.forget(this.keyOf(slot));
    let list = this.#lists.get(slot);
    if (!list) {
      list = [...this.ids(slot)];
      this.#lists.set(slot, list);
    }
    return list;
  }

  #find(name: string): number {
    const mask = this.#index.length - 1;
    for (let i = hashName(name) & mask; ; i = (i + 1) & mask) {
      const e = this.#index[i]!;
      if (e === EMPTY_SLOT) return -1;
      if (e !== GONE_SLOT && this.#names[e - 1] === name) return e - 1;
    }
  }

  #insertIndex(slot: number): void {
    // At most half full: a miss ends at an empty entry soon. Rebuilt, the index drops its deleted entries.
    if (++this.#used * 2 > this.#index.length) {
      this.#index = new Int32Array(this.#size * 2 > this.#index.length ? this.#index.length * 2 : this.#index.length);
      this.#reindex();
      return;
    }
    this.#place(slot);
  }

  #reindex(): void {
    this.#index.fill(EMPTY_SLOT);
    this.#used = this.#size;
    for (let slot = 0; slot < this.#slots; slot++) if (this.#live[slot]) this.#place(slot);
  }

  /** #place puts slot in the first free index entry from its name's hash on. */
  #place(slot: number): void {
    const mask = this.#index.length - 1;
    let i = hashName(this.#names[slot]!) & mask;
    while (this.#index[i] !== EMPTY_SLOT) i = (i + 1) & mask;
    this.#index[i] = slot + 1;
  }

  #grow(): void {
    if (this.#slots <= this.#from.length) return;
    if (this.#slots > MAX_CHAINS) throw new RangeError(`more than ${MAX_CHAINS} chains in one table`);
    const n = this.#from.length * 2;
    const from = new Uint32Array(n);
    from.set(this.#from);
    const to = new Uint32Array(n);
    to.set(this.#to);
    const live = new Uint8Array(n);
    live.set(this.#live);
    this.#from = from;
    this.#to = to;
    this.#live = live;
  }
}

/**
 * StoredChain is a KernelChain whose rules live in a RuleStore: a view of one
 * slot of a ChainTable. Its rules are a range of rule ids while they were
 * stored together, a list once the chain was edited (an insert or a delete, a
 * rule appended after other chains' rules).
 */
export class StoredChain implements KernelChain {
  readonly #table: ChainTable;
  readonly #slot: number;

  constructor(table: ChainTable, slot: number) {
    this.#table = table;
    this.#slot = slot;
  }

  get name(): string {
    return this.#table.nameOf(this.#slot);
  }

  get builtin(): boolean {
    return this.#table.factsOf(this.#slot)?.builtin ?? false;
  }

  get policy(): string | null {
    return this.#table.factsOf(this.#slot)?.policy ?? null;
  }

  get packets(): number {
    return this.#table.factsOf(this.#slot)?.packets ?? 0;
  }

  get bytes(): number {
    return this.#table.factsOf(this.#slot)?.bytes ?? 0;
  }

  get ruleCount(): number {
    return this.#table.ruleCountOf(this.#slot);
  }

  get rules(): readonly KernelRule[] {
    return this.#table.store.rulesOf(this.#table.keyOf(this.#slot), this.ids(), this.ruleCount);
  }

  specAt(i: number): string {
    return this.#table.store.spec(this.idAt(i));
  }

  specsHash(): number {
    return this.#table.store.hashSpecs(this.ids());
  }

  /** edited: the chain's rules are a list, not a range of the store. */
  get edited(): boolean {
    return this.#table.listOf(this.#slot) !== undefined;
  }

  ids(): Iterable<number> {
    return this.#table.ids(this.#slot);
  }

  /** idAt: the id of the rule at index i. */
  idAt(i: number): number {
    return this.#table.idAt(this.#slot, i);
  }

  setRange(from: number, to: number): void {
    this.#table.setRange(this.#slot, from, to);
  }

  /** settle: the range and name RuleStore.compact gives the chain (the same name, another string). */
  settle(from: number, to: number, name: string): void {
    this.#table.settle(this.#slot, from, to, name);
  }

  /** append adds rule id at the end (a range grows when id follows it). */
  append(id: number): void {
    this.#table.append(this.#slot, id);
  }

  /** insert puts rule id at index i. */
  insert(i: number, id: number): void {
    this.#table.edit(this.#slot).splice(i, 0, id);
  }

  /** remove takes out the rule at index i. */
  remove(i: number): void {
    this.#table.edit(this.#slot).splice(i, 1);
  }

  /** flush empties the chain. */
  flush(): void {
    this.setRange(0, 0);
  }
}

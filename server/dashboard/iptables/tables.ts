import { IptablesParseError } from '../../errors.ts';
import { isBuiltinChain, ruleTarget, splitArgs, type ChainLine, type CommandLine } from '../../kernel/iptables-save-parser.ts';
import { PackedText } from '../../proxy/packed-text.ts';
import { kernelTables, type KernelChain, type KernelRule, type KernelTables } from '../kernel-view.ts';
import type { Yield } from '../yield.ts';
import { forEachIptablesEntry } from './chunks.ts';

interface MutableChain {
  name: string;
  builtin: boolean;
  policy: string | null;
  packets: number;
  bytes: number;
  rules: KernelRule[];
}

type MutableTables = Map<string, { name: string; chains: Map<string, MutableChain> }>;

function table(tables: MutableTables, name: string) {
  let t = tables.get(name);
  if (!t) {
    t = { name, chains: new Map() };
    tables.set(name, t);
  }
  return t;
}

function freeze(tables: MutableTables): KernelTables {
  return kernelTables(tables as unknown as ReadonlyMap<string, { name: string; chains: ReadonlyMap<string, KernelChain> }>);
}

/**
 * readSaveOutput turns `iptables-save -c` output into KernelTables: chains in
 * listing order with their counters, rules with counters and jump targets.
 */
export async function readSaveOutput(text: string, pause: Yield): Promise<KernelTables> {
  const tables: MutableTables = new Map();
  const intern = new Interner();
  await forEachIptablesEntry(
    text,
    (tableName, e) => {
      const t = table(tables, tableName);
      if (e.kind === 'chain') {
        t.chains.set(e.name, { name: e.name, builtin: isBuiltinChain(tableName, e.name), policy: e.policy, packets: e.packets, bytes: e.bytes, rules: [] });
        return;
      }
      if (e.op !== 'A') throw new IptablesParseError(`line ${e.line}: unexpected -${e.op} in iptables-save output`);
      const chain = t.chains.get(e.chain);
      if (!chain) throw new IptablesParseError(`iptables-save listed a rule for the undeclared chain ${tableName}/${e.chain}`);
      chain.rules.push({ spec: e.spec, target: intern.get(ruleTarget(e.args)), packets: e.counters?.packets ?? 0, bytes: e.counters?.bytes ?? 0 });
    },
    pause,
  );
  return freeze(tables);
}

/**
 * Interner keeps one copy of each jump target. The parser builds words a
 * character at a time (V8 cons strings of dozens of nodes each); 300,000 rules
 * naming a few thousand targets would otherwise keep hundreds of MB of them.
 * Looking a string up in a Map flattens it, and equal targets share one copy.
 */
class Interner {
  readonly #seen = new Map<string, string>();

  get(s: string | null): string | null {
    if (s === null) return null;
    const hit = this.#seen.get(s);
    if (hit !== undefined) return hit;
    this.#seen.set(s, s);
    return s;
  }
}

/**
 * IntendedIptables is what kproxy believes the kernel holds in its own
 * chains: the restore inputs of successful syncs applied in order, as
 * iptables-restore --noflush applies them (a declared chain is created or
 * flushed, -A appends, -I inserts at its position, -D removes the rule at
 * its position or the first identical one, -F flushes, -X deletes; chains
 * never declared are not kproxy's).
 *
 * The texts are the record; the parsed tables are a cache. A full sync
 * declares every chain kproxy owns, so its input becomes the base and the
 * record starts over; partial inputs follow it. Syncs pay nothing but a
 * reference. The tables are built only when the dashboard asks (tables())
 * and can be dropped again when nobody looks (release()): at 10,000 services
 * × 10 endpoints they take about 140 MB, the text about 34 MB, and the
 * base text is a PackedText: deflated in the background to a few MB, and the
 * very one the view offers as the last input when it came from a full sync.
 * When partial inputs pile up, compact() folds them into a new base text.
 */
export class IntendedIptables {
  #base: PackedText | null = null;
  readonly #partials: string[] = [];
  #partialBytes = 0;
  readonly #intern = new Interner();
  #tables: MutableTables | null = null;
  /** #applied: partial inputs folded into #tables after the base (-1: not even the base). */
  #applied = -1;
  /** #generation: bumped whenever the base changes, so an application in flight starts over. */
  #generation = 0;
  #applying: Promise<KernelTables> | null = null;
  #version = 0;
  #builtVersion = -1;
  #built: KernelTables | null = null;

  /** partialBytes: size of the partial inputs kept after the base (compact() folds them in). */
  get partialBytes(): number {
    return this.#partialBytes;
  }

  /** version: bumped by each accepted input. */
  get version(): number {
    return this.#version;
  }

  /** baseBytes: the base as kept (deflated or not); packedBase: it is deflated. */
  get baseBytes(): number {
    return this.#base?.heldBytes ?? 0;
  }

  get packedBase(): boolean {
    return this.#base?.isPacked ?? false;
  }

  /** packed resolves once the base in hand is deflated (or found too small to bother). */
  async packed(): Promise<void> {
    let base: PackedText | null;
    do {
      base = this.#base;
      await base?.packed();
    } while (base !== this.#base);
  }

  /** hasTables: the parsed tables are in memory (someone asked since the last release()). */
  get hasTables(): boolean {
    return this.#tables !== null;
  }

  /** cleared records that kproxy removed all its objects (the dashboard's cleanup). */
  cleared(): void {
    this.#rebase(new PackedText(''));
    this.#version++;
  }

  /**
   * accepted records an input the kernel accepted; a full one replaces
   * everything before it and is kept as packed, when given (the view's own
   * PackedText of it: one copy for both).
   */
  accepted(input: string, full: boolean, packed?: PackedText): void {
    if (full) this.#rebase(packed ?? new PackedText(input));
    else {
      // A partial input with no base before it (no full sync recorded yet) applies to empty tables.
      if (this.#base === null) this.#rebase(new PackedText(''));
      this.#partials.push(input);
      this.#partialBytes += input.length;
    }
    this.#version++;
  }

  /** #rebase starts the record over from base: the partial inputs and the parsed tables go. */
  #rebase(base: PackedText): void {
    this.#partials.length = 0;
    this.#partialBytes = 0;
    this.#dropTables();
    this.#generation++;
    this.#setBase(base);
  }

  /** #setBase keeps base as the record's start (deflated in the background when large). */
  #setBase(base: PackedText): void {
    this.#base = base;
  }

  #dropTables(): void {
    this.#tables = null;
    this.#applied = -1;
    this.#built = null;
    this.#builtVersion = -1;
  }

  /** tables applies what is pending and returns the result (null before any input). */
  tables(pause: Yield): Promise<KernelTables | null> {
    if (this.#version === 0) return Promise.resolve(null);
    if (this.#builtVersion === this.#version && this.#built) return Promise.resolve(this.#built);
    // One application at a time; a caller arriving meanwhile gets the same result.
    this.#applying ??= this.#apply(pause).finally(() => (this.#applying = null));
    return this.#applying;
  }

  /**
   * release drops the parsed tables; the texts stay, so the next tables()
   * builds them again. Returns false (and keeps them) while they are being built.
   */
  release(): boolean {
    if (this.#applying) return false;
    this.#dropTables();
    return true;
  }

  /**
   * compact folds the partial inputs into a new base text (what iptables-save
   * would list for kproxy's chains), so the record stays about the size of one
   * full input however many partial syncs ran. The tables stay parsed if they
   * were before (someone is looking), and are dropped otherwise.
   */
  async compact(pause: Yield): Promise<void> {
    if (this.#partials.length === 0) return;
    const keep = this.hasTables;
    // Wait for any application in flight; the next one, ours, also holds the slot while it writes the text.
    while (this.#applying) await this.#applying.catch(() => {});
    const job = (async (): Promise<KernelTables> => {
      const tables = await this.#apply(pause);
      const generation = this.#generation;
      const folded = this.#applied;
      const text = await formatTables(tables, pause);
      // A full input arrived meanwhile: it is the new base, this text is obsolete.
      if (generation === this.#generation) {
        this.#setBase(new PackedText(text));
        const rest = this.#partials.splice(0, folded);
        for (const input of rest) this.#partialBytes -= input.length;
        this.#applied = 0;
      }
      return tables;
    })();
    this.#applying = job.finally(() => (this.#applying = null));
    await this.#applying;
    if (!keep) this.release();
  }

  async #apply(pause: Yield): Promise<KernelTables> {
    for (;;) {
      const generation = this.#generation;
      const version = this.#version;
      if (!this.#tables) {
        this.#tables = new Map();
        this.#applied = -1;
      }
      const target = this.#tables;
      const apply = (input: string) => forEachIptablesEntry(input, (t, e) => applyEntry(target, t, e, this.#intern), pause);
      if (this.#applied < 0) {
        const base = this.#base ? await this.#base.text() : null;
        if (generation !== this.#generation) continue;
        if (base) await apply(base);
        if (generation !== this.#generation) continue;
        this.#applied = 0;
      }
      while (this.#applied < this.#partials.length && generation === this.#generation) {
        await apply(this.#partials[this.#applied]!);
        if (generation === this.#generation) this.#applied++;
      }
      // A full input replaced the base while we yielded: go again on the new one.
      if (generation !== this.#generation) continue;
      // No copy: the model only changes when a new input is applied, and every reader
      // checks the version it started with (KernelReader discards drift from a moving target).
      this.#built = freeze(target);
      this.#builtVersion = version;
      if (version === this.#version) return this.#built;
    }
  }
}

/** FORMAT_CHUNK: rules written between two yields. */
const FORMAT_CHUNK = 5000;

/**
 * formatTables writes tables as restore input that declares every chain and
 * appends its rules: applied to nothing, it gives the same tables back.
 */
export async function formatTables(tables: KernelTables, pause: Yield): Promise<string> {
  const parts: string[] = [];
  let n = 0;
  for (const [name, t] of tables.tables) {
    parts.push(`*${name}`);
    for (const c of t.chains.values()) parts.push(`:${c.name} ${c.policy ?? '-'} [0:0]`);
    for (const c of t.chains.values()) {
      for (const r of c.rules) {
        parts.push(r.spec === '' ? `-A ${c.name}` : `-A ${c.name} ${r.spec}`);
        if (++n % FORMAT_CHUNK === 0) await pause();
      }
    }
    parts.push('COMMIT');
  }
  parts.push('');
  return parts.join('\n');
}

function applyEntry(tables: MutableTables, tableName: string, e: ChainLine | CommandLine, intern: Interner): void {
  const t = table(tables, tableName);
  if (e.kind === 'chain') {
    // Declaring a chain in restore input creates it or, under --noflush, flushes it.
    t.chains.set(e.name, { name: e.name, builtin: isBuiltinChain(tableName, e.name), policy: e.policy, packets: 0, bytes: 0, rules: [] });
    return;
  }
  const chain = e.chain === '' ? undefined : t.chains.get(e.chain);
  switch (e.op) {
    case 'A':
      if (chain) chain.rules.push({ spec: e.spec, target: intern.get(ruleTarget(e.args)), packets: 0, bytes: 0 });
      break;
    case 'I':
      // "-I CHAIN [n] rule" puts the rule at position n (1 when omitted), as iptables does.
      if (chain) chain.rules.splice(Math.min(Math.max(e.position, 1), chain.rules.length + 1) - 1, 0, { spec: e.spec, target: intern.get(ruleTarget(e.args)), packets: 0, bytes: 0 });
      break;
    case 'D': {
      // "-D CHAIN n" removes rule n; "-D CHAIN rule" the first identical rule. The
      // input was accepted, so the rule existed; partial syncs edit the shared chains this way.
      if (!chain) break;
      const at = e.position > 0 ? e.position - 1 : findRule(chain.rules, e);
      if (at >= 0 && at < chain.rules.length) chain.rules.splice(at, 1);
      break;
    }
    case 'X':
      if (e.chain) t.chains.delete(e.chain);
      break;
    case 'F':
      if (chain) chain.rules = [];
      break;
    default:
      // kproxy's inputs declare chains, append, insert, delete rules and chains; anything else leaves the model as is.
      break;
  }
}

/**
 * findRule returns the index of the first rule identical to e's, or -1.
 * iptables compares the parsed rule, not its text: the same words quoted
 * differently are the same rule, so words are compared when the text differs.
 */
function findRule(rules: readonly KernelRule[], e: CommandLine): number {
  const exact = rules.findIndex((r) => r.spec === e.spec);
  if (exact >= 0) return exact;
  const want = e.args.join('\u0000');
  return rules.findIndex((r) => {
    try {
      return splitArgs(r.spec).join('\u0000') === want;
    } catch {
      return false; // unbalanced quotes: never written by kproxy, so not the rule asked for
    }
  });
}

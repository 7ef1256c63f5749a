import { IptablesParseError } from '../../errors.ts';
import { isBuiltinChain, ruleTarget, splitArgs, type CommandLine } from '../../kernel/iptables-save-parser.ts';
import { PackedText } from '../packed-text.ts';
import type { KernelTables } from '../kernel-view.ts';
import type { Yield } from '../yield.ts';
import { ChainTable, RuleStore, type StoredChain } from './rule-store.ts';
import { SCAN_LINES, scanIptablesText } from './scan.ts';

/** EDITED_CHAINS: chains kept as edited lists before the store is rewritten with each chain's rules together. */
const EDITED_CHAINS = 1000;

/**
 * IptablesModel is parsed iptables text: tables of chains in listing order,
 * their rules in a RuleStore (no object per rule until one is asked for).
 */
class IptablesModel {
  readonly store: RuleStore;
  readonly tables = new Map<string, { name: string; chains: ChainTable }>();

  constructor(expectedRules: number) {
    this.store = new RuleStore(expectedRules);
  }

  table(name: string) {
    let t = this.tables.get(name);
    if (!t) {
      t = { name, chains: new ChainTable(this.store) };
      this.tables.set(name, t);
    }
    return t;
  }

  /** declare creates a chain or, when it exists, replaces it with an empty one in the same place. */
  declare(table: string, name: string, policy: string | null, packets: number, bytes: number): void {
    this.table(table).chains.declare(name, { builtin: isBuiltinChain(table, name), policy, packets, bytes });
  }

  chain(table: string, name: string): StoredChain | undefined {
    return this.tables.get(table)?.chains.get(name);
  }

  /**
   * freeze counts the model as KernelTables; when edits left many chains as
   * lists, or many stored rules belong to no chain any more, the store is
   * first rewritten with each chain's rules together (in slices: see
   * RuleStore.compact). A full restore input of kproxy's leaves every service
   * chain a list (its rules come between its endpoints' chains' rules), so the
   * first build of what kproxy wrote always compacts.
   */
  async freeze(pause: Yield, compact = false): Promise<KernelTables> {
    let ruleCount = 0;
    let edited = 0;
    let chainCount = 0;
    // Counted from the columns: no chain view is made unless the store is compacted.
    for (const t of this.tables.values()) {
      const n = t.chains.counts();
      ruleCount += n.rules;
      edited += n.edited;
      chainCount += n.chains;
    }
    if (compact || edited > EDITED_CHAINS || this.store.count > ruleCount * 1.25 + 1024) {
      // One plain array of every chain (a generator over 130,000 chains took 35 ms of its own).
      const chains: StoredChain[] = [];
      for (const t of this.tables.values()) {
        for (const c of t.chains.chains()) chains.push(c);
        await pause();
      }
      await this.store.compact(chains, pause);
    }
    return { tables: this.tables, chainCount, ruleCount };
  }
}

/** LINES_PER_TURN: newlines counted between two turns (34 MB of text held the loop 66 ms in one piece). */
const LINES_PER_TURN = 50_000;

/** lineCount counts the rules of a text (its lines), to size a store once, pausing every LINES_PER_TURN lines. */
async function lineCount(text: string, pause: Yield): Promise<number> {
  let n = 0;
  for (let i = text.indexOf('\n'); i >= 0; i = text.indexOf('\n', i + 1)) if (++n % LINES_PER_TURN === 0) await pause();
  return n + 1;
}

/**
 * readSaveOutput turns `iptables-save -c` output into KernelTables: chains in
 * listing order with their counters, rules with counters and jump targets.
 */
export async function readSaveOutput(text: string, pause: Yield, yieldLines = SCAN_LINES): Promise<KernelTables> {
  const model = new IptablesModel(await lineCount(text, pause));
  const at = model.store.addText(text);
  await scanIptablesText(
    text,
    {
      chain: (table, name, policy, packets, bytes) => model.declare(table, name, policy, packets, bytes),
      append: (table, chainName, start, end, packets, bytes, target) => {
        const chain = model.chain(table, chainName);
        if (!chain) throw new IptablesParseError(`iptables-save listed a rule for the undeclared chain ${table}/${chainName}`);
        chain.append(model.store.add(at, start, end, packets, bytes, target));
      },
      command: (_table, e) => {
        throw new IptablesParseError(`line ${e.line}: unexpected -${e.op} in iptables-save output`);
      },
    },
    pause,
    yieldLines,
  );
  // Compacted: the specs alone are kept, not the listing with its counters and "-A CHAIN" on every line.
  return model.freeze(pause, true);
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
 * × 10 endpoints the text is about 34 MB, and the tables about 10 MB beside
 * it (a RuleStore: ranges of the texts, no object per rule); the
 * base text is a PackedText: deflated in the background to a few MB, and the
 * very one the view offers as the last input when it came from a full sync.
 * When partial inputs pile up, compact() folds them into a new base text.
 */
export class IntendedIptables {
  #base: PackedText | null = null;
  readonly #partials: string[] = [];
  #partialBytes = 0;
  #model: IptablesModel | null = null;
  /** #applied: partial inputs folded into #model after the base (-1: not even the base). */
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
    return this.#model !== null;
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
    this.#model = null;
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
      if (this.#applied < 0 || !this.#model) {
        const base = this.#base ? await this.#base.text() : null;
        if (generation !== this.#generation) continue;
        const lines = base ? await lineCount(base, pause) : 0;
        if (generation !== this.#generation) continue;
        this.#model = new IptablesModel(lines);
        this.#applied = -1;
        if (base) await applyInput(this.#model, base, pause);
        if (generation !== this.#generation) continue;
        this.#applied = 0;
      }
      const model = this.#model;
      while (this.#applied < this.#partials.length && generation === this.#generation) {
        await applyInput(model, this.#partials[this.#applied]!, pause);
        if (generation === this.#generation) this.#applied++;
      }
      // A full input replaced the base while we yielded: go again on the new one.
      if (generation !== this.#generation) continue;
      // No copy: the model only changes when a new input is applied, and every reader
      // checks the version it started with (KernelReader discards drift from a moving target).
      const built = await model.freeze(pause);
      // A full input replaced the base while the store was compacted: go again on the new one.
      if (generation !== this.#generation) continue;
      this.#built = built;
      this.#builtVersion = version;
      if (version === this.#version) return built;
    }
  }
}

/** applyInput applies restore input to model the way iptables-restore --noflush applies it. */
async function applyInput(model: IptablesModel, input: string, pause: Yield): Promise<void> {
  const at = model.store.addText(input);
  await scanIptablesText(
    input,
    {
      // Declaring a chain in restore input creates it or, under --noflush, flushes it.
      chain: (table, name, policy) => model.declare(table, name, policy, 0, 0),
      append: (table, chain, start, end, _packets, _bytes, target) => model.chain(table, chain)?.append(model.store.add(at, start, end, 0, 0, target)),
      command: (table, e) => applyCommand(model, table, e),
    },
    pause,
  );
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
    for (const c of t.chains.values()) {
      parts.push(`:${c.name} ${c.policy ?? '-'} [0:0]`);
      if (++n % FORMAT_CHUNK === 0) await pause();
    }
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

function applyCommand(model: IptablesModel, tableName: string, e: CommandLine): void {
  const t = model.table(tableName);
  const chain = e.chain === '' ? undefined : t.chains.get(e.chain);
  const store = model.store;
  switch (e.op) {
    case 'A':
      chain?.append(store.addSpec(e.spec, ruleTarget(e.args)));
      break;
    case 'I':
      // "-I CHAIN [n] rule" puts the rule at position n (1 when omitted), as iptables does.
      chain?.insert(Math.min(Math.max(e.position, 1), chain.ruleCount + 1) - 1, store.addSpec(e.spec, ruleTarget(e.args)));
      break;
    case 'D': {
      // "-D CHAIN n" removes rule n; "-D CHAIN rule" the first identical rule. The
      // input was accepted, so the rule existed; partial syncs edit the shared chains this way.
      if (!chain) break;
      const at = e.position > 0 ? e.position - 1 : findRule(store, chain, e);
      if (at >= 0 && at < chain.ruleCount) chain.remove(at);
      break;
    }
    case 'X':
      if (e.chain) t.chains.delete(e.chain);
      break;
    case 'F':
      chain?.flush();
      break;
    default:
      // kproxy's inputs declare chains, append, insert, delete rules and chains; anything else leaves the model as is.
      break;
  }
}

/**
 * findRule returns the index of the first rule of chain identical to e's, or -1.
 * iptables compares the parsed rule, not its text: the same words quoted
 * differently are the same rule, so words are compared when the text differs.
 */
function findRule(store: RuleStore, chain: StoredChain, e: CommandLine): number {
  const n = chain.ruleCount;
  for (let i = 0; i < n; i++) if (store.sameSpec(chain.idAt(i), e.spec)) return i;
  const want = e.args.join('\u0000');
  for (let i = 0; i < n; i++) {
    try {
      if (splitArgs(store.spec(chain.idAt(i))).join('\u0000') === want) return i;
    } catch {
      // unbalanced quotes: never written by kproxy, so not the rule asked for
    }
  }
  return -1;
}

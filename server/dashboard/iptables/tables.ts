import { IptablesParseError } from '../../errors.ts';
import { isBuiltinChain, ruleTarget, splitArgs, type ChainLine, type CommandLine } from '../../kernel/iptables-save-parser.ts';
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
 * A full sync declares every chain kproxy owns, so it starts over. Inputs are
 * kept as text and parsed only when the dashboard asks (intended()), so syncs
 * pay nothing but a reference.
 */
export class IntendedIptables {
  #pending: string[] = [];
  #pendingBytes = 0;
  readonly #intern = new Interner();
  #tables: MutableTables = new Map();
  #applying: Promise<KernelTables> | null = null;
  #version = 0;
  #builtVersion = -1;
  #built: KernelTables | null = null;

  /** pendingBytes: size of the inputs not applied yet (the caller applies them before they pile up). */
  get pendingBytes(): number {
    return this.#pendingBytes;
  }

  /** version: bumped by each accepted input. */
  get version(): number {
    return this.#version;
  }

  /** cleared records that kproxy removed all its objects (the dashboard's cleanup). */
  cleared(): void {
    this.#pending = [];
    this.#pendingBytes = 0;
    this.#tables = new Map();
    this.#built = null;
    this.#version++;
  }

  /** accepted records an input the kernel accepted; a full one replaces everything before it. */
  accepted(input: string, full: boolean): void {
    if (full) {
      this.#pending = [];
      this.#pendingBytes = 0;
      this.#tables = new Map();
      this.#built = null;
    }
    this.#pending.push(input);
    this.#pendingBytes += input.length;
    this.#version++;
  }

  /** tables applies what is pending and returns the result (null before any input). */
  async tables(pause: Yield): Promise<KernelTables | null> {
    if (this.#version === 0) return null;
    if (this.#builtVersion === this.#version && this.#built) return this.#built;
    // One application at a time; a caller arriving meanwhile gets the same result.
    this.#applying ??= this.#apply(pause).finally(() => (this.#applying = null));
    return this.#applying;
  }

  async #apply(pause: Yield): Promise<KernelTables> {
    for (;;) {
      const version = this.#version;
      const target = this.#tables;
      while (this.#pending.length > 0 && target === this.#tables) {
        const input = this.#pending.shift()!;
        this.#pendingBytes -= input.length;
        await forEachIptablesEntry(input, (t, e) => applyEntry(target, t, e, this.#intern), pause);
      }
      // A full input may have replaced the tables while we yielded: go again on the new ones.
      if (target !== this.#tables) continue;
      // No copy: the model only changes when a new input arrives, and every reader
      // checks the version it started with (KernelReader discards drift from a moving target).
      this.#built = freeze(target);
      this.#builtVersion = version;
      if (version === this.#version) return this.#built;
    }
  }
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

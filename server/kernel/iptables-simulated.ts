import { recordCall, UNBOUNDED, type CallLogLimits } from './call-log.ts';
import { CommandFailedError } from '../errors.ts';
import type { IPFamily } from '../net/ip.ts';
import { TableCounter, type IptablesCountRequest, type IptablesCounts, type IptablesTableCounts } from './iptables-counts.ts';
import { IptablesRestoreError, type IptablesFlavor, type IptablesRunner, type RestoreOptions, type SaveOptions } from './iptables.ts';
import {
  BUILTIN_CHAINS,
  formatIptablesSavePaced,
  makeRule,
  parseIptablesScriptPartial,
  splitArgs,
  type CommandLine,
  type IptablesChain,
  type IptablesDump,
  type IptablesRule,
  type IptablesTable,
  type TableBlock,
} from './iptables-save-parser.ts';

/**
 * Targets that are extensions rather than chains. A -j to any other name must
 * be an existing chain, as the kernel requires ("Couldn't load target").
 */
const EXTENSION_TARGETS = new Set([
  'ACCEPT',
  'DROP',
  'RETURN',
  'QUEUE',
  'REJECT',
  'DNAT',
  'SNAT',
  'MASQUERADE',
  'REDIRECT',
  'NETMAP',
  'MARK',
  'CONNMARK',
  'LOG',
  'NFLOG',
  'NFQUEUE',
  'NOTRACK',
  'CT',
  'TPROXY',
  'TCPMSS',
  'TOS',
  'TTL',
  'HL',
  'DSCP',
  'CLASSIFY',
  'CHECKSUM',
  'AUDIT',
  'SET',
  'TRACE',
  'SECMARK',
  'CONNSECMARK',
  'TEE',
  'SYNPROXY',
  'ECN',
  'IDLETIMER',
]);

/** The kernel's xt_comment keeps at most 255 characters. */
const MAX_COMMENT = 255;

const TABLE_ORDER = ['filter', 'nat', 'mangle', 'raw', 'security'];

interface Chain {
  name: string;
  builtin: boolean;
  policy: string | null;
  packets: number;
  bytes: number;
  rules: IptablesRule[];
}

interface Table {
  name: string;
  chains: Map<string, Chain>;
  /** refs counts the rules jumping to each chain (a referenced chain cannot be deleted). */
  refs: Map<string, number>;
}

class RuleError extends Error {}

function newTable(name: string): Table {
  const chains = new Map<string, Chain>();
  for (const c of BUILTIN_CHAINS[name] ?? []) chains.set(c, { name: c, builtin: true, policy: 'ACCEPT', packets: 0, bytes: 0, rules: [] });
  return { name, chains, refs: new Map() };
}

export interface SimulatedIptablesOptions {
  family?: IPFamily;
  flavor?: IptablesFlavor;
  hasRandomFully?: boolean;
  /** callLog: how much of the call history to keep (default: all; --dry-run daemons bound it). */
  callLog?: CallLogLimits;
}

/** SimulatedCall records one simulated process run, as the real runner would have spawned it. */
export interface SimulatedCall {
  readonly program: 'iptables' | 'iptables-save' | 'iptables-restore';
  readonly args: readonly string[];
  readonly input?: string;
}

/**
 * SimulatedIptables is an in-memory kernel behind the IptablesRunner interface. It
 * parses restore input with the shared parser and applies it like the kernel:
 * each table commits atomically at COMMIT (earlier tables stay committed when a
 * later one fails), --noflush keeps undeclared chains, a declared chain is
 * flushed, -X refuses referenced, non-empty or built-in chains, and -j needs an
 * existing chain unless it names a target extension. save() serves
 * iptables-save text with counters, which is what --dry-run shows.
 */
export class SimulatedIptables implements IptablesRunner {
  readonly family: IPFamily;
  readonly flavor: IptablesFlavor;
  readonly hasRandomFully: boolean;
  readonly #tables = new Map<string, Table>();
  /** calls lists the simulated process runs, oldest first (bounded by the callLog option). */
  readonly calls: SimulatedCall[] = [];
  readonly #callLog: CallLogLimits;
  /** restoreHook, when set, may return an error text to make the next restore fail before it applies. */
  restoreHook: ((input: string) => string | null) | null = null;

  constructor(opts: SimulatedIptablesOptions = {}) {
    this.family = opts.family ?? 'IPv4';
    this.flavor = opts.flavor ?? 'nft';
    this.hasRandomFully = opts.hasRandomFully ?? true;
    this.#callLog = opts.callLog ?? UNBOUNDED;
  }

  /** callsOf counts the recorded runs of one program. */
  callsOf(program: SimulatedCall['program']): SimulatedCall[] {
    return this.calls.filter((c) => c.program === program);
  }

  #table(name: string): Table {
    if (!BUILTIN_CHAINS[name]) throw new CommandFailedError(`iptables: can't initialize iptables table \`${name}': Table does not exist`);
    let t = this.#tables.get(name);
    if (!t) {
      t = newTable(name);
      this.#tables.set(name, t);
    }
    return t;
  }

  async restore(input: string, opts: RestoreOptions = {}): Promise<void> {
    const noflush = opts.noflush ?? true;
    const counters = opts.counters ?? true;
    recordCall(this.calls, { program: 'iptables-restore', args: [...(noflush ? ['--noflush'] : []), ...(counters ? ['--counters'] : [])], input }, this.#callLog);
    const injected = this.restoreHook?.(input) ?? null;
    if (injected !== null) throw new IptablesRestoreError(`iptables-restore failed: ${injected}`, [], injected);
    const { script, error } = parseIptablesScriptPartial(input);
    for (const block of script.tables) {
      if (error && block.commitLine > error.line) break;
      const working = this.#apply(block, noflush, counters);
      this.#tables.set(block.name, working);
    }
    if (error) throw new IptablesRestoreError(`iptables-restore: line ${error.line} failed: ${error.message}`, [error.line], error.message);
  }

  /** #apply runs one table block on a copy of the table and returns the copy (the commit). */
  #apply(block: TableBlock, noflush: boolean, counters: boolean): Table {
    const base = this.#tables.get(block.name) ?? newTable(block.name);
    const t: Table = noflush ? { name: base.name, chains: new Map(base.chains), refs: new Map(base.refs) } : newTable(block.name);
    if (!noflush) for (const c of base.chains.values()) if (c.builtin) t.chains.set(c.name, { ...c, rules: [], packets: 0, bytes: 0 });
    const owned = new Set<string>();
    const writable = (name: string): Chain => {
      const c = t.chains.get(name)!;
      if (owned.has(name)) return c;
      const copy = { ...c, rules: c.rules.slice() };
      t.chains.set(name, copy);
      owned.add(name);
      return copy;
    };
    for (const e of block.entries) {
      try {
        if (e.kind === 'chain') {
          const existing = t.chains.get(e.name);
          if (existing) flushInto(t, writable(e.name));
          else {
            t.chains.set(e.name, { name: e.name, builtin: false, policy: null, packets: 0, bytes: 0, rules: [] });
            owned.add(e.name);
          }
          const c = t.chains.get(e.name)!;
          if (c.builtin) {
            if (e.policy !== null) c.policy = e.policy;
            c.packets = counters ? e.packets : 0;
            c.bytes = counters ? e.bytes : 0;
          } else if (e.policy !== null) {
            throw new RuleError(`user-defined chain ${e.name} cannot have a policy`);
          }
          continue;
        }
        this.#command(t, e, writable, counters);
      } catch (err) {
        if (!(err instanceof RuleError)) throw err;
        throw new IptablesRestoreError(`iptables-restore: line ${e.line} failed: ${err.message}`, [e.line], err.message);
      }
    }
    return t;
  }

  #command(t: Table, e: CommandLine, writable: (name: string) => Chain, counters: boolean): void {
    const need = (name: string): Chain => {
      if (!t.chains.has(name)) throw new RuleError(`chain ${name} does not exist in table ${t.name}`);
      return writable(name);
    };
    switch (e.op) {
      case 'N':
        if (t.chains.has(e.chain)) throw new RuleError(`chain ${e.chain} already exists`);
        t.chains.set(e.chain, { name: e.chain, builtin: false, policy: null, packets: 0, bytes: 0, rules: [] });
        writable(e.chain);
        return;
      case 'F':
        for (const name of e.chain ? [e.chain] : [...t.chains.keys()]) flushInto(t, need(name));
        return;
      case 'X':
        for (const name of e.chain ? [e.chain] : [...t.chains.values()].filter((c) => !c.builtin).map((c) => c.name)) deleteChain(t, name);
        return;
      case 'Z':
        for (const name of e.chain ? [e.chain] : [...t.chains.keys()]) {
          const c = need(name);
          c.packets = c.bytes = 0;
          c.rules = c.rules.map((r) => ({ ...r, packets: 0, bytes: 0 }));
        }
        return;
      case 'P': {
        const c = need(e.chain);
        if (!c.builtin) throw new RuleError(`cannot set policy of user-defined chain ${e.chain}`);
        c.policy = e.args[0];
        return;
      }
      case 'A':
      case 'I': {
        const c = need(e.chain);
        const rule = checkedRule(t, e.chain, e.spec, e.args, counters ? e.counters : null);
        if (e.op === 'A') c.rules.push(rule);
        else {
          const at = e.position > 0 ? e.position - 1 : 0;
          if (at > c.rules.length) throw new RuleError(`index of insertion too big in chain ${e.chain}`);
          c.rules.splice(at, 0, rule);
        }
        addRef(t, rule.target, 1);
        return;
      }
      case 'D': {
        const c = need(e.chain);
        const idx = e.position > 0 ? e.position - 1 : findRule(c, e.args);
        if (idx < 0 || idx >= c.rules.length) throw new RuleError(`no such rule in chain ${e.chain}`);
        addRef(t, c.rules[idx].target, -1);
        c.rules.splice(idx, 1);
        return;
      }
      case 'R': {
        const c = need(e.chain);
        if (e.position > c.rules.length) throw new RuleError(`index of replacement too big in chain ${e.chain}`);
        const rule = checkedRule(t, e.chain, e.spec, e.args, counters ? e.counters : null);
        addRef(t, c.rules[e.position - 1].target, -1);
        c.rules[e.position - 1] = rule;
        addRef(t, rule.target, 1);
        return;
      }
      case 'C':
        throw new RuleError('-C is not allowed in restore input');
    }
  }

  async save(opts: SaveOptions = {}): Promise<string> {
    recordCall(this.calls, { program: 'iptables-save', args: [...(opts.table ? ['-t', opts.table] : []), ...(opts.counters ? ['-c'] : [])] }, this.#callLog);
    if (opts.table) this.#table(opts.table);
    // iptables-save is a process of its own on a real node: the --dry-run daemon must not wait on this one in its event loop.
    return formatIptablesSavePaced(this.dump(), { counters: opts.counters, tables: opts.table ? [opts.table] : undefined }, () => new Promise((r) => setImmediate(r)));
  }

  /**
   * countChains reads the counts of a verification as the real runner does:
   * with the nft flavour each chain's nf_tables use count (its rules plus the
   * rules jumping to it, what the netlink dump reads), with legacy its rules
   * (what iptables-legacy-save lists, one process).
   */
  async countChains<T>(ask: IptablesCountRequest<T>): Promise<IptablesCounts<T>> {
    const use = this.flavor === 'nft';
    if (!use) recordCall(this.calls, { program: 'iptables-save', args: [] }, this.#callLog);
    await ask.ready;
    const tables = new Map<string, IptablesTableCounts<T>>();
    for (const name of ask.tables) {
      const t = this.#tables.get(name);
      if (!t) continue;
      const counter = new TableCounter(name, ask.own);
      for (const c of t.chains.values()) {
        if (counter.chain(c.name, c.rules.length + (use ? (t.refs.get(c.name) ?? 0) : 0))) continue;
        for (const r of c.rules) if (r.target !== null && t.chains.has(r.target)) counter.jump(c.name, r.target);
      }
      tables.set(name, counter.result());
    }
    return { kind: use ? 'use' : 'rules', source: use ? 'netlink (simulated)' : 'iptables-save (simulated)', tables };
  }

  /**
   * dump returns the kernel state as a parsed listing: built-in chains first,
   * then user chains by name (iptables-legacy-save's order).
   */
  dump(): IptablesDump {
    const tables = new Map<string, IptablesTable>();
    for (const name of TABLE_ORDER) {
      const t = this.#tables.get(name);
      if (!t) continue;
      const builtins = [...t.chains.values()].filter((c) => c.builtin);
      const users = [...t.chains.values()].filter((c) => !c.builtin).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
      const chains = new Map<string, IptablesChain>();
      for (const c of [...builtins, ...users]) chains.set(c.name, { ...c, rules: c.rules.slice() });
      tables.set(name, { name, chains });
    }
    return { tables };
  }

  /** chains lists the chain names of a table (tests). */
  chains(table: string): string[] {
    return [...(this.#tables.get(table)?.chains.keys() ?? [])];
  }

  /** rules lists a chain's rule specs (tests). */
  rules(table: string, chain: string): string[] {
    return (
      this.#tables
        .get(table)
        ?.chains.get(chain)
        ?.rules.map((r) => r.spec) ?? []
    );
  }

  /** addCounters simulates traffic through a rule (the dashboard's counters in --dry-run demos). */
  addCounters(table: string, chain: string, index: number, packets: number, bytes: number): void {
    const rule = this.#tables.get(table)?.chains.get(chain)?.rules[index];
    if (!rule) throw new Error(`no rule ${index} in ${table}/${chain}`);
    const c = this.#tables.get(table)!.chains.get(chain)!;
    c.rules[index] = { ...rule, packets: rule.packets + packets, bytes: rule.bytes + bytes };
  }

  /** flushAll simulates someone running `iptables -F; iptables -X` on every table (tampering tests). */
  flushAll(): void {
    for (const name of [...this.#tables.keys()]) this.#tables.set(name, newTable(name));
  }

  // ------------------------------------------------------------- commands

  #cmd(op: string, table: string, chain: string, args: readonly string[] = []): Table {
    recordCall(this.calls, { program: 'iptables', args: [op, chain, '-t', table, ...args] }, this.#callLog);
    return this.#table(table);
  }

  async ensureChain(table: string, chain: string): Promise<boolean> {
    const t = this.#cmd('-N', table, chain);
    if (t.chains.has(chain)) return true;
    t.chains.set(chain, { name: chain, builtin: false, policy: null, packets: 0, bytes: 0, rules: [] });
    return false;
  }

  async chainExists(table: string, chain: string): Promise<boolean> {
    recordCall(this.calls, { program: 'iptables', args: ['-S', chain, '-t', table] }, this.#callLog);
    return this.#tables.get(table)?.chains.has(chain) ?? false;
  }

  async checkRule(table: string, chain: string, args: readonly string[]): Promise<boolean> {
    const t = this.#cmd('-C', table, chain, args);
    const c = t.chains.get(chain);
    return !!c && findRule(c, args) >= 0;
  }

  async insertRule(table: string, chain: string, args: readonly string[]): Promise<void> {
    const t = this.#cmd('-I', table, chain, args);
    const c = t.chains.get(chain);
    if (!c) throw new CommandFailedError(`iptables: chain ${chain} does not exist in table ${table}`);
    const rule = this.#commandRule(t, chain, args);
    c.rules = [rule, ...c.rules];
    addRef(t, rule.target, 1);
  }

  async deleteRule(table: string, chain: string, args: readonly string[]): Promise<boolean> {
    const t = this.#cmd('-D', table, chain, args);
    const c = t.chains.get(chain);
    const idx = c ? findRule(c, args) : -1;
    if (!c || idx < 0) return false;
    addRef(t, c.rules[idx].target, -1);
    c.rules = c.rules.filter((_, i) => i !== idx);
    return true;
  }

  async flushChain(table: string, chain: string): Promise<void> {
    const t = this.#cmd('-F', table, chain);
    const c = t.chains.get(chain);
    if (!c) throw new CommandFailedError(`iptables: chain ${chain} does not exist in table ${table}`);
    const copy = { ...c, rules: c.rules.slice() };
    t.chains.set(chain, copy);
    flushInto(t, copy);
  }

  async deleteChain(table: string, chain: string): Promise<void> {
    const t = this.#cmd('-X', table, chain);
    try {
      deleteChain(t, chain);
    } catch (err) {
      throw new CommandFailedError(`iptables -X ${chain} -t ${table}: ${(err as Error).message}`);
    }
  }

  #commandRule(t: Table, chain: string, args: readonly string[]): IptablesRule {
    const spec = args.map(quoteWord).join(' ');
    try {
      return checkedRule(t, chain, spec, args, null);
    } catch (err) {
      throw new CommandFailedError(`iptables: ${(err as Error).message}`);
    }
  }
}

/** quoteWord renders one argument the way a command line would carry it into a listing. */
function quoteWord(w: string): string {
  return /^[\w./:,!-]+$/.test(w) ? w : `"${w.replace(/(["\\])/g, '\\$1')}"`;
}

function checkedRule(t: Table, chain: string, spec: string, args: readonly string[], counters: { packets: number; bytes: number } | null): IptablesRule {
  const rule = makeRule(chain, spec, args, counters?.packets ?? 0, counters?.bytes ?? 0);
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if ((a === '-j' || a === '--jump' || a === '-g' || a === '--goto') && i + 1 >= args.length) throw new RuleError(`${a} needs a target`);
    if (a === '--comment' && (args[i + 1] ?? '').length > MAX_COMMENT) throw new RuleError(`comment may not exceed ${MAX_COMMENT} characters`);
  }
  const target = rule.target;
  if (target !== null && !EXTENSION_TARGETS.has(target) && !t.chains.has(target)) {
    throw new RuleError(`Couldn't load target \`${target}': No such file or directory`);
  }
  if (target !== null && t.chains.get(target)?.builtin) throw new RuleError(`cannot jump to built-in chain ${target}`);
  return rule;
}

function addRef(t: Table, target: string | null, delta: number): void {
  if (target === null || EXTENSION_TARGETS.has(target)) return;
  const n = (t.refs.get(target) ?? 0) + delta;
  if (n <= 0) t.refs.delete(target);
  else t.refs.set(target, n);
}

function flushInto(t: Table, c: Chain): void {
  for (const r of c.rules) addRef(t, r.target, -1);
  c.rules = [];
}

function deleteChain(t: Table, name: string): void {
  const c = t.chains.get(name);
  if (!c) throw new RuleError(`chain ${name} does not exist`);
  if (c.builtin) throw new RuleError(`cannot delete built-in chain ${name}`);
  if ((t.refs.get(name) ?? 0) > 0) throw new RuleError(`CHAIN_DEL failed (Device or resource busy): chain ${name} is referenced`);
  if (c.rules.length > 0) throw new RuleError(`CHAIN_DEL failed (Directory not empty): chain ${name} holds rules`);
  t.chains.delete(name);
}

/** findRule finds a rule by its words (quoting differences do not matter, as with iptables -C). */
function findRule(c: Chain, args: readonly string[]): number {
  const want = args.join('\u0000');
  return c.rules.findIndex((r) => r.args.join('\u0000') === want);
}

/** parseRuleArgs splits a rule text into words (tests). */
export function parseRuleArgs(spec: string): string[] {
  return splitArgs(spec);
}

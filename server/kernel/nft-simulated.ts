import { recordCall, UNBOUNDED, type CallLogLimits } from './call-log.ts';
import { nftErrorLines, nftErrorSummary, NftTransactionFailure, type NftRunner } from './nft.ts';
import { countsOf, type NftCountRequest, type NftTableCounts } from './nft-counts.ts';
import { formatTableDump, NftParseError, parseTransaction, type ParsedCommand } from './nft-script.ts';
import { sameBaseChain, type NftBaseChain, type NftChain, type NftElement, type NftFamily, type NftSet, type NftSetSpec, type NftTable } from './nft-types.ts';

/**
 * SimulatedNft is an nftables kernel in memory behind the NftRunner interface:
 * what --dry-run programs and what the unit tests run against. It applies
 * exactly the transaction text it is given, all or nothing, with the checks
 * the kernel and nft 1.0.6 make (measured with real nft in a namespace):
 *
 * - objects are used after they exist: a rule's chain, its jump/goto targets
 *   and @sets, an element's set and its verdict's chain;
 * - a chain still referenced by a rule or map element, or a set referenced by
 *   a rule, cannot be deleted ("Device or resource busy"); flushed rules and
 *   deleted elements release what they referenced at once, within the
 *   transaction (Linux 6.18; before 6.2 a map element's reference was seen
 *   late, which is why kproxy deletes stale chains a second later anyway);
 * - re-adding an element with another verdict fails ("File exists"); with the
 *   same verdict it is a no-op (its comment is not updated); re-adding a set
 *   of the same type takes the new timeout but keeps its comment, of another
 *   type fails;
 *   a base chain cannot change its type, hook or priority in place
 *   ("Operation not supported");
 * - element keys and verdicts must fit the set's type;
 * - at commit, dnat and masquerade must be reached only from nat chains and
 *   reject only from input, forward, output or prerouting hooks; jump loops fail.
 *
 * Rule text is checked word by word against the vocabulary kproxy writes, so
 * a misspelt keyword is a syntax error as with nft.
 */

/** RuleInfo is what the checks need of a rule, worked out once when it is added. */
interface RuleInfo {
  readonly chains: readonly string[];
  readonly sets: readonly string[];
  readonly nat: boolean;
  readonly reject: boolean;
}

interface SimChain {
  name: string;
  base: NftBaseChain | null;
  comment: string | null;
  rules: string[];
  infos: RuleInfo[];
}

interface SimSet {
  spec: NftSetSpec;
  elements: Map<string, NftElement>;
}

interface SimTable {
  family: NftFamily;
  name: string;
  comment: string | null;
  chains: Map<string, SimChain>;
  sets: Map<string, SimSet>;
  /** chainRefs / setRefs count rules and elements pointing at each name. */
  chainRefs: Map<string, number>;
  setRefs: Map<string, number>;
}

export interface SimulatedNftOptions {
  /** callLog: how much of the call history to keep (default: all; --dry-run daemons bound it). */
  callLog?: CallLogLimits;
}

/** SimulatedCall records one simulated `nft` run, as the real runner would have spawned it. */
export interface SimulatedCall {
  readonly args: readonly string[];
  readonly input?: string;
}

class TxError extends Error {}

const NAME_RE = /^[A-Za-z_.][A-Za-z0-9_./-]*$/;
const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
const IPV6 = /^[0-9a-f:]*:[0-9a-f:.]*$/i;

/** The words kproxy's rules are made of; anything else that is not a value is a syntax error. */
const KEYWORDS = new Set([
  'ip',
  'ip6',
  'daddr',
  'saddr',
  'meta',
  'l4proto',
  'th',
  'dport',
  'sport',
  'tcp',
  'udp',
  'sctp',
  'vmap',
  'numgen',
  'random',
  'mod',
  'jump',
  'goto',
  'return',
  'drop',
  'accept',
  'reject',
  'fib',
  'type',
  'local',
  'ct',
  'state',
  'new',
  'established',
  'related',
  'mark',
  'set',
  'and',
  'or',
  'xor',
  'masquerade',
  'fully-random',
  'update',
  'dnat',
  'to',
  'iif',
  'iifname',
  'comment',
  'counter',
  '.',
  '{',
  '}',
  ',',
  ':',
  '==',
  '!=',
]);

function tokens(rule: string): string[] {
  const out: string[] = [];
  const re = /"[^"]*"|[{},]|\S+/g;
  for (const m of rule.matchAll(re)) out.push(m[0]);
  return out;
}

function isValue(t: string): boolean {
  if (/^"[^"]*"$/.test(t)) return true;
  if (/^@[A-Za-z_.][A-Za-z0-9_./-]*$/.test(t)) return true;
  if (/^(0x[0-9a-f]+|\d+)$/i.test(t)) return true;
  const [addr, len] = t.split('/');
  if (len !== undefined && !/^\d{1,3}$/.test(len)) return false;
  const ip = (s: string) => IPV4.test(s) || IPV6.test(s);
  if (ip(addr)) return true;
  const range = addr.split('-');
  if (range.length === 2 && ip(range[0]) && ip(range[1]) && len === undefined) return true;
  // dnat to ip:port / [ip6]:port
  return /^(\d+\.\d+\.\d+\.\d+|\[[0-9a-f:.]+\]):\d+$/i.test(t);
}

/** ruleInfo checks a rule's words and returns the chains and sets it references and what it needs of its hook. */
function ruleInfo(rule: string): RuleInfo {
  const toks = tokens(rule);
  const chains: string[] = [];
  const sets: string[] = [];
  for (let i = 0; i < toks.length; i++) {
    const t = toks[i];
    if ((t === 'jump' || t === 'goto') && i + 1 < toks.length) {
      const target = toks[++i];
      if (!NAME_RE.test(target)) throw new TxError(`syntax error, unexpected ${target} after ${t}`);
      chains.push(target);
      continue;
    }
    if (t.startsWith('@')) {
      sets.push(t.slice(1));
      continue;
    }
    if (t === 'comment') {
      if (i + 1 >= toks.length || !/^"[^"]*"$/.test(toks[i + 1])) throw new TxError('syntax error, a comment needs a quoted string');
      checkComment(toks[i + 1].slice(1, -1));
      i++;
      continue;
    }
    if (KEYWORDS.has(t) || isValue(t)) continue;
    throw new TxError(`syntax error, unexpected ${t}`);
  }
  if (toks.length === 0) throw new TxError('syntax error, empty rule');
  return { chains, sets, nat: toks.includes('dnat') || toks.includes('masquerade'), reject: toks.includes('reject') };
}

function verdictTarget(value: string): string | null {
  const m = /^(?:goto|jump) (\S+)$/.exec(value);
  return m ? m[1] : null;
}

function checkKeyPart(part: string, type: string): boolean {
  switch (type) {
    case 'ipv4_addr':
      return IPV4.test(part);
    case 'ipv6_addr':
      return IPV6.test(part);
    case 'inet_proto':
      return part === 'tcp' || part === 'udp' || part === 'sctp';
    case 'inet_service':
      return /^\d+$/.test(part) && Number(part) <= 65535;
    default:
      return false;
  }
}

/** checkComment refuses, as nft 1.0.6 does while it parses, a comment of more than 128 bytes (NFTNL_UDATA_COMMENT_MAXLEN). */
function checkComment(comment: string | null | undefined): void {
  if (comment && Buffer.byteLength(comment) > 128) throw new TxError('comment too long, 128 characters maximum allowed');
}

const REJECT_HOOKS = new Set(['input', 'forward', 'output', 'prerouting']);
const KEY_TYPES = new Set(['ipv4_addr', 'ipv6_addr', 'inet_proto', 'inet_service']);

/**
 * SimulatedNft: see the file comment. listTable() returns what `nft -j list
 * table` would: chains, rules, sets with their elements (dynamic sets empty,
 * chain comments left out, as nft 1.0.6's JSON prints them).
 */
export class SimulatedNft implements NftRunner {
  readonly #tables = new Map<string, SimTable>();
  readonly calls: SimulatedCall[] = [];
  readonly #callLog: CallLogLimits;
  /** runHook, when set, may return an error text to make the next run fail before it applies. */
  runHook: ((transaction: string) => string | null) | null = null;

  constructor(opts: SimulatedNftOptions = {}) {
    this.#callLog = opts.callLog ?? UNBOUNDED;
  }

  /** transactions: the inputs of the recorded `nft -f -` runs, oldest first. */
  transactions(): string[] {
    return this.calls.filter((c) => c.input !== undefined && c.args[0] === '-f').map((c) => c.input!);
  }

  async run(transaction: string): Promise<void> {
    recordCall(this.calls, { args: ['-f', '-'], input: transaction }, this.#callLog);
    const injected = this.runHook?.(transaction) ?? null;
    if (injected !== null) throw new NftTransactionFailure(`nft -f refused the transaction (exit 1): ${nftErrorSummary(injected)}`, nftErrorLines(injected), injected);
    let commands: ParsedCommand[];
    try {
      commands = parseTransaction(transaction);
    } catch (err) {
      if (!(err instanceof NftParseError)) throw err;
      throw this.#failure(transaction, err.line, err.message);
    }
    const undo: (() => void)[] = [];
    const touched = { validate: false };
    let line = 0;
    try {
      for (const c of commands) {
        line = c.line;
        this.#apply(c, undo, touched);
      }
      line = 0;
      // Only added rules, verdicts and base chains can break a hook's constraints or make a loop.
      if (touched.validate) {
        for (const t of new Set(commands.map((c) => `${c.family} ${c.table}`))) {
          const table = this.#tables.get(t);
          if (table) this.#validate(table);
        }
      }
    } catch (err) {
      if (!(err instanceof TxError)) throw err;
      for (let i = undo.length - 1; i >= 0; i--) undo[i]();
      // The undo steps restore objects, not reference counts: count them again.
      for (const t of this.#tables.values()) this.#recount(t);
      throw this.#failure(transaction, line, err.message);
    }
  }

  #failure(transaction: string, line: number, message: string): NftTransactionFailure {
    const text = line > 0 ? (transaction.split('\n')[line - 1] ?? '') : '';
    const where = line > 0 ? `/dev/stdin:${line}:1-${text.length}: ` : '';
    const stderr = `${where}Error: ${message}\n${text}\n`;
    return new NftTransactionFailure(`nft -f refused the transaction (exit 1): ${message}`, line > 0 ? [line] : [], stderr);
  }

  #apply(c: ParsedCommand, undo: (() => void)[], touched: { validate: boolean }): void {
    const key = `${c.family} ${c.table}`;
    const op = c.op;
    checkComment('comment' in op ? op.comment : undefined);
    if (op.kind === 'set' && op.op === 'add') checkComment(op.spec.comment);
    if (op.kind === 'table') {
      const existing = this.#tables.get(key);
      if (op.op === 'add') {
        if (!existing) {
          this.#tables.set(key, { family: c.family, name: c.table, comment: op.comment ?? null, chains: new Map(), sets: new Map(), chainRefs: new Map(), setRefs: new Map() });
          undo.push(() => this.#tables.delete(key));
        }
        return;
      }
      if (!existing) throw new TxError('Could not process rule: No such file or directory');
      this.#tables.delete(key);
      undo.push(() => this.#tables.set(key, existing));
      return;
    }
    const t = this.#tables.get(key);
    if (!t) throw new TxError(`Could not process rule: No such file or directory (table ${key})`);
    switch (op.kind) {
      case 'chain': {
        const existing = t.chains.get(op.name);
        if (op.op === 'add') {
          if (!NAME_RE.test(op.name) || op.name.length > 256) throw new TxError(`syntax error, bad chain name ${op.name}`);
          if (existing) {
            if (op.base && !sameBaseChain(existing.base, op.base)) throw new TxError('Could not process rule: Operation not supported');
            return;
          }
          t.chains.set(op.name, { name: op.name, base: op.base ?? null, comment: op.comment ?? null, rules: [], infos: [] });
          if (op.base) touched.validate = true;
          undo.push(() => t.chains.delete(op.name));
          return;
        }
        if (!existing) throw new TxError('Could not process rule: No such file or directory');
        if (op.op === 'delete' && (t.chainRefs.get(op.name) ?? 0) > 0) throw new TxError('Could not process rule: Device or resource busy');
        const { rules, infos } = existing;
        existing.rules = [];
        existing.infos = [];
        for (const info of infos) this.#dropRefs(t, info);
        undo.push(() => {
          existing.rules = rules;
          existing.infos = infos;
        });
        if (op.op === 'delete') {
          t.chains.delete(op.name);
          undo.push(() => t.chains.set(op.name, existing));
        }
        return;
      }
      case 'set': {
        const existing = t.sets.get(op.op === 'add' ? op.spec.name : op.name);
        if (op.op === 'add') {
          const spec = op.spec;
          if (!NAME_RE.test(spec.name) || spec.name.length > 256) throw new TxError(`syntax error, bad set name ${spec.name}`);
          for (const part of spec.type.split(' . ')) if (!KEY_TYPES.has(part)) throw new TxError(`syntax error, unknown type ${part}`);
          if (existing) {
            if (existing.spec.map !== spec.map || existing.spec.type !== spec.type) throw new TxError('Could not process rule: File exists');
            const before = existing.spec;
            existing.spec = { ...before, timeoutSeconds: spec.timeoutSeconds };
            undo.push(() => (existing.spec = before));
            return;
          }
          t.sets.set(spec.name, { spec, elements: new Map() });
          undo.push(() => t.sets.delete(spec.name));
          return;
        }
        if (!existing || existing.spec.map !== op.map) throw new TxError('Could not process rule: No such file or directory');
        if (op.op === 'delete' && (t.setRefs.get(op.name) ?? 0) > 0) throw new TxError('Could not process rule: Device or resource busy');
        const elements = existing.elements;
        existing.elements = new Map();
        for (const e of elements.values()) this.#dropElementRef(t, e);
        undo.push(() => {
          existing.elements = elements;
          for (const e of elements.values()) this.#addElementRef(t, e);
        });
        if (op.op === 'delete') {
          t.sets.delete(op.name);
          undo.push(() => t.sets.set(op.name, existing));
        }
        return;
      }
      case 'rule': {
        const chain = t.chains.get(op.chain);
        if (!chain) throw new TxError('Could not process rule: No such file or directory');
        const refs = ruleInfo(op.rule);
        for (const c of refs.chains) {
          if (!t.chains.has(c)) throw new TxError(`Could not process rule: No such file or directory (chain ${c})`);
          if (t.chains.get(c)!.base) throw new TxError('Could not process rule: Operation not supported (jump to a base chain)');
        }
        for (const s of refs.sets) if (!t.sets.has(s)) throw new TxError(`Could not process rule: No such file or directory (set ${s})`);
        chain.rules.push(op.rule);
        chain.infos.push(refs);
        this.#countRefs(t, refs);
        touched.validate = true;
        undo.push(() => {
          chain.rules.pop();
          chain.infos.pop();
        });
        return;
      }
      case 'element': {
        const set = t.sets.get(op.set);
        if (!set) throw new TxError('Could not process rule: No such file or directory');
        if (op.op === 'delete') {
          const e = set.elements.get(op.key);
          if (!e) throw new TxError('Could not process rule: No such file or directory');
          set.elements.delete(op.key);
          this.#dropElementRef(t, e);
          undo.push(() => {
            set.elements.set(op.key, e);
            this.#addElementRef(t, e);
          });
          return;
        }
        const types = set.spec.type.split(' . ');
        const parts = op.key.split(' . ');
        if (parts.length !== types.length || parts.some((p, i) => !checkKeyPart(p, types[i]))) {
          throw new TxError(`datatype mismatch, expected ${set.spec.type}, got ${op.key}`);
        }
        const value = op.value ?? null;
        if (set.spec.map !== (value !== null)) throw new TxError(set.spec.map ? 'map elements need a verdict' : 'set elements have no value');
        if (value !== null) {
          const target = verdictTarget(value);
          if (target === null && !['drop', 'accept', 'return', 'continue'].includes(value)) throw new TxError(`syntax error, unexpected ${value}`);
          if (target !== null && !t.chains.has(target)) throw new TxError('Could not process rule: No such file or directory');
        }
        const existing = set.elements.get(op.key);
        if (existing) {
          if (existing.value !== value) throw new TxError('Could not process rule: File exists');
          return;
        }
        const e: NftElement = { key: op.key, value, comment: op.comment ?? null };
        set.elements.set(op.key, e);
        if (value !== null) touched.validate = true;
        this.#addElementRef(t, e);
        undo.push(() => {
          set.elements.delete(op.key);
          this.#dropElementRef(t, e);
        });
        return;
      }
    }
  }

  #countRefs(t: SimTable, refs: RuleInfo): void {
    for (const c of refs.chains) t.chainRefs.set(c, (t.chainRefs.get(c) ?? 0) + 1);
    for (const s of refs.sets) t.setRefs.set(s, (t.setRefs.get(s) ?? 0) + 1);
  }

  /** #dropRefs: a removed rule releases the chains and sets it referenced. */
  #dropRefs(t: SimTable, refs: RuleInfo): void {
    for (const s of refs.sets) t.setRefs.set(s, (t.setRefs.get(s) ?? 1) - 1);
    for (const c of refs.chains) t.chainRefs.set(c, (t.chainRefs.get(c) ?? 1) - 1);
  }

  #addElementRef(t: SimTable, e: NftElement): void {
    const target = e.value ? verdictTarget(e.value) : null;
    if (target) t.chainRefs.set(target, (t.chainRefs.get(target) ?? 0) + 1);
  }

  #dropElementRef(t: SimTable, e: NftElement): void {
    const target = e.value ? verdictTarget(e.value) : null;
    if (target) t.chainRefs.set(target, (t.chainRefs.get(target) ?? 1) - 1);
  }

  #recount(t: SimTable): void {
    t.chainRefs.clear();
    t.setRefs.clear();
    for (const c of t.chains.values()) for (const info of c.infos) this.#countRefs(t, info);
    for (const s of t.sets.values()) for (const e of s.elements.values()) this.#addElementRef(t, e);
  }

  /** #validate walks every base chain's reachable chains: statement/hook fit and no loops. */
  #validate(t: SimTable): void {
    const targets = (chain: SimChain): string[] => {
      const out: string[] = [];
      for (const refs of chain.infos) {
        out.push(...refs.chains);
        for (const s of refs.sets) {
          const set = t.sets.get(s);
          if (set?.spec.map) for (const e of set.elements.values()) if (e.value) out.push(verdictTarget(e.value) ?? '');
        }
      }
      return out.filter((x) => x !== '');
    };
    for (const base of t.chains.values()) {
      if (!base.base) continue;
      const { type, hook } = base.base;
      const onPath = new Set<string>();
      const done = new Set<string>();
      const visit = (c: SimChain): void => {
        if (onPath.has(c.name)) throw new TxError(`Could not process rule: Too many levels of symbolic links (loop through ${c.name})`);
        if (done.has(c.name)) return;
        onPath.add(c.name);
        for (const info of c.infos) {
          if (info.nat && type !== 'nat') throw new TxError(`Could not process rule: Operation not supported (dnat or masquerade in chain ${c.name}, reached from ${type} chain ${base.name})`);
          if (info.reject && !REJECT_HOOKS.has(hook)) throw new TxError(`Could not process rule: Operation not supported (reject in chain ${c.name}, reached from the ${hook} hook)`);
        }
        for (const n of targets(c)) {
          const next = t.chains.get(n);
          if (next) visit(next);
        }
        onPath.delete(c.name);
        done.add(c.name);
      };
      visit(base);
    }
  }

  async listTable(family: NftFamily, name: string): Promise<NftTable | null> {
    recordCall(this.calls, { args: ['-j', 'list', 'table', family, name] }, this.#callLog);
    return this.table(family, name);
  }

  /** countTable: the counts of the table as it is held (what the kernel's counters would say). */
  async countTable(family: NftFamily, name: string, ask: NftCountRequest): Promise<NftTableCounts | null> {
    const table = this.table(family, name);
    return table && countsOf(table, ask);
  }

  async deleteTable(family: NftFamily, name: string): Promise<boolean> {
    recordCall(this.calls, { args: ['delete', 'table', family, name] }, this.#callLog);
    if (!this.#tables.has(`${family} ${name}`)) return false;
    await this.run(`delete table ${family} ${name}\n`);
    return true;
  }

  /** tableNames lists every table as "family name" (what a test checks is left). */
  tableNames(): string[] {
    return [...this.#tables.values()].map((t) => `${t.family} ${t.name}`);
  }

  /** describe writes every table as `nft -f` input (what --dry-run prints). */
  async describe(): Promise<string> {
    const out: string[] = [];
    for (const t of this.#tables.values()) out.push(formatTableDump(this.table(t.family, t.name)!, t.comment ?? undefined));
    return out.join('\n') || '# (no nftables tables)\n';
  }

  /** table returns a copy of a table as a listing shows it, or null. */
  table(family: NftFamily, name: string): NftTable | null {
    const t = this.#tables.get(`${family} ${name}`);
    if (!t) return null;
    const chains = new Map<string, NftChain>();
    for (const c of t.chains.values()) chains.set(c.name, { name: c.name, base: c.base, comment: null, rules: [...c.rules] });
    const sets = new Map<string, NftSet>();
    for (const s of t.sets.values()) {
      const dynamic = (s.spec.flags ?? []).includes('dynamic');
      sets.set(s.spec.name, {
        name: s.spec.name,
        map: s.spec.map,
        type: s.spec.type,
        flags: (s.spec.flags ?? []).filter((f) => f !== 'dynamic').sort(),
        timeoutSeconds: s.spec.timeoutSeconds ?? null,
        comment: s.spec.comment ?? null,
        elements: dynamic ? new Map() : new Map(s.elements),
      });
    }
    return { family, name, chains, sets };
  }
}

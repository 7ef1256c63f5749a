import { IptablesParseError } from '../errors.ts';

/**
 * The one reader of iptables text in kproxy. iptables-save output and
 * iptables-restore input share a format (tables opened by "*name", chain lines
 * ":NAME POLICY [packets:bytes]", rule commands, "COMMIT"), so the same parser
 * serves the simulated kernel (restore input), stale-chain collection and take-over
 * (save output), cleanup, and the dashboard (save output with counters).
 * Arguments are split the way iptables-restore splits them: double quotes group
 * words, a backslash escapes the next character inside quotes.
 */

/** IptablesSyntaxError is a parse failure at a 1-based line of the input. */
export class IptablesSyntaxError extends IptablesParseError {
  readonly line: number;
  constructor(line: number, message: string) {
    super(`line ${line}: ${message}`);
    this.line = line;
  }
}

/** The tables iptables knows, with their built-in chains in iptables-save order. */
export const BUILTIN_CHAINS: Readonly<Record<string, readonly string[]>> = {
  filter: ['INPUT', 'FORWARD', 'OUTPUT'],
  nat: ['PREROUTING', 'INPUT', 'OUTPUT', 'POSTROUTING'],
  mangle: ['PREROUTING', 'INPUT', 'FORWARD', 'OUTPUT', 'POSTROUTING'],
  raw: ['PREROUTING', 'OUTPUT'],
  security: ['INPUT', 'FORWARD', 'OUTPUT'],
};

export function isBuiltinChain(table: string, chain: string): boolean {
  return BUILTIN_CHAINS[table]?.includes(chain) ?? false;
}

// ---------------------------------------------------------------- script form

/** ChainLine declares (and, under --noflush, flushes) a chain: ":NAME POLICY [p:b]". */
export interface ChainLine {
  readonly kind: 'chain';
  readonly line: number;
  readonly name: string;
  /** policy: ACCEPT/DROP for built-in chains, null for user chains ("-"). */
  readonly policy: string | null;
  readonly packets: number;
  readonly bytes: number;
}

export type CommandOp = 'A' | 'I' | 'D' | 'R' | 'N' | 'X' | 'F' | 'Z' | 'P' | 'C';

/** CommandLine is one rule or chain command inside a table block. */
export interface CommandLine {
  readonly kind: 'command';
  readonly line: number;
  readonly op: CommandOp;
  /** chain: "" for -X/-F/-Z without a chain (all chains). */
  readonly chain: string;
  /** args: the words after the chain (and after a position number for -I/-R/-D n). */
  readonly args: readonly string[];
  /** spec: args as written in the input (quotes kept), for -A/-I/-D/-R/-C. */
  readonly spec: string;
  /** position: rule number for -I n / -R n / -D n; 0 when none was given. */
  readonly position: number;
  /** counters: a "[p:b]" prefix, when the line had one. */
  readonly counters: { readonly packets: number; readonly bytes: number } | null;
}

/** TableBlock is "*table" ... "COMMIT". */
export interface TableBlock {
  readonly name: string;
  readonly line: number;
  readonly entries: readonly (ChainLine | CommandLine)[];
  /** commitLine: the line of COMMIT (0 if the input ended without one). */
  readonly commitLine: number;
}

export interface IptablesScript {
  readonly tables: readonly TableBlock[];
  readonly lineCount: number;
}

const LONG_OPS: Record<string, CommandOp> = {
  '--append': 'A',
  '--insert': 'I',
  '--delete': 'D',
  '--replace': 'R',
  '--new-chain': 'N',
  '--delete-chain': 'X',
  '--flush': 'F',
  '--zero': 'Z',
  '--policy': 'P',
  '--check': 'C',
};

const CHAIN_NAME = /^[^\s!"'\\]{1,28}$/;

/**
 * splitArgs splits one line's arguments as iptables-restore does. Throws a
 * plain Error (the caller adds the line number) on an unterminated quote.
 */
export function splitArgs(text: string): string[] {
  // Words are sliced out of the text, not built a character at a time: the
  // dashboard splits every rule of a big node's listing (330,000 of them).
  const out: string[] = [];
  const n = text.length;
  let i = 0;
  while (i < n) {
    if (isSpace(text.charCodeAt(i))) {
      i++;
      continue;
    }
    // A word: plain characters up to a space or a quote.
    const start = i;
    while (i < n) {
      const c = text.charCodeAt(i);
      if (isSpace(c) || c === QUOTE) break;
      i++;
    }
    if (i >= n || text.charCodeAt(i) !== QUOTE) {
      out.push(text.slice(start, i));
      continue;
    }
    // A quote: the word so far, then the quoted text (a backslash takes the
    // next character as it is); the closing quote ends the word, even an empty one ("").
    let word = text.slice(start, i++);
    let from = i;
    for (;;) {
      if (i >= n) throw new Error('unterminated quote');
      const c = text.charCodeAt(i);
      if (c === QUOTE) break;
      if (c === BACKSLASH && i + 1 < n) {
        word += text.slice(from, i) + text[i + 1];
        i += 2;
        from = i;
      } else {
        i++;
      }
    }
    out.push(word + text.slice(from, i++));
  }
  return out;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0d || c === 0x0a;
}

function parseCounters(text: string): { packets: number; bytes: number } | null {
  const m = /^\[(\d+):(\d+)\]$/.exec(text);
  return m ? { packets: Number(m[1]), bytes: Number(m[2]) } : null;
}

/** parseIptablesScript parses restore input or save output into table blocks; throws IptablesSyntaxError. */
export function parseIptablesScript(text: string, opts: ScriptOptions = {}): IptablesScript {
  const res = parseIptablesScriptPartial(text, opts);
  if (res.error) throw res.error;
  return res.script;
}

/**
 * parseIptablesScriptPartial parses up to the first error and returns the
 * complete table blocks before it with the error, the way iptables-restore
 * commits the tables it finished before it meets a bad line.
 */
export function parseIptablesScriptPartial(text: string, opts: ScriptOptions = {}): { script: IptablesScript; error: IptablesSyntaxError | null } {
  const tables: TableBlock[] = [];
  try {
    return { script: parseInto(text, tables, opts), error: null };
  } catch (err) {
    if (!(err instanceof IptablesSyntaxError)) throw err;
    return { script: { tables, lineCount: err.line }, error: err };
  }
}

export interface ScriptOptions {
  /**
   * keepRule, when given, decides which -A rules are kept (the others are
   * checked no further than their chain name). Reading a 400k-rule listing
   * for chain names and a few built-in chains is then a quick scan.
   */
  keepRule?: (table: string, chain: string) => boolean;
}

function parseInto(text: string, tables: TableBlock[], opts: ScriptOptions): IptablesScript {
  const keepRule = opts.keepRule;
  let cur: { name: string; line: number; entries: (ChainLine | CommandLine)[] } | null = null;
  let lineNo = 0;
  let start = 0;
  while (start <= text.length) {
    let end = text.indexOf('\n', start);
    if (end < 0) end = text.length;
    const raw = text.slice(start, end);
    start = end + 1;
    lineNo++;
    if (end === text.length && raw === '') break;
    const line = raw.trim();
    if (line === '' || line[0] === '#') continue;
    const fail = (msg: string): never => {
      throw new IptablesSyntaxError(lineNo, msg);
    };
    if (line[0] === '*') {
      if (cur) fail(`table "${line.slice(1)}" opened before COMMIT of table "${cur.name}"`);
      const name = line.slice(1).trim();
      if (!BUILTIN_CHAINS[name]) fail(`unknown table "${name}"`);
      cur = { name, line: lineNo, entries: [] };
      continue;
    }
    if (line === 'COMMIT') {
      if (!cur) fail('COMMIT outside of a table');
      tables.push({ name: cur!.name, line: cur!.line, entries: cur!.entries, commitLine: lineNo });
      cur = null;
      continue;
    }
    if (!cur) fail('rule or chain line outside of a table (missing "*table")');
    const block = cur!;
    if (line[0] === ':') {
      const parts = line.slice(1).split(/\s+/);
      const [name, policy, counters] = parts;
      if (!name || !CHAIN_NAME.test(name)) fail(`bad chain name "${name ?? ''}"`);
      if (policy === undefined) fail(`chain line for ${name} has no policy`);
      let packets = 0;
      let bytes = 0;
      if (counters !== undefined) {
        const c = parseCounters(counters);
        if (!c) fail(`bad counters "${counters}" on chain ${name}`);
        packets = c!.packets;
        bytes = c!.bytes;
      }
      block.entries.push({ kind: 'chain', line: lineNo, name, policy: policy === '-' ? null : policy!, packets, bytes });
      continue;
    }
    if (keepRule && line.startsWith('-A ')) {
      // Fast path for skipped rules: only the chain name is looked at.
      const end = line.indexOf(' ', 3);
      if (!keepRule(block.name, end < 0 ? line.slice(3) : line.slice(3, end))) continue;
    }
    let rest = line;
    let counters: { packets: number; bytes: number } | null = null;
    if (rest[0] === '[') {
      const close = rest.indexOf(']');
      counters = close > 0 ? parseCounters(rest.slice(0, close + 1)) : null;
      if (!counters) fail('bad "[packets:bytes]" prefix');
      rest = rest.slice(close + 1).trimStart();
    }
    const opMatch = /^(-[AIDRNXFZPC]|--[a-z-]+)(?:\s+|$)/.exec(rest);
    if (!opMatch) fail(`unknown command "${rest.split(/\s/)[0]}"`);
    const opWord = opMatch![1];
    const op = opWord.length === 2 ? (opWord[1] as CommandOp) : LONG_OPS[opWord];
    if (!op) fail(`unknown command "${opWord}"`);
    rest = rest.slice(opMatch![0].length);
    const chainMatch = /^(\S+)(?:\s+|$)/.exec(rest);
    const chain = chainMatch ? chainMatch[1] : '';
    if (chain === '' && op !== 'X' && op !== 'F' && op !== 'Z') fail(`${opWord} needs a chain name`);
    if (chain !== '' && !CHAIN_NAME.test(chain)) fail(`bad chain name "${chain}"`);
    if (op === 'A' && keepRule && !keepRule(block.name, chain)) continue;
    let spec = chainMatch ? rest.slice(chainMatch[0].length) : '';
    let position = 0;
    if (op === 'I' || op === 'R' || op === 'D') {
      const pos = /^(\d+)(?:\s+|$)/.exec(spec);
      if (pos) {
        position = Number(pos[1]);
        spec = spec.slice(pos[0].length);
      }
    }
    let args: string[];
    try {
      args = splitArgs(spec);
    } catch (err) {
      return fail((err as Error).message);
    }
    // "-A CHAIN" with no match and no target is a valid (counting) rule: kube-proxy
    // writes one at the end of each KUBE-FW- chain.
    if ((op === 'N' || op === 'X' || op === 'F' || op === 'Z') && args.length > 0) fail(`${opWord} takes only a chain name`);
    if (op === 'P' && args.length !== 1) fail('-P needs a chain and a policy');
    if (op === 'R' && position === 0) fail('-R needs a rule number');
    block.entries.push({ kind: 'command', line: lineNo, op, chain, args, spec: spec.trim(), position, counters });
  }
  if (cur) throw new IptablesSyntaxError(lineNo, `table "${cur.name}" has no COMMIT`);
  return { tables, lineCount: lineNo };
}

// ---------------------------------------------------------------- dump form

/** IptablesRule is one rule as iptables-save lists it. */
export interface IptablesRule {
  readonly chain: string;
  /** spec: the rule after "-A CHAIN ", as listed. */
  readonly spec: string;
  readonly args: readonly string[];
  /** target: the -j/-g argument, or null for a rule without one. */
  readonly target: string | null;
  /** comment: the -m comment text, or null. */
  readonly comment: string | null;
  readonly packets: number;
  readonly bytes: number;
}

/** IptablesChain is one chain with its policy, counters and rules. */
export interface IptablesChain {
  readonly name: string;
  readonly builtin: boolean;
  /** policy: ACCEPT/DROP for built-in chains, null for user chains. */
  readonly policy: string | null;
  readonly packets: number;
  readonly bytes: number;
  readonly rules: readonly IptablesRule[];
}

/** IptablesTable holds chains in listing order. */
export interface IptablesTable {
  readonly name: string;
  readonly chains: ReadonlyMap<string, IptablesChain>;
}

/** IptablesDump is a parsed iptables-save listing. */
export interface IptablesDump {
  readonly tables: ReadonlyMap<string, IptablesTable>;
}

/** ruleTarget returns the -j/--jump/-g/--goto argument of a rule's words. */
export function ruleTarget(args: readonly string[]): string | null {
  for (let i = args.length - 2; i >= 0; i--) {
    const a = args[i];
    if (a === '-j' || a === '--jump' || a === '-g' || a === '--goto') return args[i + 1];
  }
  return null;
}

/** ruleComment returns the text of a rule's "-m comment --comment" match. */
export function ruleComment(args: readonly string[]): string | null {
  const i = args.indexOf('--comment');
  return i >= 0 && i + 1 < args.length ? args[i + 1] : null;
}

/** makeRule builds an IptablesRule from its chain, spec and counters. */
export function makeRule(chain: string, spec: string, args: readonly string[], packets = 0, bytes = 0): IptablesRule {
  return { chain, spec, args, target: ruleTarget(args), comment: ruleComment(args), packets, bytes };
}

/**
 * parseIptablesSave reads iptables-save output (with or without -c). Only
 * chain lines and -A rules are expected; anything else is a parse error.
 * opts.keepRule keeps only some rules (every chain is always listed).
 */
export function parseIptablesSave(text: string, opts: ScriptOptions = {}): IptablesDump {
  const script = parseIptablesScript(text, opts);
  const tables = new Map<string, IptablesTable>();
  for (const block of script.tables) {
    const chains = new Map<string, { name: string; builtin: boolean; policy: string | null; packets: number; bytes: number; rules: IptablesRule[] }>();
    for (const e of block.entries) {
      if (e.kind === 'chain') {
        chains.set(e.name, { name: e.name, builtin: isBuiltinChain(block.name, e.name), policy: e.policy, packets: e.packets, bytes: e.bytes, rules: [] });
        continue;
      }
      if (e.op !== 'A') throw new IptablesSyntaxError(e.line, `unexpected -${e.op} in iptables-save output`);
      const chain = chains.get(e.chain);
      if (!chain) throw new IptablesSyntaxError(e.line, `rule for undeclared chain ${e.chain}`);
      chain.rules.push(makeRule(e.chain, e.spec, e.args, e.counters?.packets ?? 0, e.counters?.bytes ?? 0));
    }
    tables.set(block.name, { name: block.name, chains });
  }
  return { tables };
}

/** chainNames returns the chains of one table of a dump (empty when the table is absent). */
export function chainNames(dump: IptablesDump, table: string): Set<string> {
  return new Set(dump.tables.get(table)?.chains.keys() ?? []);
}

/** countRules counts the rules of each table of a dump. */
export function countRules(dump: IptablesDump): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, t] of dump.tables) {
    let n = 0;
    for (const c of t.chains.values()) n += c.rules.length;
    out[name] = n;
  }
  return out;
}

export interface FormatOptions {
  /** counters: prefix rules with "[packets:bytes]" as iptables-save -c does. */
  counters?: boolean;
  /** tables: only these tables, in this order (default: the dump's order). */
  tables?: readonly string[];
}

/** saveLines yields a dump's lines in iptables-save format (without the timestamp comments). */
function* saveLines(dump: IptablesDump, opts: FormatOptions): Generator<string> {
  for (const name of opts.tables ?? [...dump.tables.keys()]) {
    const t = dump.tables.get(name);
    if (!t) continue;
    yield `*${name}`;
    for (const c of t.chains.values()) yield `:${c.name} ${c.policy ?? '-'} [${c.packets}:${c.bytes}]`;
    for (const c of t.chains.values()) {
      for (const r of c.rules) {
        const rule = r.spec === '' ? `-A ${c.name}` : `-A ${c.name} ${r.spec}`;
        yield opts.counters ? `[${r.packets}:${r.bytes}] ${rule}` : rule;
      }
    }
    yield 'COMMIT';
  }
}

/** formatIptablesSave prints a dump in iptables-save format (without the timestamp comments). */
export function formatIptablesSave(dump: IptablesDump, opts: FormatOptions = {}): string {
  const out = [...saveLines(dump, opts)];
  return out.length ? out.join('\n') + '\n' : '';
}

/**
 * formatIptablesSavePaced is formatIptablesSave for big listings: it calls
 * pause every `every` lines, so a caller sharing an event loop with other work
 * (the daemon's --dry-run kernel, which stands in for a separate process) does
 * not hold it for the whole listing.
 */
export async function formatIptablesSavePaced(dump: IptablesDump, opts: FormatOptions, pause: () => Promise<void>, every = 20_000): Promise<string> {
  // Joined a chunk at a time: one join of 400,000 lines would be one long stop too.
  const pieces: string[] = [];
  let out: string[] = [];
  for (const line of saveLines(dump, opts)) {
    out.push(line);
    if (out.length === every) {
      pieces.push(out.join('\n'));
      out = [];
      await pause();
    }
  }
  if (out.length) pieces.push(out.join('\n'));
  return pieces.length ? pieces.join('\n') + '\n' : '';
}

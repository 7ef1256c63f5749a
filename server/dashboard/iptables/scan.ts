import { BUILTIN_CHAINS, IptablesSyntaxError, parseIptablesScript, ruleTarget, splitArgs, type CommandLine } from '../../kernel/iptables-save-parser.ts';
import type { Yield } from '../yield.ts';

/** SCAN_LINES: lines read between two yields (about 5 ms of work; a busy node's probes wait no longer). */
export const SCAN_LINES = 2_000;

/**
 * IptablesTextSink receives what scanIptablesText reads. Rules appended with
 * "-A" arrive as a range of the text (the spec, as written) with their
 * counters and jump target; every other command arrives parsed by the shared
 * parser (kernel/iptables-save-parser.ts).
 */
export interface IptablesTextSink {
  chain(table: string, name: string, policy: string | null, packets: number, bytes: number, line: number): void;
  append(table: string, chain: string, start: number, end: number, packets: number, bytes: number, target: string | null, line: number): void;
  command(table: string, entry: CommandLine): void;
}

const SPACE = 32;
const TAB = 9;
const CR = 13;
const QUOTE = 34;
const BACKSLASH = 92;
const BANG = 33;
const APOSTROPHE = 39;
const OPEN = 91; // [
const CLOSE = 93; // ]
const COLON = 58;
const ZERO = 48;
const NINE = 57;

const isSpace = (c: number) => c === SPACE || c === TAB || c === CR || c === 11 || c === 12;

/**
 * scanIptablesText reads iptables-save output or restore input without
 * building an object per line: at 10,000 Services a listing is 400,000 lines,
 * and the general parser's words, arrays and entries for each (hundreds of MB
 * allocated, then collected) were most of a read's cost and of the daemon's
 * memory while a dashboard looked. Chain lines and "-A" rules are read in
 * place; the rare other commands go through the shared parser, one line at a
 * time, so both accept and refuse the same text. It yields every yieldLines
 * lines; errors are IptablesParseError naming the line.
 */
export async function scanIptablesText(text: string, sink: IptablesTextSink, pause: Yield, yieldLines = SCAN_LINES): Promise<void> {
  let table = '';
  let lineNo = 0;
  let lastChain = '';
  let pos = 0;
  const fail = (msg: string): never => {
    throw new IptablesSyntaxError(lineNo, msg);
  };
  while (pos < text.length) {
    let end = text.indexOf('\n', pos);
    if (end < 0) end = text.length;
    let s = pos;
    let e = end;
    pos = end + 1;
    lineNo++;
    if (lineNo % yieldLines === 0) await pause();
    while (s < e && isSpace(text.charCodeAt(s))) s++;
    while (e > s && isSpace(text.charCodeAt(e - 1))) e--;
    if (s === e) continue;
    const first = text.charCodeAt(s);
    if (first === 35 /* # */) continue;
    if (first === 42 /* * */) {
      table = text.slice(s + 1, e).trim();
      if (!BUILTIN_CHAINS[table]) fail(`unknown table "${table}"`);
      continue;
    }
    if (e - s === 6 && text.startsWith('COMMIT', s)) {
      table = '';
      continue;
    }
    if (table === '') fail('rule or chain line outside of a table (missing "*table")');
    if (first === COLON) {
      const nameEnd = wordEnd(text, s + 1, e);
      const name = text.slice(s + 1, nameEnd);
      if (!validChainName(text, s + 1, nameEnd)) fail(`bad chain name "${name}"`);
      const policyStart = skipSpace(text, nameEnd, e);
      const policyEnd = wordEnd(text, policyStart, e);
      if (policyStart === policyEnd) fail(`chain line for ${name} has no policy`);
      const policy = text.slice(policyStart, policyEnd);
      const countersStart = skipSpace(text, policyEnd, e);
      let packets = 0;
      let bytes = 0;
      if (countersStart < e) {
        const countersEnd = wordEnd(text, countersStart, e);
        const c = countersEnd === e || skipSpace(text, countersEnd, e) === e ? readCounters(text, countersStart, countersEnd) : null;
        if (!c) fail(`bad counters "${text.slice(countersStart, wordEnd(text, countersStart, e))}" on chain ${name}`);
        packets = c!.packets;
        bytes = c!.bytes;
      }
      sink.chain(table, name, policy === '-' ? null : policy, packets, bytes, lineNo);
      continue;
    }
    let at = s;
    let packets = 0;
    let bytes = 0;
    if (first === OPEN) {
      const close = text.indexOf(']', s);
      const c = close > 0 && close < e ? readCounters(text, s, close + 1) : null;
      if (!c) fail('bad "[packets:bytes]" prefix');
      packets = c!.packets;
      bytes = c!.bytes;
      at = skipSpace(text, close + 1, e);
    }
    if (text.charCodeAt(at) === 45 /* - */ && text.charCodeAt(at + 1) === 65 /* A */ && at + 2 < e && isSpace(text.charCodeAt(at + 2))) {
      const chainStart = skipSpace(text, at + 2, e);
      const chainEnd = wordEnd(text, chainStart, e);
      if (chainStart === chainEnd) fail('-A needs a chain name');
      if (!validChainName(text, chainStart, chainEnd)) fail(`bad chain name "${text.slice(chainStart, chainEnd)}"`);
      // Rules of one chain come together: most lines name the chain of the line before.
      if (!(lastChain.length === chainEnd - chainStart && text.startsWith(lastChain, chainStart))) lastChain = text.slice(chainStart, chainEnd);
      const specStart = skipSpace(text, chainEnd, e);
      const target = targetOf(text, specStart, e);
      if (target === UNTERMINATED) fail('unterminated quote');
      sink.append(table, lastChain, specStart, e, packets, bytes, target as string | null, lineNo);
      continue;
    }
    // Any other command: the shared parser reads it (and refuses what it refuses).
    let script;
    try {
      script = parseIptablesScript(`*${table}\n${text.slice(s, e)}\nCOMMIT\n`);
    } catch (err) {
      if (err instanceof IptablesSyntaxError) throw new IptablesSyntaxError(lineNo, err.message.replace(/^line \d+: /, ''));
      throw err;
    }
    for (const block of script.tables) for (const entry of block.entries) if (entry.kind === 'command') sink.command(table, { ...entry, line: lineNo });
  }
}

const UNTERMINATED = Symbol('unterminated');

function skipSpace(text: string, i: number, e: number): number {
  while (i < e && isSpace(text.charCodeAt(i))) i++;
  return i;
}

function wordEnd(text: string, i: number, e: number): number {
  while (i < e && !isSpace(text.charCodeAt(i))) i++;
  return i;
}

/** validChainName: text[s, e) is a chain name iptables accepts (1–28 characters, no space, quote, "!" or backslash). */
function validChainName(text: string, s: number, e: number): boolean {
  if (e - s < 1 || e - s > 28) return false;
  for (let i = s; i < e; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE || c === APOSTROPHE || c === BANG || c === BACKSLASH) return false;
  }
  return true;
}

/** readCounters reads "[packets:bytes]" at text[s, e), or null. */
function readCounters(text: string, s: number, e: number): { packets: number; bytes: number } | null {
  if (text.charCodeAt(s) !== OPEN || text.charCodeAt(e - 1) !== CLOSE) return null;
  let i = s + 1;
  let packets = 0;
  const p0 = i;
  for (let c = text.charCodeAt(i); c >= ZERO && c <= NINE; c = text.charCodeAt(++i)) packets = packets * 10 + (c - ZERO);
  if (i === p0 || text.charCodeAt(i) !== COLON) return null;
  const b0 = ++i;
  let bytes = 0;
  for (let c = text.charCodeAt(i); c >= ZERO && c <= NINE; c = text.charCodeAt(++i)) bytes = bytes * 10 + (c - ZERO);
  if (i === b0 || i !== e - 1) return null;
  return { packets, bytes };
}

/**
 * targetOf finds a rule's jump target in text[s, e) as ruleTarget does (the
 * word after the last -j, --jump, -g or --goto), splitting words as
 * splitArgs does without building them: double quotes group words and a
 * closing quote ends one. A quoted target is left to splitArgs.
 */
function targetOf(text: string, s: number, e: number): string | null | typeof UNTERMINATED {
  let i = s;
  let afterJump = false;
  let found = -1;
  let foundEnd = -1;
  let foundQuoted = false;
  for (;;) {
    i = skipSpace(text, i, e);
    if (i >= e) break;
    const ws = i;
    let quoted = false;
    while (i < e) {
      const c = text.charCodeAt(i);
      if (c === QUOTE) {
        quoted = true;
        i++;
        while (i < e && text.charCodeAt(i) !== QUOTE) i += text.charCodeAt(i) === BACKSLASH && i + 1 < e ? 2 : 1;
        if (i >= e) return UNTERMINATED;
        i++;
        break;
      }
      if (isSpace(c)) break;
      i++;
    }
    if (afterJump) {
      found = ws;
      foundEnd = i;
      foundQuoted = quoted;
    }
    // A quoted word is a jump word when its value is one ("-j" in quotes), as splitArgs sees it.
    afterJump = quoted ? i - ws <= 16 && JUMP_WORDS.has(splitArgs(text.slice(ws, i))[0] ?? '') : isJumpWord(text, ws, i);
  }
  if (found < 0) return null;
  if (foundQuoted) return ruleTarget(splitArgs(text.slice(s, e)));
  return text.slice(found, foundEnd);
}

const JUMP_WORDS = new Set(['-j', '--jump', '-g', '--goto']);

function isJumpWord(text: string, s: number, e: number): boolean {
  const n = e - s;
  if (n === 2) return text.charCodeAt(s) === 45 && (text.charCodeAt(s + 1) === 106 /* j */ || text.charCodeAt(s + 1) === 103); /* g */
  if (n === 6) return text.startsWith('--jump', s) || text.startsWith('--goto', s);
  return false;
}

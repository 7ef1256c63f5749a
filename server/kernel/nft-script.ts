import type { NftBaseChain, NftChainType, NftFamily, NftHook, NftOp, NftSetSpec } from './nft-types.ts';

/**
 * The text of an `nft -f` transaction: formatTransaction writes kproxy's ops
 * one command per line (as kube-proxy's knftables does), parseTransaction
 * reads that text back into ops for the simulated kernel. Only the commands
 * kproxy writes are understood; anything else is a parse error naming the line.
 */

/** quote writes an nft string literal; kproxy's comments never hold a quote or a newline. */
export function quote(text: string): string {
  if (/["\n\\]/.test(text)) throw new Error(`nft string ${JSON.stringify(text)} holds a quote, backslash or newline`);
  return `"${text}"`;
}

function setBody(spec: NftSetSpec): string {
  const parts = [`type ${spec.type}${spec.map ? ' : verdict' : ''}`];
  if (spec.flags?.length) parts.push(`flags ${spec.flags.join(',')}`);
  if (spec.timeoutSeconds !== undefined) parts.push(`timeout ${spec.timeoutSeconds}s`);
  if (spec.comment !== undefined) parts.push(`comment ${quote(spec.comment)}`);
  return `{ ${parts.map((p) => p + ' ;').join(' ')} }`;
}

function chainBody(base: NftBaseChain | undefined, comment: string | undefined): string {
  const parts: string[] = [];
  if (base) parts.push(`type ${base.type} hook ${base.hook} priority ${base.priority}`);
  if (comment !== undefined) parts.push(`comment ${quote(comment)}`);
  return parts.length ? ` { ${parts.map((p) => p + ' ;').join(' ')} }` : '';
}

/** formatOp writes one command for table `family name`. */
export function formatOp(family: NftFamily, table: string, op: NftOp): string {
  const t = `${family} ${table}`;
  switch (op.kind) {
    case 'table':
      return op.op === 'add' ? `add table ${t}${op.comment !== undefined ? ` { comment ${quote(op.comment)} ; }` : ''}` : `delete table ${t}`;
    case 'chain':
      if (op.op === 'add') return `add chain ${t} ${op.name}${chainBody(op.base, op.comment)}`;
      return `${op.op} chain ${t} ${op.name}`;
    case 'set':
      if (op.op === 'add') return `add ${op.spec.map ? 'map' : 'set'} ${t} ${op.spec.name} ${setBody(op.spec)}`;
      return `${op.op} ${op.map ? 'map' : 'set'} ${t} ${op.name}`;
    case 'rule':
      return `add rule ${t} ${op.chain} ${op.rule}`;
    case 'element': {
      if (op.op === 'delete') return `delete element ${t} ${op.set} { ${op.key} }`;
      const comment = op.comment ? ` comment ${quote(op.comment)}` : '';
      const value = op.value ? ` : ${op.value}` : '';
      return `add element ${t} ${op.set} { ${op.key}${comment}${value} }`;
    }
  }
}

/** formatTransaction writes a whole transaction, one command per line, ending in a newline (or "" for none). */
export function formatTransaction(family: NftFamily, table: string, ops: readonly NftOp[]): string {
  if (ops.length === 0) return '';
  const lines = new Array<string>(ops.length);
  for (let i = 0; i < ops.length; i++) lines[i] = formatOp(family, table, ops[i]);
  return lines.join('\n') + '\n';
}

/** ParsedCommand is one parsed line: the op, for which table, and its 1-based line number. */
export interface ParsedCommand {
  readonly line: number;
  readonly family: NftFamily;
  readonly table: string;
  readonly op: NftOp;
}

/** NftParseError names the line nft would have refused (line is 1-based). */
export class NftParseError extends Error {
  readonly line: number;
  constructor(line: number, message: string) {
    super(message);
    this.line = line;
  }
}

const NAME = '[A-Za-z_.][A-Za-z0-9_./-]*';
const HEAD = new RegExp(`^(add|flush|delete) (table|chain|set|map|rule|element) (ip|ip6) (${NAME})(?: (.*))?$`);
const CHAIN_DEF = /^\{ (?:type (filter|nat|route) hook (prerouting|input|forward|output|postrouting) priority (-?\d+) ;)? ?(?:comment "([^"]*)" ;)? ?\}$/;
const SET_DEF = /^\{ type ([a-z0-9_ .]+?)( : verdict)? ;(?: flags ([a-z,]+) ;)?(?: timeout (\d+)s ;)?(?: comment "([^"]*)" ;)? \}$/;
const ELEMENT = /^\{ (.+?)(?: comment "([^"]*)")?(?: : (.+))? \}$/;
const TABLE_DEF = /^\{ comment "([^"]*)" ; \}$/;

function splitName(rest: string | undefined): [string, string | undefined] {
  if (!rest) return ['', undefined];
  const m = new RegExp(`^(${NAME})(?: (.*))?$`).exec(rest);
  return m ? [m[1], m[2]] : ['', rest];
}

/**
 * parseTransaction reads `nft -f` text of the commands formatTransaction
 * writes. Blank lines and "#" comments are skipped. It throws NftParseError
 * at the first line it does not understand, as nft refuses a whole file that
 * does not parse.
 */
export function parseTransaction(text: string): ParsedCommand[] {
  const out: ParsedCommand[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i].trim();
    const line = i + 1;
    if (raw === '' || raw.startsWith('#')) continue;
    const m = HEAD.exec(raw);
    if (!m) throw new NftParseError(line, `syntax error: ${raw.slice(0, 80)}`);
    const [, verb, kind, family, first, rest] = m;
    const bad = (why: string): never => {
      throw new NftParseError(line, `syntax error, ${why}: ${raw.slice(0, 120)}`);
    };
    const push = (table: string, op: NftOp) => out.push({ line, family: family as NftFamily, table, op });
    if (kind === 'table') {
      if (verb === 'add') {
        if (rest !== undefined && !TABLE_DEF.test(rest)) bad('unexpected table body');
        push(first, { op: 'add', kind: 'table', ...(rest ? { comment: TABLE_DEF.exec(rest)![1] } : {}) });
      } else if (verb === 'delete' && rest === undefined) push(first, { op: 'delete', kind: 'table' });
      else bad(`"${verb} table" is not supported`);
      continue;
    }
    const table = first;
    const [name, tail] = splitName(rest);
    if (name === '') bad(`expected a ${kind} name`);
    switch (kind) {
      case 'chain': {
        if (verb !== 'add') {
          if (tail !== undefined) bad('unexpected text after the chain name');
          push(table, { op: verb as 'flush' | 'delete', kind: 'chain', name });
          break;
        }
        if (tail === undefined) {
          push(table, { op: 'add', kind: 'chain', name });
          break;
        }
        const d = CHAIN_DEF.exec(tail);
        if (!d) bad('unexpected chain body');
        const base = d![1] ? { type: d![1] as NftChainType, hook: d![2] as NftHook, priority: Number(d![3]) } : undefined;
        push(table, { op: 'add', kind: 'chain', name, ...(base ? { base } : {}), ...(d![4] !== undefined ? { comment: d![4] } : {}) });
        break;
      }
      case 'set':
      case 'map': {
        const map = kind === 'map';
        if (verb !== 'add') {
          if (tail !== undefined) bad(`unexpected text after the ${kind} name`);
          push(table, { op: verb as 'flush' | 'delete', kind: 'set', name, map });
          break;
        }
        const d = tail === undefined ? null : SET_DEF.exec(tail);
        if (!d) bad(`expected a ${kind} body "{ type … ; }"`);
        if (map !== (d![2] !== undefined)) bad(map ? 'a map needs "type … : verdict"' : 'a set has no data type');
        const spec: NftSetSpec = {
          name,
          map,
          type: d![1],
          ...(d![3] ? { flags: d![3].split(',') } : {}),
          ...(d![4] ? { timeoutSeconds: Number(d![4]) } : {}),
          ...(d![5] !== undefined ? { comment: d![5] } : {}),
        };
        push(table, { op: 'add', kind: 'set', spec });
        break;
      }
      case 'rule':
        if (verb !== 'add') bad(`"${verb} rule" is not supported`);
        if (!tail) bad('empty rule');
        push(table, { op: 'add', kind: 'rule', chain: name, rule: tail! });
        break;
      case 'element': {
        const e = tail === undefined ? null : ELEMENT.exec(tail);
        if (!e) bad('expected "{ element }"');
        if (verb === 'add') push(table, { op: 'add', kind: 'element', set: name, key: e![1], value: e![3] ?? null, comment: e![2] ?? null });
        else if (verb === 'delete') {
          if (e![2] !== undefined || e![3] !== undefined) bad('a deleted element is named by its key only');
          push(table, { op: 'delete', kind: 'element', set: name, map: false, key: e![1] });
        } else bad('"flush element" is not supported');
        break;
      }
    }
  }
  return out;
}

/**
 * formatTableDump writes a table as `nft -f` input that re-creates it, in a
 * fixed order (chains, then sets and maps, then each chain's rules, then each
 * set's elements, names sorted): what --dry-run prints and the golden files hold.
 */
export function formatTableDump(t: import('./nft-types.ts').NftTable, comment?: string): string {
  const ops: NftOp[] = [{ op: 'add', kind: 'table', ...(comment !== undefined ? { comment } : {}) }];
  const byName = <T extends { name: string }>(xs: Iterable<T>) => [...xs].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const chains = byName(t.chains.values());
  const sets = byName(t.sets.values());
  for (const c of chains) ops.push({ op: 'add', kind: 'chain', name: c.name, ...(c.base ? { base: c.base } : {}), ...(c.comment !== null ? { comment: c.comment } : {}) });
  for (const s of sets) {
    const spec: NftSetSpec = {
      name: s.name,
      map: s.map,
      type: s.type,
      ...(s.flags.length ? { flags: s.flags } : {}),
      ...(s.timeoutSeconds !== null ? { timeoutSeconds: s.timeoutSeconds } : {}),
      ...(s.comment !== null ? { comment: s.comment } : {}),
    };
    ops.push({ op: 'add', kind: 'set', spec });
  }
  for (const c of chains) for (const rule of c.rules) ops.push({ op: 'add', kind: 'rule', chain: c.name, rule });
  for (const s of sets) {
    const keys = [...s.elements.keys()].sort();
    for (const k of keys) {
      const e = s.elements.get(k)!;
      ops.push({ op: 'add', kind: 'element', set: s.name, key: e.key, value: e.value, comment: e.comment });
    }
  }
  return formatTransaction(t.family, t.name, ops);
}

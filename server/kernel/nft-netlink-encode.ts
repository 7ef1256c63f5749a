import { NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END, NFNL_SUBSYS_NFTABLES, NlBuilder, NLM_F_APPEND, NLM_F_CREATE, NLM_F_REQUEST } from './nfnl.ts';
import {
  NF_ACCEPT,
  NF_DROP,
  NFT_GOTO,
  NFT_JUMP,
  NFT_RETURN,
  NFT_SET_ELEM_INTERVAL_END,
  NFT_SET_EVAL,
  NFT_SET_MAP,
  NFT_SET_TIMEOUT,
  writeExpr,
  writeValue,
  writeVerdict,
  type Verdict,
} from './nft-netlink-expr.ts';
import { commentBytes, compileRule, concatBytes, NftCompileError, udataTLV, type AnonSet } from './nft-netlink-rules.ts';
import { encodeKey, inferKeyType, setKeyType, type AddrFamily, type SetKeyType } from './nft-netlink-values.ts';
import type { ParsedCommand } from './nft-script.ts';
import { NFT_HOOKS, type NftBaseChain, type NftSetSpec } from './nft-types.ts';

/**
 * encodeTransaction turns a parsed `nft -f` transaction (nft-script.ts) into
 * one nf_tables netlink batch: NFNL_MSG_BATCH_BEGIN, one message per command
 * (plus the anonymous sets a rule binds, before it), NFNL_MSG_BATCH_END. The
 * messages are the ones nft 1.0.6 sends for the same text, byte for byte on a
 * table loaded from nothing (the unit tier compares them with batches
 * captured from nft); the kernel applies the batch atomically, as it does
 * nft's. Every message's sequence number maps back to its line, so the
 * kernel's refusals name lines as nft's do.
 */

export const NFT_MSG_NEWTABLE = 0;
export const NFT_MSG_GETTABLE = 1;
export const NFT_MSG_DELTABLE = 2;
export const NFT_MSG_NEWCHAIN = 3;
export const NFT_MSG_GETCHAIN = 4;
export const NFT_MSG_DELCHAIN = 5;
export const NFT_MSG_NEWRULE = 6;
export const NFT_MSG_GETRULE = 7;
export const NFT_MSG_DELRULE = 8;
export const NFT_MSG_NEWSET = 9;
export const NFT_MSG_GETSET = 10;
export const NFT_MSG_DELSET = 11;
export const NFT_MSG_NEWSETELEM = 12;
export const NFT_MSG_GETSETELEM = 13;
export const NFT_MSG_DELSETELEM = 14;
export const NFT_MSG_GETGEN = 16;

export const NFPROTO = { ip: 2, ip6: 10 } as const;

const NFT_DATA_VERDICT = 0xffffff00;
const EXPR_CONCAT = 13;

/** msgType: an nf_tables message type on the wire. */
export const msgType = (t: number) => (NFNL_SUBSYS_NFTABLES << 8) | t;

export interface EncodeOptions {
  /** ifindex resolves `iif NAME` (nft does it when it reads the rule; the interface must exist). */
  ifindex(name: string): number;
  /**
   * anonName names anonymous sets explicitly instead of nft's "__map%d"; with
   * it their elements name the set by id alone. See nft-netlink.ts for why.
   */
  anonName?(kind: 'set' | 'map', id: number): string;
  /**
   * packElements: consecutive `add element` commands for one set go in one
   * message (nft sends one each), up to about this many bytes of elements: one
   * set lookup in the kernel per message instead of per element. A refusal
   * then names the first line of the message.
   */
  packElements?: number;
  /**
   * context: what the whole transaction defines when this batch is one phase
   * of it (nft-netlink-phases.ts): the types of sets made by an earlier phase,
   * and the sets its rules update from the packet path.
   */
  context?: TransactionContext;
}

/**
 * ByTable keeps values by table and name. Two levels, not "family table
 * name" strings: a first sync looks names up hundreds of thousands of times,
 * and a name kept as it was parsed hashes once.
 */
export class ByTable<V> {
  readonly #tables = new Map<string, Map<string, V>>();
  #table(family: string, table: string, create: boolean): Map<string, V> | undefined {
    const k = family === 'ip' ? table : `${family} ${table}`;
    let m = this.#tables.get(k);
    if (!m && create) this.#tables.set(k, (m = new Map()));
    return m;
  }
  get(family: string, table: string, name: string): V | undefined {
    return this.#table(family, table, false)?.get(name);
  }
  set(family: string, table: string, name: string, v: V): void {
    this.#table(family, table, true)!.set(name, v);
  }
  has(family: string, table: string, name: string): boolean {
    return this.#table(family, table, false)?.has(name) ?? false;
  }
}

/** TransactionContext: set definitions and dynamically updated sets of a transaction. */
export interface TransactionContext {
  readonly sets: ByTable<NftSetSpec>;
  readonly dynamic: ByTable<true>;
}

export interface EncodedBatch {
  readonly bytes: Buffer;
  /** lineOfSeq[seq]: the transaction line of the message with that sequence number (0: the batch's own begin and end). */
  readonly lineOfSeq: readonly number[];
  readonly commands: number;
}

/** parseVerdict reads a map element's value or a verdict word: "goto X", "jump X", "drop", "accept", "return". */
export function parseVerdict(text: string): Verdict {
  const m = /^(jump|goto) (\S+)$/.exec(text);
  if (m) return { code: m[1] === 'jump' ? NFT_JUMP : NFT_GOTO, chain: m[2] };
  if (text === 'drop') return { code: NF_DROP };
  if (text === 'accept') return { code: NF_ACCEPT };
  if (text === 'return') return { code: NFT_RETURN };
  throw new NftCompileError(`unsupported verdict "${text}"`);
}

const u32le = (n: number) => {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n >>> 0, true);
  return b;
};

/** setFlags: the kernel's flags for what kproxy's sets say ("dynamic" is NFT_SET_EVAL). */
function setFlags(spec: NftSetSpec): number {
  let f = spec.map ? NFT_SET_MAP : 0;
  for (const flag of spec.flags ?? []) {
    if (flag === 'timeout') f |= NFT_SET_TIMEOUT;
    else if (flag === 'dynamic') f |= NFT_SET_EVAL;
    else throw new NftCompileError(`unsupported set flag "${flag}"`);
  }
  return f;
}

/**
 * setUserdata: what nft 1.0.6 records in a named set's user data for
 * `type …` (so `nft list` prints the type back): the key's byte order (big
 * endian for an address, none for a concatenation), for a concatenation a
 * typeof entry naming it, for a map the data's byte order and interval
 * flag, and the comment.
 */
function setUserdata(spec: NftSetSpec, key: SetKeyType): Uint8Array {
  const concat = key.parts.length > 1;
  if (!concat && key.parts[0] !== 'ipv4_addr' && key.parts[0] !== 'ipv6_addr') throw new NftCompileError(`unsupported set type "${spec.type}"`);
  const parts: Uint8Array[] = [udataTLV(0, u32le(concat ? 0 : 2))];
  if (spec.map) parts.push(udataTLV(1, u32le(0)));
  if (concat) parts.push(udataTLV(3, concatBytes([udataTLV(0, u32le(EXPR_CONCAT)), udataTLV(1, new Uint8Array(0))])));
  if (spec.map) parts.push(udataTLV(6, u32le(0)));
  if (spec.comment !== undefined) parts.push(udataTLV(7, commentBytes(spec.comment)));
  return concatBytes(parts);
}

interface SetInfo {
  readonly key: SetKeyType;
  readonly map: boolean;
  readonly id: number;
}

/**
 * BatchEncoder writes one transaction's messages. Sets made in the batch are
 * numbered from 1 in order (nft's NFTA_SET_ID): elements and rules that use
 * one name it by that id as nft does.
 */
class BatchEncoder {
  readonly b = new NlBuilder(256 * 1024);
  readonly lineOfSeq: number[] = [0];
  #seq = 0;
  #setIds = 0;
  /** #sets: sets made in this batch. */
  readonly #sets = new ByTable<SetInfo>();

  readonly opts: EncodeOptions;
  readonly #context: TransactionContext;

  constructor(opts: EncodeOptions, context: TransactionContext) {
    this.opts = opts;
    this.#context = context;
    const at = this.b.begin(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, 0, 0, NFNL_SUBSYS_NFTABLES);
    this.b.end(at);
  }

  #begin(type: number, flags: number, family: AddrFamily, line: number): number {
    this.#seq++;
    this.lineOfSeq[this.#seq] = line;
    return this.b.begin(msgType(type), flags, this.#seq, NFPROTO[family]);
  }

  finish(): EncodedBatch {
    this.#closePack();
    this.#seq++;
    this.lineOfSeq[this.#seq] = 0;
    const at = this.b.begin(NFNL_MSG_BATCH_END, NLM_F_REQUEST, this.#seq, 0, NFNL_SUBSYS_NFTABLES);
    this.b.end(at);
    return { bytes: this.b.bytes(), lineOfSeq: this.lineOfSeq, commands: this.#seq - 1 };
  }

  /** #pack: the NEWSETELEM message open for more elements (packElements), if any. */
  #pack: { family: string; table: string; set: string; at: number; list: number; count: number } | null = null;

  #closePack(): void {
    if (!this.#pack) return;
    this.b.endNest(this.#pack.list);
    this.b.end(this.#pack.at);
    this.#pack = null;
  }

  command(c: ParsedCommand): void {
    const { family, table, op, line } = c;
    const b = this.b;
    if (this.#pack && !(op.kind === 'element' && op.op === 'add')) this.#closePack();
    switch (op.kind) {
      case 'table': {
        const at = this.#begin(op.op === 'add' ? NFT_MSG_NEWTABLE : NFT_MSG_DELTABLE, NLM_F_REQUEST, family, line);
        b.strz(1, table); // NFTA_TABLE_NAME
        if (op.op === 'add') {
          b.u32be(2, 0); // NFTA_TABLE_FLAGS
          if (op.comment !== undefined) b.attr(6, udataTLV(0, commentBytes(op.comment))); // NFTA_TABLE_USERDATA
        }
        b.end(at);
        return;
      }
      case 'chain': {
        if (op.op === 'flush') {
          const at = this.#begin(NFT_MSG_DELRULE, NLM_F_REQUEST, family, line);
          b.strz(1, table); // NFTA_RULE_TABLE
          b.strz(2, op.name); // NFTA_RULE_CHAIN
          b.end(at);
          return;
        }
        const add = op.op === 'add';
        const at = this.#begin(add ? NFT_MSG_NEWCHAIN : NFT_MSG_DELCHAIN, add ? NLM_F_REQUEST | NLM_F_CREATE : NLM_F_REQUEST, family, line);
        b.strz(1, table); // NFTA_CHAIN_TABLE
        b.strz(3, op.name); // NFTA_CHAIN_NAME
        if (op.op === 'add') {
          if (op.base) this.#hook(op.base);
          if (op.comment !== undefined) b.attr(12, udataTLV(0, commentBytes(op.comment))); // NFTA_CHAIN_USERDATA
        }
        b.end(at);
        return;
      }
      case 'set': {
        if (op.op === 'add') return this.#newSet(c, op.spec);
        if (op.op === 'flush') {
          // A set's flush is an element deletion without elements (nft writes the set's name first).
          const at = this.#begin(NFT_MSG_DELSETELEM, NLM_F_REQUEST, family, line);
          b.strz(2, op.name); // NFTA_SET_ELEM_LIST_SET
          b.strz(1, table); // NFTA_SET_ELEM_LIST_TABLE
          b.end(at);
          return;
        }
        const at = this.#begin(NFT_MSG_DELSET, NLM_F_REQUEST, family, line);
        b.strz(1, table); // NFTA_SET_TABLE
        b.strz(2, op.name); // NFTA_SET_NAME
        b.end(at);
        return;
      }
      case 'element':
        return this.#element(c);
      case 'rule':
        return this.#rule(c, op.chain, op.rule);
    }
  }

  #hook(base: NftBaseChain): void {
    const b = this.b;
    const hook = (NFT_HOOKS as readonly string[]).indexOf(base.hook);
    if (hook < 0) throw new NftCompileError(`unsupported hook "${base.hook}"`);
    b.strz(7, base.type); // NFTA_CHAIN_TYPE
    const n = b.nest(4); // NFTA_CHAIN_HOOK
    b.u32be(1, hook); // NFTA_HOOK_HOOKNUM
    b.u32be(2, base.priority | 0); // NFTA_HOOK_PRIORITY
    b.endNest(n);
  }

  #newSet(c: ParsedCommand, spec: NftSetSpec): void {
    const key = setKeyType(spec.type);
    if (!key) throw new NftCompileError(`unsupported set type "${spec.type}"`);
    const b = this.b;
    const flags = setFlags(spec) | (this.#context.dynamic.has(c.family, c.table, spec.name) ? NFT_SET_EVAL : 0);
    const userdata = setUserdata(spec, key);
    const id = ++this.#setIds;
    this.#sets.set(c.family, c.table, spec.name, { key, map: spec.map, id });
    const at = this.#begin(NFT_MSG_NEWSET, NLM_F_REQUEST | NLM_F_CREATE, c.family, c.line);
    b.strz(1, c.table); // NFTA_SET_TABLE
    b.strz(2, spec.name); // NFTA_SET_NAME
    b.u32be(3, flags); // NFTA_SET_FLAGS
    b.u32be(4, key.id); // NFTA_SET_KEY_TYPE
    b.u32be(5, key.len); // NFTA_SET_KEY_LEN
    if (spec.map) {
      b.u32be(6, NFT_DATA_VERDICT); // NFTA_SET_DATA_TYPE
      b.u32be(7, 0); // NFTA_SET_DATA_LEN
    }
    b.u32be(10, id); // NFTA_SET_ID
    if (spec.timeoutSeconds !== undefined) b.u64be(11, BigInt(spec.timeoutSeconds) * 1000n); // NFTA_SET_TIMEOUT (ms)
    b.attr(13, userdata); // NFTA_SET_USERDATA
    b.end(at);
  }

  #element(c: ParsedCommand): void {
    const op = c.op;
    if (op.kind !== 'element') return;
    const b = this.b;
    const made = this.#sets.get(c.family, c.table, op.set);
    const earlier = made ? undefined : this.#context.sets.get(c.family, c.table, op.set);
    let key = made?.key ?? (earlier ? setKeyType(earlier.type) : null);
    if (!key) {
      const inferred = inferKeyType(op.key, c.family);
      key = inferred ? setKeyType(inferred) : null;
      if (!key) throw new NftCompileError(`cannot tell the type of set ${op.set} from element "${op.key}"`);
    }
    const keyBytes = encodeKey(op.key, key, c.family);
    if (op.op === 'delete') {
      const at = this.#begin(NFT_MSG_DELSETELEM, NLM_F_REQUEST, c.family, c.line);
      b.strz(1, c.table); // NFTA_SET_ELEM_LIST_TABLE
      b.strz(2, op.set); // NFTA_SET_ELEM_LIST_SET
      const list = b.nest(3); // NFTA_SET_ELEM_LIST_ELEMENTS
      const e = b.nest(1);
      writeValue(b, 1, keyBytes); // NFTA_SET_ELEM_KEY
      b.endNest(e);
      b.endNest(list);
      b.end(at);
      return;
    }
    const value = op.value ?? null;
    if (made && made.map !== (value !== null)) throw new NftCompileError(made.map ? `element of map ${op.set} without a verdict` : `element of set ${op.set} with a verdict`);
    const packing = this.opts.packElements;
    const p = this.#pack;
    if (p && (p.family !== c.family || p.table !== c.table || p.set !== op.set || b.length - p.list > packing!)) this.#closePack();
    const open = () => {
      const at = this.#begin(NFT_MSG_NEWSETELEM, NLM_F_REQUEST | NLM_F_CREATE, c.family, c.line);
      b.strz(1, c.table);
      b.strz(2, op.set);
      if (made) b.u32be(4, made.id); // NFTA_SET_ELEM_LIST_SET_ID
      this.#pack = { family: c.family, table: c.table, set: op.set, at, list: b.nest(3), count: 0 };
    };
    if (!this.#pack) open();
    const write = () => {
      const pack = this.#pack!;
      const from = b.length;
      const e = b.nest(++pack.count);
      writeValue(b, 1, keyBytes);
      if (value !== null) writeVerdict(b, 2, parseVerdict(value)); // NFTA_SET_ELEM_DATA
      if (op.comment) b.attr(6, udataTLV(0, commentBytes(op.comment))); // NFTA_SET_ELEM_USERDATA
      b.endNest(e);
      return from;
    };
    const from = write();
    if (!b.fits(this.#pack!.list)) {
      // The element does not fit its message's list: it opens the next message (see #elementList).
      if (this.#pack!.count === 1) throw new NftCompileError(`one element of set ${op.set} is over netlink's attribute limit`);
      b.truncate(from);
      this.#closePack();
      open();
      write();
    }
    if (!packing) this.#closePack();
  }

  #anonSet(c: ParsedCommand, s: AnonSet): void {
    const b = this.b;
    const at = this.#begin(NFT_MSG_NEWSET, NLM_F_REQUEST | NLM_F_CREATE, c.family, c.line);
    b.strz(1, c.table);
    b.strz(2, s.name);
    b.u32be(3, s.flags);
    b.u32be(4, s.keyType);
    b.u32be(5, s.keyLen);
    if (s.map) {
      b.u32be(6, NFT_DATA_VERDICT);
      b.u32be(7, 0);
    }
    b.u32be(10, s.id);
    const desc = b.nest(9); // NFTA_SET_DESC
    b.u32be(1, s.size); // NFTA_SET_DESC_SIZE
    b.endNest(desc);
    b.attr(13, s.userdata);
    b.end(at);

    this.#elementList(c, s, (el) => {
      if (el.end) b.u32be(3, NFT_SET_ELEM_INTERVAL_END); // NFTA_SET_ELEM_FLAGS
      writeValue(b, 1, el.key);
      if (el.verdict) writeVerdict(b, 2, el.verdict);
      if (el.open) b.attr(6, udataTLV(1, u32le(1))); // NFTNL_UDATA_SET_ELEM_FLAGS: NFTNL_SET_ELEM_F_INTERVAL_OPEN
    });
  }

  /**
   * #elementList writes an anonymous set's elements in NEWSETELEM messages of
   * the command's sequence number, as many as it takes: the elements' list is
   * one attribute, whose length is 16 bits, so a list must stay within 65,535
   * bytes. As nft 1.0.6 does (mnl_nft_setelem_batch; recorded in
   * testdata/nfnl/big-*.hex), an element that would overflow the list is
   * taken back and opens the next message; the elements' numbers run on
   * across the messages, the one taken back using up its number. A big Service's `numgen random mod N vmap { … }` (about 700
   * endpoints with long names) or a long `loadBalancerSourceRanges` list
   * needs several; the kernel adds them all to the set before the rule binds
   * it, in one transaction.
   */
  #elementList(c: ParsedCommand, s: AnonSet, write: (el: AnonSet['elements'][number]) => void): void {
    const b = this.b;
    const seq = this.#seq + 1;
    let first = true;
    let at = 0;
    let list = 0;
    let i = 0;
    const open = () => {
      if (first) at = this.#begin(NFT_MSG_NEWSETELEM, NLM_F_REQUEST | NLM_F_CREATE, c.family, c.line);
      else at = this.b.begin(msgType(NFT_MSG_NEWSETELEM), NLM_F_REQUEST | NLM_F_CREATE, seq, NFPROTO[c.family]);
      first = false;
      b.strz(1, c.table);
      if (!this.opts.anonName) b.strz(2, s.name);
      b.u32be(4, s.id);
      list = b.nest(3);
    };
    open();
    for (const el of s.elements) {
      const from = b.length;
      const e = b.nest(++i);
      write(el);
      b.endNest(e);
      if (b.fits(list)) continue;
      if (i === 1) throw new NftCompileError(`one element of an anonymous set is over netlink's attribute limit`);
      b.truncate(from);
      b.endNest(list);
      b.end(at);
      open();
      const again = b.nest(++i);
      write(el);
      b.endNest(again);
    }
    b.endNest(list);
    b.end(at);
  }

  #rule(c: ParsedCommand, chain: string, text: string): void {
    const rule = compileRule(text, {
      family: c.family,
      setId: (name) => this.#sets.get(c.family, c.table, name)?.id ?? null,
      newSetId: () => ++this.#setIds,
      ifindex: (name) => this.opts.ifindex(name),
      ...(this.opts.anonName ? { anonName: this.opts.anonName } : {}),
    });
    for (const s of rule.sets) this.#anonSet(c, s);
    const b = this.b;
    const at = this.#begin(NFT_MSG_NEWRULE, NLM_F_REQUEST | NLM_F_CREATE | NLM_F_APPEND, c.family, c.line);
    b.strz(1, c.table); // NFTA_RULE_TABLE
    b.strz(2, chain); // NFTA_RULE_CHAIN
    const list = b.nest(4); // NFTA_RULE_EXPRESSIONS
    for (const e of rule.exprs) writeExpr(b, e);
    b.endNest(list);
    if (rule.comment !== null) b.attr(7, udataTLV(0, commentBytes(rule.comment))); // NFTA_RULE_USERDATA
    b.end(at);
  }
}

/**
 * encodeTransaction encodes parsed commands as one batch. Throws
 * NftCompileError (or NftValueError) at the first command it cannot write
 * exactly as nft would, with that command's line.
 */
export function encodeTransaction(commands: readonly ParsedCommand[], opts: EncodeOptions): EncodedBatch {
  const enc = new BatchEncoder(opts, opts.context ?? transactionContext(commands));
  for (const c of nftOrder(commands)) {
    try {
      enc.command(c);
    } catch (err) {
      if (err instanceof Error && !(err instanceof NftLineError)) throw new NftLineError(c.line, err.message, { cause: err });
      throw err;
    }
  }
  return enc.finish();
}

const isAddElement = (c: ParsedCommand) => c.op.kind === 'element' && c.op.op === 'add';
const sameSet = (a: ParsedCommand, b: ParsedCommand) => a.family === b.family && a.table === b.table && a.op.kind === 'element' && b.op.kind === 'element' && a.op.set === b.op.set;

/**
 * nftOrder: the order nft 1.0.6 sends commands in. It collapses a run of
 * `add element` commands for one set into the first of them, which sends its
 * own element first and then the others last to first. The set ends the same
 * either way; the order only keeps the batch byte for byte nft's.
 */
export function nftOrder(commands: readonly ParsedCommand[]): ParsedCommand[] {
  const out: ParsedCommand[] = [];
  for (let i = 0; i < commands.length;) {
    let j = i + 1;
    if (isAddElement(commands[i])) while (j < commands.length && isAddElement(commands[j]) && sameSet(commands[i], commands[j])) j++;
    out.push(commands[i]);
    for (let k = j - 1; k > i; k--) out.push(commands[k]);
    i = j;
  }
  return out;
}

/**
 * transactionContext: the sets a transaction defines, and those its rules update from the packet
 * path (`update @set { … }`). nft marks such a set NFT_SET_EVAL when it makes
 * it in the same transaction, so the kernel picks a set type that can be
 * updated from a packet; the encoder must do the same.
 */
export function transactionContext(commands: readonly ParsedCommand[]): TransactionContext {
  const dynamic = new ByTable<true>();
  const sets = new ByTable<NftSetSpec>();
  for (const c of commands) {
    if (c.op.kind === 'set' && c.op.op === 'add') sets.set(c.family, c.table, c.op.spec.name, c.op.spec);
    if (c.op.kind !== 'rule' || !c.op.rule.includes('update @')) continue;
    for (const m of c.op.rule.matchAll(/\bupdate @(\S+)/g)) dynamic.set(c.family, c.table, m[1], true);
  }
  return { sets, dynamic };
}

/** NftLineError: the encoder could not write the command on `line` (1-based). */
export class NftLineError extends Error {
  readonly line: number;
  constructor(line: number, message: string, options?: { cause?: unknown }) {
    super(`line ${line}: ${message}`, options);
    this.line = line;
  }
}

import {
  IP_PROTOCOLS,
  NF_ACCEPT,
  NF_DROP,
  NF_NAT_RANGE_PROTO_RANDOM_FULLY,
  NFPROTO_IPV4,
  NFPROTO_IPV6,
  NFT_CMP_EQ,
  NFT_CMP_GTE,
  NFT_CMP_LTE,
  NFT_CMP_NEQ,
  NFT_CT_STATE,
  NFT_FIB_RESULT_ADDRTYPE,
  NFT_GOTO,
  NFT_JUMP,
  NFT_META_IIF,
  NFT_META_IIFNAME,
  NFT_META_L4PROTO,
  NFT_META_MARK,
  NFT_PAYLOAD_NETWORK,
  NFT_PAYLOAD_TRANSPORT,
  NFT_REG_1,
  NFT_REG_2,
  NFT_REG_VERDICT,
  NFT_RETURN,
  NFT_SET_ANONYMOUS,
  NFT_SET_CONSTANT,
  NFT_SET_INTERVAL,
  NFT_SET_MAP,
  NFTA_FIB_F_DADDR,
  NFTA_FIB_F_SADDR,
  reg32,
  RTN_LOCAL,
  type Expr,
  type Verdict,
} from './nft-netlink-expr.ts';
import { addressBytes, addressRange, TYPE_IP6ADDR, TYPE_IPADDR, type AddrFamily } from './nft-netlink-values.ts';

/**
 * The rule compiler: one rule in the dialect kproxy writes (builder.ts, the
 * golden expected.nft files) to the nf_tables expressions nft 1.0.6 makes of
 * the same text (measured with `nft --debug=netlink` and read back byte for
 * byte from its netlink batches), plus the anonymous sets the rule needs.
 * It understands exactly kproxy's statements; anything else throws
 * NftCompileError, and the runner hands that transaction to `nft -f`: a rule
 * kproxy cannot compile exactly is never approximated.
 */

/** NftCompileError: text the netlink encoder does not understand (the runner falls back to nft for that transaction). */
export class NftCompileError extends Error {}

/** AnonSetElement: one element of an anonymous set: key bytes, interval-end flag, verdict (maps), open-interval flag. */
export interface AnonSetElement {
  readonly key: Uint8Array;
  readonly end: boolean;
  readonly open: boolean;
  readonly verdict: Verdict | null;
}

/** AnonSet: an anonymous set or map a rule binds (`{ … }` or `vmap { … }`), created in the same transaction. */
export interface AnonSet {
  /** name: nft's "__set%d"/"__map%d" (the kernel numbers it), or a name the encoder chose (RuleContext.anonName). */
  readonly name: string;
  readonly id: number;
  readonly flags: number;
  readonly keyType: number;
  readonly keyLen: number;
  readonly map: boolean;
  readonly size: number;
  readonly userdata: Uint8Array;
  readonly elements: readonly AnonSetElement[];
}

/** CompiledRule: the expressions, the anonymous sets (written before the rule) and the comment. */
export interface CompiledRule {
  readonly exprs: Expr[];
  readonly sets: AnonSet[];
  readonly comment: string | null;
}

/** RuleContext: what a rule refers to outside itself. */
export interface RuleContext {
  readonly family: AddrFamily;
  /** setId: the id of a named set created earlier in the same transaction (null: it already exists). */
  setId(name: string): number | null;
  /** newSetId: a fresh id for an anonymous set. */
  newSetId(): number;
  /** ifindex: the interface index of `iif NAME` (nft resolves it when it reads the rule). */
  ifindex(name: string): number;
  /** anonName: the name of anonymous set `id` ("__set%d"/"__map%d" as nft, or an explicit one). */
  anonName?(kind: 'set' | 'map', id: number): string;
}

const TYPE_INTEGER = 4;

const CT_STATE_NEW = 8;

/** hasAnonymousSet: the rule binds an anonymous set (`vmap { … }`, `saddr { … }`): what compileRule makes an AnonSet for. */
export function hasAnonymousSet(rule: string): boolean {
  return /\bvmap \{|\b[sd]addr (?:!= )?\{/.test(rule);
}

/** tokenize splits a rule at spaces, keeping quoted strings whole. */
export function tokenize(text: string): string[] {
  return text.match(/"[^"]*"|\S+/g) ?? [];
}

const U32LE_SMALL = Array.from({ length: 16 }, (_, n) => Uint8Array.of(n, 0, 0, 0));

/** u32le: a host-order (little endian) 32-bit value; the small ones shared (they are never written to). */
function u32le(n: number): Uint8Array {
  if (n >= 0 && n < 16) return U32LE_SMALL[n];
  const v = n >>> 0;
  return Uint8Array.of(v & 0xff, (v >>> 8) & 0xff, (v >>> 16) & 0xff, v >>> 24);
}

function be16(n: number): Uint8Array {
  return Uint8Array.of((n >> 8) & 0xff, n & 0xff);
}

function unquote(tok: string | undefined, what: string): string {
  if (!tok || tok.length < 2 || !tok.startsWith('"') || !tok.endsWith('"')) throw new NftCompileError(`expected a quoted ${what}, found ${tok ?? 'the end of the rule'}`);
  return tok.slice(1, -1);
}

function parseNumber(tok: string | undefined, what: string): number {
  if (tok === undefined || !/^(0x[0-9a-f]+|\d+)$/i.test(tok)) throw new NftCompileError(`expected ${what}, found ${tok ?? 'the end of the rule'}`);
  const n = Number(tok);
  if (!Number.isSafeInteger(n) || n > 0xffffffff) throw new NftCompileError(`${what} ${tok} is out of range`);
  return n;
}

/** udataTLV writes one nftnl user data entry: type, length, value (one byte each for type and length). */
export function udataTLV(type: number, value: Uint8Array): Uint8Array {
  if (value.length > 255) throw new NftCompileError('user data entry longer than 255 bytes');
  const out = new Uint8Array(2 + value.length);
  out[0] = type;
  out[1] = value.length;
  out.set(value, 2);
  return out;
}

/** COMMENT_MAX: nft 1.0.6 refuses a comment of more than 128 bytes (NFTNL_UDATA_COMMENT_MAXLEN), whatever the kernel would store. */
export const COMMENT_MAX = 128;

/** commentBytes: a comment as user data, refused as nft refuses it when too long (the encoder never writes what nft would not). */
export function commentBytes(s: string): Uint8Array {
  const b = strzBytes(s);
  if (b.length - 1 > COMMENT_MAX) throw new NftCompileError(`comment too long, ${COMMENT_MAX} characters maximum allowed`);
  return b;
}

export function strzBytes(s: string): Uint8Array {
  const b = Buffer.from(s + '\0', 'utf8');
  return new Uint8Array(b.buffer, b.byteOffset, b.length);
}

export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

/** payloadTypeofUdata: a set keyed by `ip saddr`/`ip6 daddr`…: nft records the selector (proto description, template field). */
function addrSetUdata(family: AddrFamily, field: 'saddr' | 'daddr', interval: boolean): Uint8Array {
  // PROTO_DESC_IP (12) / PROTO_DESC_IP6 (13); IPHDR_SADDR 11, IPHDR_DADDR 12; IP6HDR_SADDR 8, IP6HDR_DADDR 9.
  const desc = family === 'ip' ? 12 : 13;
  const tmpl = family === 'ip' ? (field === 'saddr' ? 11 : 12) : field === 'saddr' ? 8 : 9;
  const typeofData = concatBytes([udataTLV(0, u32le(desc)), udataTLV(1, u32le(tmpl))]);
  const typeofNest = concatBytes([udataTLV(0, u32le(7 /* EXPR_PAYLOAD */)), udataTLV(1, typeofData)]);
  return concatBytes([udataTLV(0, u32le(2 /* KEYBYTEORDER: big endian */)), ...(interval ? [udataTLV(2, u32le(1) /* MERGE_ELEMENTS */)] : []), udataTLV(3, typeofNest /* KEY_TYPEOF */)]);
}

/** NUMGEN_MAP_UDATA: `numgen … vmap { }`: host-order integer keys, verdict data (nft 1.0.6's bytes). */
const NUMGEN_MAP_UDATA = concatBytes([
  udataTLV(0, u32le(1 /* host endian */)),
  udataTLV(1, u32le(0)),
  udataTLV(4, concatBytes([udataTLV(0, u32le(1 /* EXPR_VERDICT */)), udataTLV(1, new Uint8Array(0))]) /* DATA_TYPEOF */),
  udataTLV(6, u32le(0) /* DATA_INTERVAL */),
]);

type PayloadExpr = Extract<Expr, { kind: 'payload' }>;

/** Cursor walks a rule's tokens. */
class Cursor {
  #i = 0;
  readonly tokens: readonly string[];
  constructor(tokens: readonly string[]) {
    this.tokens = tokens;
  }
  peek(k = 0): string | undefined {
    return this.tokens[this.#i + k];
  }
  next(): string | undefined {
    return this.tokens[this.#i++];
  }
  done(): boolean {
    return this.#i >= this.tokens.length;
  }
  back(): void {
    this.#i--;
  }
  expect(...words: string[]): void {
    for (const w of words) {
      const t = this.next();
      if (t !== w) throw new NftCompileError(`expected "${w}", found ${t === undefined ? 'the end of the rule' : `"${t}"`}`);
    }
  }
}

function parseVerdictWord(c: Cursor): Verdict | null {
  const t = c.peek();
  switch (t) {
    case 'jump':
    case 'goto': {
      c.next();
      const chain = c.next();
      if (!chain || chain.startsWith('"') || chain.startsWith('@')) throw new NftCompileError(`expected a chain after ${t}`);
      return { code: t === 'jump' ? NFT_JUMP : NFT_GOTO, chain };
    }
    case 'drop':
      c.next();
      return { code: NF_DROP };
    case 'accept':
      c.next();
      return { code: NF_ACCEPT };
    case 'return':
      c.next();
      return { code: NFT_RETURN };
    default:
      return null;
  }
}

/**
 * compileRule compiles one rule's text. ctx.newSetId is called once per
 * anonymous set, in order, as nft numbers them.
 */
export function compileRule(text: string, ctx: RuleContext): CompiledRule {
  const c = new Cursor(tokenize(text));
  const exprs: Expr[] = [];
  const sets: AnonSet[] = [];
  let comment: string | null = null;
  let l4proto: number | null = null;
  let ended = false;
  const addrLen = ctx.family === 'ip' ? 4 : 16;
  const selector = (field: string): PayloadExpr => {
    if (field !== 'saddr' && field !== 'daddr') throw new NftCompileError(`unsupported address selector "${field}"`);
    const offset = ctx.family === 'ip' ? (field === 'saddr' ? 12 : 16) : field === 'saddr' ? 8 : 24;
    return { kind: 'payload', base: NFT_PAYLOAD_NETWORK, offset, len: addrLen, dreg: NFT_REG_1 };
  };
  const thDport = (slot: number): Expr => ({ kind: 'payload', base: NFT_PAYLOAD_TRANSPORT, offset: 2, len: 2, dreg: reg32(slot) });
  const l4protoAt = (slot: number): Expr => ({ kind: 'meta', key: NFT_META_L4PROTO, dreg: reg32(slot) });
  const namedSet = (tok: string | undefined): string => {
    if (!tok || !tok.startsWith('@') || tok.length < 2) throw new NftCompileError(`expected @set, found ${tok ?? 'the end of the rule'}`);
    return tok.slice(1);
  };
  const vmap = (sreg: number) => {
    c.expect('vmap');
    const set = namedSet(c.next());
    exprs.push({ kind: 'lookup', sreg, dreg: NFT_REG_VERDICT, set, setId: ctx.setId(set), invert: false });
    ended = true;
  };

  while (!c.done()) {
    const t = c.next()!;
    if (ended && t !== 'comment') throw new NftCompileError(`unexpected "${t}" after the rule's verdict`);
    if (t === 'comment') {
      comment = unquote(c.next(), 'comment');
      if (!c.done()) throw new NftCompileError('the comment must end the rule');
      break;
    }
    if (t === 'ip' || t === 'ip6') {
      if (t !== ctx.family) throw new NftCompileError(`"${t}" in a table of family ${ctx.family}`);
      const field = c.next()!;
      const load = selector(field);
      if (c.peek() === '.') {
        // ip daddr . meta l4proto . th dport vmap @map
        c.expect('.', 'meta', 'l4proto', '.', 'th', 'dport');
        const slot = addrLen / 4;
        exprs.push(load, l4protoAt(slot), thDport(slot + 1));
        vmap(NFT_REG_1);
        continue;
      }
      let op = NFT_CMP_EQ;
      if (c.peek() === '!=') {
        c.next();
        op = NFT_CMP_NEQ;
      }
      const v = c.next();
      if (v === undefined) throw new NftCompileError(`expected an address after ${t} ${field}`);
      if (v.startsWith('@')) {
        if (op !== NFT_CMP_EQ) throw new NftCompileError('"!= @set" is not supported');
        const set = namedSet(v);
        exprs.push(load, { kind: 'lookup', sreg: NFT_REG_1, dreg: null, set, setId: ctx.setId(set), invert: false });
      } else if (v === '{') {
        const items: string[] = [];
        for (;;) {
          const e = c.next();
          if (e === undefined) throw new NftCompileError('unterminated set');
          if (e === '}') break;
          if (e === ',') continue;
          items.push(e.endsWith(',') ? e.slice(0, -1) : e);
        }
        const set = addressSet(items, ctx, field as 'saddr' | 'daddr');
        sets.push(set);
        exprs.push(load, { kind: 'lookup', sreg: NFT_REG_1, dreg: null, set: set.name, setId: set.id, invert: op === NFT_CMP_NEQ });
      } else exprs.push(...addressMatch(load, v, op, ctx.family));
      continue;
    }
    switch (t) {
      case 'ct':
        c.expect('state', 'new');
        exprs.push(
          { kind: 'ct', key: NFT_CT_STATE, dreg: NFT_REG_1 },
          { kind: 'bitwise', sreg: NFT_REG_1, dreg: NFT_REG_1, mask: u32le(CT_STATE_NEW), xor: u32le(0), withOp: false },
          { kind: 'cmp', sreg: NFT_REG_1, op: NFT_CMP_NEQ, data: u32le(0) },
        );
        break;
      case 'meta': {
        c.expect('l4proto');
        if (c.peek() === '.') {
          c.expect('.', 'th', 'dport');
          exprs.push(l4protoAt(0), thDport(1));
          vmap(NFT_REG_1);
          break;
        }
        const name = c.next() ?? '';
        const proto = IP_PROTOCOLS[name];
        if (proto === undefined) throw new NftCompileError(`unsupported protocol "${name}"`);
        exprs.push({ kind: 'meta', key: NFT_META_L4PROTO, dreg: NFT_REG_1 }, { kind: 'cmp', sreg: NFT_REG_1, op: NFT_CMP_EQ, data: Uint8Array.of(proto) });
        l4proto = proto;
        break;
      }
      case 'th':
        throw new NftCompileError('"th" outside a concatenation is not supported');
      case 'fib': {
        const field = c.next();
        if (field !== 'saddr' && field !== 'daddr') throw new NftCompileError(`unsupported fib selector "${field}"`);
        c.expect('type', 'local');
        exprs.push(
          { kind: 'fib', flags: field === 'saddr' ? NFTA_FIB_F_SADDR : NFTA_FIB_F_DADDR, result: NFT_FIB_RESULT_ADDRTYPE, dreg: NFT_REG_1 },
          { kind: 'cmp', sreg: NFT_REG_1, op: NFT_CMP_EQ, data: u32le(RTN_LOCAL) },
        );
        break;
      }
      case 'iifname': {
        let op = NFT_CMP_EQ;
        if (c.peek() === '!=') {
          c.next();
          op = NFT_CMP_NEQ;
        }
        const name = unquote(c.next(), 'interface name');
        let data: Uint8Array;
        if (name.endsWith('*') && !name.slice(0, -1).includes('*')) data = Buffer.from(name.slice(0, -1), 'utf8');
        else if (!name.includes('*') && name.length < 16) data = Buffer.concat([Buffer.from(name, 'utf8'), Buffer.alloc(16 - Buffer.byteLength(name))]);
        else throw new NftCompileError(`unsupported interface name pattern "${name}"`);
        if (data.length === 0 || data.length > 16) throw new NftCompileError(`unsupported interface name pattern "${name}"`);
        exprs.push({ kind: 'meta', key: NFT_META_IIFNAME, dreg: NFT_REG_1 }, { kind: 'cmp', sreg: NFT_REG_1, op, data: new Uint8Array(data) });
        break;
      }
      case 'iif': {
        let op = NFT_CMP_EQ;
        if (c.peek() === '!=') {
          c.next();
          op = NFT_CMP_NEQ;
        }
        const name = unquote(c.next(), 'interface name');
        exprs.push({ kind: 'meta', key: NFT_META_IIF, dreg: NFT_REG_1 }, { kind: 'cmp', sreg: NFT_REG_1, op, data: u32le(ctx.ifindex(name)) });
        break;
      }
      case 'mark': {
        const load: Expr = { kind: 'meta', key: NFT_META_MARK, dreg: NFT_REG_1 };
        if (c.peek() === 'set') {
          c.expect('set', 'mark');
          const how = c.next();
          const m = parseNumber(c.next(), 'a mark');
          if (how === 'or') exprs.push(load, { kind: 'bitwise', sreg: NFT_REG_1, dreg: NFT_REG_1, mask: u32le(~m), xor: u32le(m), withOp: true });
          else if (how === 'xor') exprs.push(load, { kind: 'bitwise', sreg: NFT_REG_1, dreg: NFT_REG_1, mask: u32le(0xffffffff), xor: u32le(m), withOp: true });
          else throw new NftCompileError(`unsupported "mark set mark ${how}"`);
          exprs.push({ kind: 'meta-set', key: NFT_META_MARK, sreg: NFT_REG_1 });
          ended = true;
          break;
        }
        c.expect('and');
        const m = parseNumber(c.next(), 'a mask');
        c.expect('==');
        const v = parseNumber(c.next(), 'a value');
        exprs.push(load, { kind: 'bitwise', sreg: NFT_REG_1, dreg: NFT_REG_1, mask: u32le(m), xor: u32le(0), withOp: true }, { kind: 'cmp', sreg: NFT_REG_1, op: NFT_CMP_EQ, data: u32le(v) });
        break;
      }
      case 'numgen': {
        c.expect('random', 'mod');
        const mod = parseNumber(c.next(), 'a modulus');
        c.expect('vmap', '{');
        const elements: AnonSetElement[] = [];
        for (;;) {
          const k = c.next();
          if (k === '}') break;
          if (k === ',') continue;
          const key = parseNumber(k, 'a numgen value');
          c.expect(':');
          const verdict = parseVerdictWord(c);
          if (!verdict) throw new NftCompileError(`expected a verdict for ${key} in the numgen map`);
          elements.push({ key: u32le(key), end: false, open: false, verdict });
        }
        if (mod === 0 || elements.length === 0) throw new NftCompileError('empty numgen map');
        const id = ctx.newSetId();
        const mapName = ctx.anonName ? ctx.anonName('map', id) : '__map%d';
        sets.push({
          name: mapName,
          id,
          flags: NFT_SET_ANONYMOUS | NFT_SET_CONSTANT | NFT_SET_MAP,
          keyType: TYPE_INTEGER,
          keyLen: 4,
          map: true,
          size: elements.length,
          userdata: NUMGEN_MAP_UDATA,
          elements,
        });
        exprs.push({ kind: 'numgen', dreg: NFT_REG_1, modulus: mod }, { kind: 'lookup', sreg: NFT_REG_1, dreg: NFT_REG_VERDICT, set: mapName, setId: id, invert: false });
        ended = true;
        break;
      }
      case 'update': {
        const set = namedSet(c.next());
        c.expect('{', ctx.family);
        const field = c.next()!;
        c.expect('}');
        exprs.push(selector(field), { kind: 'dynset-update', sreg: NFT_REG_1, set, setId: ctx.setId(set) });
        break;
      }
      case 'dnat': {
        c.expect('to');
        const target = c.next() ?? '';
        const m = ctx.family === 'ip' ? /^([0-9.]+):(\d+)$/.exec(target) : /^\[([0-9a-fA-F:.]+)\]:(\d+)$/.exec(target);
        if (!m || l4proto === null) throw new NftCompileError(`unsupported dnat target "${target}" (kproxy writes "meta l4proto P dnat to ADDR:PORT")`);
        const port = parseNumber(m[2], 'a port');
        if (port < 1 || port > 65535) throw new NftCompileError(`dnat port ${port} is out of range`);
        exprs.push(
          { kind: 'immediate', dreg: NFT_REG_1, data: addressBytes(m[1], ctx.family) },
          { kind: 'immediate', dreg: NFT_REG_2, data: be16(port) },
          { kind: 'dnat', family: ctx.family === 'ip' ? NFPROTO_IPV4 : NFPROTO_IPV6, regAddr: NFT_REG_1, regProto: NFT_REG_2 },
        );
        ended = true;
        break;
      }
      case 'masquerade': {
        let flags = 0;
        if (c.peek() === 'fully-random') {
          c.next();
          flags = NF_NAT_RANGE_PROTO_RANDOM_FULLY;
        }
        exprs.push({ kind: 'masq', flags });
        ended = true;
        break;
      }
      case 'reject':
        // ICMP port unreachable (3), ICMPv6 port unreachable (4): nft's default for its family.
        exprs.push({ kind: 'reject', icmpCode: ctx.family === 'ip' ? 3 : 4 });
        ended = true;
        break;
      default: {
        c.back();
        const verdict = parseVerdictWord(c);
        if (!verdict) throw new NftCompileError(`unsupported word "${t}"`);
        exprs.push({ kind: 'verdict', verdict });
        ended = true;
      }
    }
  }
  if (exprs.length === 0) throw new NftCompileError('empty rule');
  return { exprs, sets, comment };
}

/** addressMatch: `ip saddr [!=] A`, a prefix (a shorter load, or a mask when not on a byte boundary) or a range. */
function addressMatch(load: PayloadExpr, text: string, op: number, family: AddrFamily): Expr[] {
  const bits = family === 'ip' ? 32 : 128;
  const r = addressRange(text, family);
  if (!r) throw new NftCompileError(`"${text}" is not an ${family === 'ip' ? 'IPv4' : 'IPv6'} address, prefix or range`);
  const len = bits / 8;
  if (r.kind === 'range') {
    // nft writes "!= A-B" as one range expression and "A-B" as two comparisons.
    if (op === NFT_CMP_NEQ) return [load, { kind: 'range', sreg: NFT_REG_1, op, from: r.first, to: r.last }];
    return [load, { kind: 'cmp', sreg: NFT_REG_1, op: NFT_CMP_GTE, data: r.first }, { kind: 'cmp', sreg: NFT_REG_1, op: NFT_CMP_LTE, data: r.last }];
  }
  const prefix = r.prefix;
  if (prefix === bits) return [load, { kind: 'cmp', sreg: NFT_REG_1, op, data: r.first }];
  if (prefix > 0 && prefix % 8 === 0)
    return [
      { ...load, len: prefix / 8 },
      { kind: 'cmp', sreg: NFT_REG_1, op, data: r.first.slice(0, prefix / 8) },
    ];
  const mask = new Uint8Array(len);
  for (let i = 0; i < prefix; i++) mask[i >> 3] |= 0x80 >> (i & 7);
  return [load, { kind: 'bitwise', sreg: NFT_REG_1, dreg: NFT_REG_1, mask, xor: new Uint8Array(len), withOp: false }, { kind: 'cmp', sreg: NFT_REG_1, op, data: r.first }];
}

/**
 * addressSet: `{ A , B/n , C-D }` as nft 1.0.6 makes it: addresses alone are a
 * constant set in the order written; with a prefix or range it is an interval
 * set, sorted, each interval written as its first address and the address
 * after its last (flagged as an interval end), with a leading end at 0 and the
 * size counted as nft counts it.
 */
function addressSet(items: readonly string[], ctx: RuleContext, field: 'saddr' | 'daddr'): AnonSet {
  if (items.length === 0) throw new NftCompileError('empty set');
  const ranges = items.map((i) => {
    const r = addressRange(i, ctx.family);
    if (!r) throw new NftCompileError(`"${i}" is not an address, prefix or range`);
    return r;
  });
  const interval = ranges.some((r) => r.kind === 'range' || r.prefix !== (ctx.family === 'ip' ? 32 : 128));
  const keyLen = ctx.family === 'ip' ? 4 : 16;
  const keyType = ctx.family === 'ip' ? TYPE_IPADDR : TYPE_IP6ADDR;
  const id = ctx.newSetId();
  const name = ctx.anonName ? ctx.anonName('set', id) : '__set%d';
  if (!interval) {
    return {
      name,
      id,
      flags: NFT_SET_ANONYMOUS | NFT_SET_CONSTANT,
      keyType,
      keyLen,
      map: false,
      size: ranges.length,
      userdata: addrSetUdata(ctx.family, field, false),
      elements: ranges.map((r) => ({ key: r.first, end: false, open: false, verdict: null })),
    };
  }
  const sorted = [...ranges].sort((a, b) => Buffer.compare(a.first, b.first));
  for (let i = 1; i < sorted.length; i++) {
    if (Buffer.compare(sorted[i].first, increment(sorted[i - 1].last) ?? sorted[i - 1].last) <= 0) {
      // nft would merge these; kproxy writes merged sets (intervals.ts), so another form is not its own.
      throw new NftCompileError(`set elements ${items.join(', ')} overlap or touch: not written the way nft merges them`);
    }
  }
  const elements: AnonSetElement[] = [];
  const zero = new Uint8Array(keyLen);
  const startsAtZero = Buffer.compare(sorted[0].first, zero) === 0;
  if (!startsAtZero) elements.push({ key: zero, end: true, open: false, verdict: null });
  for (const r of sorted) {
    const after = increment(r.last);
    elements.push({ key: r.first, end: false, open: after === null, verdict: null });
    if (after) elements.push({ key: after, end: true, open: false, verdict: null });
  }
  return {
    name,
    id,
    flags: NFT_SET_ANONYMOUS | NFT_SET_CONSTANT | NFT_SET_INTERVAL,
    keyType,
    keyLen,
    map: false,
    size: 2 * sorted.length + (startsAtZero ? 0 : 1),
    userdata: addrSetUdata(ctx.family, field, true),
    elements,
  };
}

/** increment: the next address (big endian bytes), or null past the last one. */
function increment(b: Uint8Array): Uint8Array | null {
  const out = Uint8Array.from(b);
  for (let i = out.length - 1; i >= 0; i--) {
    if (out[i] !== 0xff) {
      out[i]++;
      return out;
    }
    out[i] = 0;
  }
  return null;
}

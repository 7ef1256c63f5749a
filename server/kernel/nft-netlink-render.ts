import { canonicalIP } from '../net/ip.ts';
import { sameExpr } from './nft-netlink-decode.ts';
import {
  IP_PROTOCOL_NAMES,
  NF_ACCEPT,
  NF_DROP,
  NF_NAT_RANGE_PROTO_RANDOM_FULLY,
  NFT_CMP_EQ,
  NFT_CMP_GTE,
  NFT_CMP_LTE,
  NFT_CMP_NEQ,
  NFT_CT_STATE,
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
  NFT_SET_INTERVAL,
  NFTA_FIB_F_DADDR,
  NFTA_FIB_F_SADDR,
  reg32,
  type Expr,
  type Verdict,
} from './nft-netlink-expr.ts';
import { compileRule, type AnonSetElement } from './nft-netlink-rules.ts';
import type { AddrFamily } from './nft-netlink-values.ts';

/**
 * A dumped rule back to the text kproxy writes: the inverse of the rule
 * compiler, for the statements it compiles. Every rendering is proved by
 * compiling the text again: it must give the rule's own expressions and
 * anonymous sets; otherwise (or for anything else) the rule reads as null,
 * which the listing turns into text no wanted rule equals, so its chain is
 * rewritten, never trusted.
 */

/** DumpedSet: an anonymous set a rule binds, as the kernel listed it. */
export interface DumpedSet {
  readonly flags: number;
  readonly keyLen: number;
  readonly elements: readonly AnonSetElement[];
}

export interface RenderContext {
  readonly family: AddrFamily;
  /** anon: an anonymous set of the table by its kernel name (null: not anonymous, or unknown). */
  anon(name: string): DumpedSet | null;
  /** ifname: the name of an interface index (null: none). */
  ifname(index: number): string | null;
}

function u32le(b: Uint8Array): number {
  return (b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24)) >>> 0;
}

/** addressText: an address's bytes as kproxy writes it (IPv6 compressed as Go prints it). */
export function addressText(b: Uint8Array): string | null {
  if (b.length === 4) return `${b[0]}.${b[1]}.${b[2]}.${b[3]}`;
  if (b.length !== 16) return null;
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((b[i] << 8) | b[i + 1]).toString(16));
  return canonicalIP(groups.join(':'));
}

const toBig = (b: Uint8Array) => b.reduce((n, x) => (n << 8n) | BigInt(x), 0n);
function fromBig(n: bigint, len: number): Uint8Array {
  const out = new Uint8Array(len);
  for (let i = len - 1; i >= 0; i--) {
    out[i] = Number(n & 0xffn);
    n >>= 8n;
  }
  return out;
}

/** rangeText writes [first, last] as nft lists it: an address, a prefix when aligned, else "first-last". */
function rangeText(first: bigint, last: bigint, len: number): string | null {
  const a = addressText(fromBig(first, len));
  if (a === null) return null;
  if (first === last) return a;
  const size = last - first + 1n;
  if ((size & (size - 1n)) === 0n && first % size === 0n) {
    let bits = 0;
    for (let s = size; s > 1n; s >>= 1n) bits++;
    return `${a}/${len * 8 - bits}`;
  }
  return `${a}-${addressText(fromBig(last, len))}`;
}

/** setText: an anonymous address set's elements as kproxy writes them, "{ a , b/n , c-d }", lowest first. */
function setText(s: DumpedSet): string | null {
  const len = s.keyLen;
  const max = (1n << BigInt(len * 8)) - 1n;
  const items: string[] = [];
  const els = [...s.elements].sort((x, y) => Buffer.compare(x.key, y.key));
  if (!(s.flags & NFT_SET_INTERVAL)) {
    for (const e of els) {
      const t = addressText(e.key);
      if (t === null || e.end || e.verdict) return null;
      items.push(t);
    }
  } else {
    let start: bigint | null = null;
    for (const e of els) {
      const k = toBig(e.key);
      if (e.end) {
        if (start !== null) {
          const t = rangeText(start, k - 1n, len);
          if (t === null) return null;
          items.push(t);
          start = null;
        }
        continue;
      }
      if (start !== null) return null;
      if (e.open) {
        const t = rangeText(k, max, len);
        if (t === null) return null;
        items.push(t);
      } else start = k;
    }
    if (start !== null) return null;
  }
  return items.length ? `{ ${items.join(' , ')} }` : null;
}

function verdictText(v: Verdict): string | null {
  switch (v.code) {
    case NFT_JUMP:
      return v.chain ? `jump ${v.chain}` : null;
    case NFT_GOTO:
      return v.chain ? `goto ${v.chain}` : null;
    case NF_DROP:
      return 'drop';
    case NF_ACCEPT:
      return 'accept';
    case NFT_RETURN:
      return 'return';
    default:
      return null;
  }
}

const hex8 = (n: number) => '0x' + n.toString(16).padStart(8, '0');

/** renderText writes the expressions as kproxy's text, unproved; null for a shape kproxy does not write. */
function renderText(exprs: readonly Expr[], ctx: RenderContext): string | null {
  const words: string[] = [];
  const ip = ctx.family;
  const addrLen = ip === 'ip' ? 4 : 16;
  const fields: Readonly<Record<number, string>> = ip === 'ip' ? { 12: 'saddr', 16: 'daddr' } : { 8: 'saddr', 24: 'daddr' };
  let i = 0;
  const at = (k: number) => exprs[i + k];
  while (i < exprs.length) {
    const e = exprs[i];
    if (e.kind === 'payload' && e.base === NFT_PAYLOAD_NETWORK && e.dreg === NFT_REG_1 && fields[e.offset] !== undefined) {
      const sel = `${ip} ${fields[e.offset]}`;
      const n1 = at(1);
      const slot = addrLen / 4;
      if (e.len === addrLen && n1?.kind === 'meta' && n1.key === NFT_META_L4PROTO && n1.dreg === reg32(slot)) {
        const n2 = at(2);
        const n3 = at(3);
        if (n2?.kind !== 'payload' || n2.base !== NFT_PAYLOAD_TRANSPORT || n2.offset !== 2 || n2.len !== 2 || n2.dreg !== reg32(slot + 1)) return null;
        if (n3?.kind !== 'lookup' || n3.dreg !== NFT_REG_VERDICT || ctx.anon(n3.set)) return null;
        words.push(`${sel} . meta l4proto . th dport vmap @${n3.set}`);
        i += 4;
        continue;
      }
      if (n1?.kind === 'lookup' && n1.sreg === NFT_REG_1 && n1.dreg === null && e.len === addrLen) {
        const anon = ctx.anon(n1.set);
        if (anon) {
          const t = setText(anon);
          if (t === null) return null;
          words.push(`${sel} ${n1.invert ? '!= ' : ''}${t}`);
        } else {
          if (n1.invert) return null;
          words.push(`${sel} @${n1.set}`);
        }
        i += 2;
        continue;
      }
      if (n1?.kind === 'dynset-update' && n1.sreg === NFT_REG_1 && e.len === addrLen) {
        words.push(`update @${n1.set} { ${sel} }`);
        i += 2;
        continue;
      }
      if (n1?.kind === 'range' && n1.sreg === NFT_REG_1 && n1.op === NFT_CMP_NEQ && e.len === addrLen) {
        words.push(`${sel} != ${addressText(n1.from)}-${addressText(n1.to)}`);
        i += 2;
        continue;
      }
      if (n1?.kind === 'cmp' && n1.sreg === NFT_REG_1 && n1.op === NFT_CMP_GTE && e.len === addrLen) {
        const n2 = at(2);
        if (n2?.kind !== 'cmp' || n2.op !== NFT_CMP_LTE) return null;
        words.push(`${sel} ${addressText(n1.data)}-${addressText(n2.data)}`);
        i += 3;
        continue;
      }
      let data: Uint8Array;
      let prefix: number;
      let op: number;
      if (n1?.kind === 'cmp' && n1.sreg === NFT_REG_1) {
        op = n1.op;
        data = new Uint8Array(addrLen);
        data.set(n1.data.subarray(0, Math.min(e.len, addrLen)));
        prefix = e.len * 8;
        i += 2;
      } else if (n1?.kind === 'bitwise' && n1.sreg === NFT_REG_1 && n1.dreg === NFT_REG_1 && e.len === addrLen) {
        const n2 = at(2);
        if (n2?.kind !== 'cmp' || n2.sreg !== NFT_REG_1) return null;
        op = n2.op;
        data = n2.data;
        prefix = 0;
        for (const byte of n1.mask) for (let bit = 7; bit >= 0; bit--) if (byte & (1 << bit)) prefix++;
        i += 3;
      } else return null;
      if (op !== NFT_CMP_EQ && op !== NFT_CMP_NEQ) return null;
      const addr = addressText(data);
      if (addr === null) return null;
      words.push(`${sel} ${op === NFT_CMP_NEQ ? '!= ' : ''}${addr}${prefix === addrLen * 8 ? '' : `/${prefix}`}`);
      continue;
    }
    switch (e.kind) {
      case 'ct':
        if (e.key !== NFT_CT_STATE) return null;
        words.push('ct state new');
        i += 3;
        continue;
      case 'meta': {
        const n1 = at(1);
        if (e.key === NFT_META_L4PROTO && n1?.kind === 'payload') {
          const n2 = at(2);
          if (n2?.kind !== 'lookup' || ctx.anon(n2.set)) return null;
          words.push(`meta l4proto . th dport vmap @${n2.set}`);
          i += 3;
          continue;
        }
        if (e.key === NFT_META_L4PROTO && n1?.kind === 'cmp') {
          const p = IP_PROTOCOL_NAMES[n1.data[0]];
          if (!p) return null;
          words.push(`meta l4proto ${p}`);
          i += 2;
          continue;
        }
        if ((e.key === NFT_META_IIFNAME || e.key === NFT_META_IIF) && n1?.kind === 'cmp') {
          const neg = n1.op === NFT_CMP_NEQ ? '!= ' : '';
          let name: string | null;
          if (e.key === NFT_META_IIF) name = n1.data.length === 4 ? ctx.ifname(u32le(n1.data)) : null;
          else {
            const nul = n1.data.indexOf(0);
            name = Buffer.from(n1.data.subarray(0, nul === -1 ? n1.data.length : nul)).toString('utf8') + (nul === -1 ? '*' : '');
          }
          if (name === null) return null;
          words.push(`${e.key === NFT_META_IIF ? 'iif' : 'iifname'} ${neg}"${name}"`);
          i += 2;
          continue;
        }
        if (e.key === NFT_META_MARK && n1?.kind === 'bitwise' && n1.mask.length === 4) {
          const n2 = at(2);
          const mask = u32le(n1.mask);
          const xor = u32le(n1.xor);
          if (n2?.kind === 'meta-set') {
            if (mask === 0xffffffff) words.push(`mark set mark xor ${hex8(xor)}`);
            else if ((mask | xor) >>> 0 === 0xffffffff && (mask & xor) === 0) words.push(`mark set mark or ${hex8(xor)}`);
            else return null;
          } else if (n2?.kind === 'cmp' && n2.op === NFT_CMP_EQ && xor === 0) words.push(`mark and ${hex8(mask)} == ${u32le(n2.data)}`);
          else return null;
          i += 3;
          continue;
        }
        return null;
      }
      case 'fib':
        words.push(`fib ${e.flags === NFTA_FIB_F_SADDR ? 'saddr' : e.flags === NFTA_FIB_F_DADDR ? 'daddr' : '?'} type local`);
        i += 2;
        continue;
      case 'numgen': {
        const n1 = at(1);
        const map = n1?.kind === 'lookup' ? ctx.anon(n1.set) : null;
        if (!map) return null;
        const items = [...map.elements].sort((a, b) => u32le(a.key) - u32le(b.key)).map((el) => `${u32le(el.key)} : ${el.verdict ? verdictText(el.verdict) : null}`);
        words.push(`numgen random mod ${e.modulus} vmap { ${items.join(' , ')} }`);
        i += 2;
        continue;
      }
      case 'immediate': {
        const n1 = at(1);
        const n2 = at(2);
        if (e.dreg !== NFT_REG_1 || n1?.kind !== 'immediate' || n1.dreg !== NFT_REG_2 || n2?.kind !== 'dnat' || n1.data.length !== 2) return null;
        const addr = addressText(e.data);
        const port = (n1.data[0] << 8) | n1.data[1];
        words.push(`dnat to ${ip === 'ip6' ? `[${addr}]` : addr}:${port}`);
        i += 3;
        continue;
      }
      case 'masq':
        words.push(e.flags === NF_NAT_RANGE_PROTO_RANDOM_FULLY ? 'masquerade fully-random' : 'masquerade');
        i += 1;
        continue;
      case 'reject':
        words.push('reject');
        i += 1;
        continue;
      case 'verdict': {
        const t = verdictText(e.verdict);
        if (t === null) return null;
        words.push(t);
        i += 1;
        continue;
      }
      default:
        return null;
    }
  }
  return words.join(' ');
}

/**
 * renderRule writes a dumped rule as kproxy's text, or null. The text is
 * compiled again and must give back exactly these expressions and anonymous
 * sets: a rendering that reads differently from what the kernel holds is
 * never returned.
 */
export function renderRule(exprs: readonly Expr[], comment: string | null, ctx: RenderContext): string | null {
  let text = renderText(exprs, ctx);
  if (text === null) return null;
  if (comment !== null) {
    if (/["\n\\]/.test(comment)) return null;
    text += ` comment "${comment}"`;
  }
  let compiled;
  try {
    const names: string[] = [];
    for (const e of exprs) if (e.kind === 'lookup' && ctx.anon(e.set)) names.push(e.set);
    const ifindex = new Map<string, number>();
    for (let k = 0; k + 1 < exprs.length; k++) {
      const e = exprs[k];
      const n = exprs[k + 1];
      if (e.kind === 'meta' && e.key === NFT_META_IIF && n.kind === 'cmp' && n.data.length === 4) {
        const name = ctx.ifname(u32le(n.data));
        if (name) ifindex.set(name, u32le(n.data));
      }
    }
    let anon = 0;
    compiled = compileRule(text, {
      family: ctx.family,
      setId: () => null,
      newSetId: () => ++anon,
      ifindex: (name) => ifindex.get(name) ?? -1,
      anonName: () => names[anon - 1] ?? '',
    });
  } catch {
    return null;
  }
  if ((compiled.comment ?? null) !== comment || compiled.exprs.length !== exprs.length) return null;
  for (let k = 0; k < exprs.length; k++) if (!sameExpr(exprs[k], compiled.exprs[k], (a, b) => a === b)) return null;
  for (const s of compiled.sets) {
    const held = ctx.anon(s.name);
    if (!held || held.flags !== s.flags || held.keyLen !== s.keyLen || !sameElements(held.elements, s.elements)) return null;
  }
  return text;
}

const elementKey = (e: AnonSetElement) => `${Buffer.from(e.key).toString('hex')}/${e.end ? 1 : 0}/${e.open ? 1 : 0}/${e.verdict ? `${e.verdict.code}:${e.verdict.chain ?? ''}` : ''}`;

function sameElements(a: readonly AnonSetElement[], b: readonly AnonSetElement[]): boolean {
  if (a.length !== b.length) return false;
  const x = a.map(elementKey).sort();
  const y = b.map(elementKey).sort();
  return x.every((k, i) => k === y[i]);
}

import { attrList, parseAttrs, strzOf, u32beOf, type Attrs } from './nfnl.ts';
import { NFT_NAT_DNAT, NFT_REG_VERDICT, type Expr, type Verdict } from './nft-netlink-expr.ts';

/**
 * Reading nf_tables objects back from the kernel's dumps: a rule's
 * expressions into the same Expr data the compiler makes (whatever order the
 * kernel writes attributes in, and whatever defaults it adds), verdicts,
 * and data values. Anything kproxy does not write reads as null.
 */

const nested = (a: Attrs, t: number): Attrs | null => {
  const b = a.get(t);
  return b ? parseAttrs(b) : null;
};

/** dataValue: an NFTA_DATA_VALUE nest's bytes. */
export function dataValue(b: Buffer | undefined): Uint8Array | null {
  if (!b) return null;
  const v = parseAttrs(b).get(1);
  return v ? new Uint8Array(v) : null;
}

/** dataVerdict: an NFTA_DATA_VERDICT nest (inside NFTA_DATA_*): its code and chain. */
export function dataVerdict(b: Buffer | undefined): Verdict | null {
  if (!b) return null;
  const v = parseAttrs(b).get(2);
  if (!v) return null;
  const a = parseAttrs(v);
  const code = a.get(1)?.readInt32BE(0);
  if (code === undefined) return null;
  const chain = strzOf(a.get(2));
  return chain === undefined ? { code } : { code, chain };
}

/** decodeExpr reads one NFTA_LIST_ELEM of a dumped rule; null for an expression kproxy does not write. */
export function decodeExpr(elem: Buffer): Expr | null {
  const top = parseAttrs(elem);
  const name = strzOf(top.get(1));
  const d = nested(top, 2) ?? new Map();
  const u = (t: number) => u32beOf(d.get(t));
  switch (name) {
    case 'payload': {
      if (d.has(5) || u(6)) return null; // a payload write (SREG, checksum) is never kproxy's
      const [dreg, base, offset, len] = [u(1), u(2), u(3), u(4)];
      if (dreg === undefined || base === undefined || offset === undefined || len === undefined) return null;
      return { kind: 'payload', base, offset, len, dreg };
    }
    case 'meta': {
      const key = u(2);
      if (key === undefined) return null;
      if (u(1) !== undefined) return { kind: 'meta', key, dreg: u(1)! };
      if (u(3) !== undefined) return { kind: 'meta-set', key, sreg: u(3)! };
      return null;
    }
    case 'ct': {
      const [key, dreg] = [u(2), u(1)];
      if (key === undefined || dreg === undefined || d.has(3)) return null;
      return { kind: 'ct', key, dreg };
    }
    case 'cmp': {
      const [sreg, op, data] = [u(1), u(2), dataValue(d.get(3))];
      if (sreg === undefined || op === undefined || !data) return null;
      return { kind: 'cmp', sreg, op, data };
    }
    case 'range': {
      const [sreg, op, from, to] = [u(1), u(2), dataValue(d.get(3)), dataValue(d.get(4))];
      if (sreg === undefined || op === undefined || !from || !to) return null;
      return { kind: 'range', sreg, op, from, to };
    }
    case 'bitwise': {
      const [sreg, dreg, mask, xor] = [u(1), u(2), dataValue(d.get(4)), dataValue(d.get(5))];
      if ((u(6) ?? 0) !== 0 || sreg === undefined || dreg === undefined || !mask || !xor) return null; // only the boolean operation
      return { kind: 'bitwise', sreg, dreg, mask, xor, withOp: false };
    }
    case 'lookup': {
      const [set, sreg] = [strzOf(d.get(1)), u(2)];
      if (set === undefined || sreg === undefined) return null;
      const flags = u(5) ?? 0;
      if (flags & ~1) return null;
      return { kind: 'lookup', sreg, dreg: u(3) ?? null, set, setId: null, invert: (flags & 1) === 1 };
    }
    case 'immediate': {
      const dreg = u(1);
      if (dreg === undefined) return null;
      if (dreg === NFT_REG_VERDICT) {
        const verdict = dataVerdict(d.get(2));
        return verdict ? { kind: 'verdict', verdict } : null;
      }
      const data = dataValue(d.get(2));
      return data ? { kind: 'immediate', dreg, data } : null;
    }
    case 'numgen': {
      const [dreg, modulus, type, offset] = [u(1), u(2), u(3), u(4) ?? 0];
      if (dreg === undefined || modulus === undefined || type !== 1 || offset !== 0) return null;
      return { kind: 'numgen', dreg, modulus };
    }
    case 'fib': {
      const [dreg, result, flags] = [u(1), u(2), u(3)];
      if (dreg === undefined || result === undefined || flags === undefined) return null;
      return { kind: 'fib', flags, result, dreg };
    }
    case 'nat': {
      const [type, family, addr, addrMax, proto, protoMax] = [u(1), u(2), u(3), u(4), u(5), u(6)];
      // The kernel lists the range's upper registers (the lower ones when none were given) and sets NF_NAT_RANGE_MAP_IPS.
      if (type !== NFT_NAT_DNAT || family === undefined || addr === undefined || proto === undefined) return null;
      if ((addrMax !== undefined && addrMax !== addr) || (protoMax !== undefined && protoMax !== proto)) return null;
      if (((u(7) ?? 0) & ~1) !== 2) return null;
      return { kind: 'dnat', family, regAddr: addr, regProto: proto };
    }
    case 'masq': {
      if (d.has(2) || d.has(3)) return null;
      return { kind: 'masq', flags: u(1) ?? 0 };
    }
    case 'reject': {
      const code = d.get(2);
      if (u(1) !== 0 || !code) return null;
      return { kind: 'reject', icmpCode: code[0] };
    }
    case 'dynset': {
      const [set, op, sreg] = [strzOf(d.get(1)), u(3), u(4)];
      // No data, timeout or expressions: kproxy's `update @set { ip saddr }`.
      if (set === undefined || op !== 1 || sreg === undefined || d.has(5) || d.has(7) || d.has(10)) return null;
      if ((d.has(6) && d.get(6)!.readBigUInt64BE(0) !== 0n) || (u(9) ?? 0) !== 0) return null;
      return { kind: 'dynset-update', sreg, set, setId: null };
    }
    default:
      return null;
  }
}

/** decodeExprs reads a rule's NFTA_RULE_EXPRESSIONS; null if any expression is not one kproxy writes. */
export function decodeExprs(list: Buffer): Expr[] | null {
  const out: Expr[] = [];
  for (const [, elem] of attrList(list)) {
    const e = decodeExpr(elem);
    if (!e) return null;
    out.push(e);
  }
  return out;
}

const bytesEqual = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i]);

/**
 * sameExpr: two expressions do the same thing. Set names are compared by the
 * caller (anonymous sets have the kernel's names); how nft wrote a boolean
 * bitwise operation does not matter.
 */
export function sameExpr(a: Expr, b: Expr, sameSet: (a: string, b: string) => boolean): boolean {
  if (a.kind !== b.kind) return false;
  switch (a.kind) {
    case 'payload': {
      const o = b as typeof a;
      return a.base === o.base && a.offset === o.offset && a.len === o.len && a.dreg === o.dreg;
    }
    case 'meta':
    case 'ct': {
      const o = b as typeof a;
      return a.key === o.key && a.dreg === o.dreg;
    }
    case 'meta-set': {
      const o = b as typeof a;
      return a.key === o.key && a.sreg === o.sreg;
    }
    case 'cmp': {
      const o = b as typeof a;
      return a.sreg === o.sreg && a.op === o.op && bytesEqual(a.data, o.data);
    }
    case 'range': {
      const o = b as typeof a;
      return a.sreg === o.sreg && a.op === o.op && bytesEqual(a.from, o.from) && bytesEqual(a.to, o.to);
    }
    case 'bitwise': {
      const o = b as typeof a;
      return a.sreg === o.sreg && a.dreg === o.dreg && bytesEqual(a.mask, o.mask) && bytesEqual(a.xor, o.xor);
    }
    case 'lookup': {
      const o = b as typeof a;
      return a.sreg === o.sreg && a.dreg === o.dreg && a.invert === o.invert && sameSet(a.set, o.set);
    }
    case 'immediate': {
      const o = b as typeof a;
      return a.dreg === o.dreg && bytesEqual(a.data, o.data);
    }
    case 'verdict': {
      const o = b as typeof a;
      return a.verdict.code === o.verdict.code && a.verdict.chain === o.verdict.chain;
    }
    case 'numgen': {
      const o = b as typeof a;
      return a.dreg === o.dreg && a.modulus === o.modulus;
    }
    case 'fib': {
      const o = b as typeof a;
      return a.flags === o.flags && a.result === o.result && a.dreg === o.dreg;
    }
    case 'dnat': {
      const o = b as typeof a;
      return a.family === o.family && a.regAddr === o.regAddr && a.regProto === o.regProto;
    }
    case 'masq':
      return a.flags === (b as typeof a).flags;
    case 'reject':
      return a.icmpCode === (b as typeof a).icmpCode;
    case 'dynset-update': {
      const o = b as typeof a;
      return a.sreg === o.sreg && sameSet(a.set, o.set);
    }
  }
}

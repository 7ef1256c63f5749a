import type { NlBuilder } from './nfnl.ts';

/**
 * nf_tables expressions (the kernel's rule bytecode) as plain data, and how
 * each is written as netlink attributes: the names, attribute numbers and
 * attribute order that libnftnl (under nft 1.0.6) writes, so a rule kproxy
 * sends is byte for byte the rule nft sends for the same text
 * (include/uapi/linux/netfilter/nf_tables.h for the numbers).
 */

/** Registers: 0 is the verdict register; 1-4 are 16-byte registers; 8-23 are 4-byte registers (NFT_REG32_00…15). */
export const NFT_REG_VERDICT = 0;
export const NFT_REG_1 = 1;
export const NFT_REG_2 = 2;

/** reg32 names the register nft uses for the 4-byte slot `slot` (0-based): a 16-byte register where one starts. */
export function reg32(slot: number): number {
  return slot % 4 === 0 ? NFT_REG_1 + slot / 4 : 8 + slot;
}

export const NFT_PAYLOAD_LL = 0;
export const NFT_PAYLOAD_NETWORK = 1;
export const NFT_PAYLOAD_TRANSPORT = 2;

export const NFT_META_MARK = 3;
export const NFT_META_IIF = 4;
export const NFT_META_IIFNAME = 6;
export const NFT_META_L4PROTO = 16;

export const NFT_CT_STATE = 0;

/** Verdict codes (NF_DROP, NF_ACCEPT and nf_tables' own). */
export const NF_DROP = 0;
export const NF_ACCEPT = 1;
export const NFT_JUMP = -3;
export const NFT_GOTO = -4;
export const NFT_RETURN = -5;

export const NFT_CMP_EQ = 0;
export const NFT_CMP_NEQ = 1;
export const NFT_CMP_LTE = 3;
export const NFT_CMP_GTE = 5;

export const NFT_LOOKUP_F_INV = 1;
export const NFT_DYNSET_OP_UPDATE = 1;
export const NFT_NG_RANDOM = 1;

export const NFTA_FIB_F_SADDR = 1 << 0;
export const NFTA_FIB_F_DADDR = 1 << 1;
export const NFT_FIB_RESULT_ADDRTYPE = 3;
export const RTN_LOCAL = 2;

export const NFT_NAT_DNAT = 1;
export const NF_NAT_RANGE_PROTO_SPECIFIED = 1 << 1;
export const NF_NAT_RANGE_PROTO_RANDOM_FULLY = 1 << 4;
export const NFPROTO_IPV4 = 2;
export const NFPROTO_IPV6 = 10;

export const NFT_REJECT_ICMP_UNREACH = 0;

/** Set flags (enum nft_set_flags) and the one set element flag kproxy uses. */
export const NFT_SET_ANONYMOUS = 0x1;
export const NFT_SET_CONSTANT = 0x2;
export const NFT_SET_INTERVAL = 0x4;
export const NFT_SET_MAP = 0x8;
export const NFT_SET_TIMEOUT = 0x10;
export const NFT_SET_EVAL = 0x20;
export const NFT_SET_ELEM_INTERVAL_END = 0x1;

/** IP protocol numbers of the protocols kproxy's rules name. */
export const IP_PROTOCOLS: Readonly<Record<string, number>> = { tcp: 6, udp: 17, sctp: 132 };
/** IP_PROTOCOL_NAMES: IP_PROTOCOLS the other way round. */
export const IP_PROTOCOL_NAMES: Readonly<Record<number, string>> = Object.fromEntries(Object.entries(IP_PROTOCOLS).map(([name, n]) => [n, name]));

/** Verdict: what a rule or a map element decides. */
export interface Verdict {
  readonly code: number;
  readonly chain?: string;
}

export type Expr =
  | { readonly kind: 'payload'; readonly base: number; readonly offset: number; readonly len: number; readonly dreg: number }
  | { readonly kind: 'meta'; readonly key: number; readonly dreg: number }
  | { readonly kind: 'meta-set'; readonly key: number; readonly sreg: number }
  | { readonly kind: 'ct'; readonly key: number; readonly dreg: number }
  | { readonly kind: 'cmp'; readonly sreg: number; readonly op: number; readonly data: Uint8Array }
  | { readonly kind: 'range'; readonly sreg: number; readonly op: number; readonly from: Uint8Array; readonly to: Uint8Array }
  /** bitwise: dreg = (sreg & mask) ^ xor; withOp: nft writes NFTA_BITWISE_OP (boolean) for `mark set`/`mark and` only. */
  | { readonly kind: 'bitwise'; readonly sreg: number; readonly dreg: number; readonly mask: Uint8Array; readonly xor: Uint8Array; readonly withOp: boolean }
  | { readonly kind: 'lookup'; readonly sreg: number; readonly dreg: number | null; readonly set: string; readonly setId: number | null; readonly invert: boolean }
  | { readonly kind: 'immediate'; readonly dreg: number; readonly data: Uint8Array }
  | { readonly kind: 'verdict'; readonly verdict: Verdict }
  | { readonly kind: 'numgen'; readonly dreg: number; readonly modulus: number }
  | { readonly kind: 'fib'; readonly flags: number; readonly result: number; readonly dreg: number }
  | { readonly kind: 'dnat'; readonly family: number; readonly regAddr: number; readonly regProto: number }
  | { readonly kind: 'masq'; readonly flags: number }
  | { readonly kind: 'reject'; readonly icmpCode: number }
  | { readonly kind: 'dynset-update'; readonly sreg: number; readonly set: string; readonly setId: number | null };

function u8(n: number): Uint8Array {
  return Uint8Array.of(n);
}

/** writeVerdict writes NFTA_DATA_VERDICT: the code and, for jump and goto, the chain. */
export function writeVerdict(b: NlBuilder, type: number, v: Verdict): void {
  const data = b.nest(type);
  const verdict = b.nest(2); // NFTA_DATA_VERDICT
  b.u32be(1, v.code); // NFTA_VERDICT_CODE
  if (v.chain !== undefined) b.strz(2, v.chain); // NFTA_VERDICT_CHAIN
  b.endNest(verdict);
  b.endNest(data);
}

/** writeValue writes an NFTA_DATA_VALUE nest of `type`. */
export function writeValue(b: NlBuilder, type: number, data: Uint8Array): void {
  const n = b.nest(type);
  b.attr(1, data); // NFTA_DATA_VALUE
  b.endNest(n);
}

/** writeExpr writes one expression as an NFTA_LIST_ELEM { NFTA_EXPR_NAME, NFTA_EXPR_DATA { … } }. */
export function writeExpr(b: NlBuilder, e: Expr): void {
  const elem = b.nest(1); // NFTA_LIST_ELEM
  const name = e.kind === 'verdict' ? 'immediate' : e.kind === 'meta-set' ? 'meta' : e.kind === 'dnat' ? 'nat' : e.kind === 'dynset-update' ? 'dynset' : e.kind;
  b.strz(1, name); // NFTA_EXPR_NAME
  const data = b.nest(2); // NFTA_EXPR_DATA
  switch (e.kind) {
    case 'payload':
      b.u32be(1, e.dreg); // NFTA_PAYLOAD_DREG
      b.u32be(2, e.base);
      b.u32be(3, e.offset);
      b.u32be(4, e.len);
      break;
    case 'meta':
      b.u32be(2, e.key); // NFTA_META_KEY
      b.u32be(1, e.dreg); // NFTA_META_DREG
      break;
    case 'meta-set':
      b.u32be(2, e.key);
      b.u32be(3, e.sreg); // NFTA_META_SREG
      break;
    case 'ct':
      b.u32be(2, e.key); // NFTA_CT_KEY
      b.u32be(1, e.dreg); // NFTA_CT_DREG
      break;
    case 'cmp':
      b.u32be(1, e.sreg); // NFTA_CMP_SREG
      b.u32be(2, e.op); // NFTA_CMP_OP
      writeValue(b, 3, e.data); // NFTA_CMP_DATA
      break;
    case 'range':
      b.u32be(1, e.sreg); // NFTA_RANGE_SREG
      b.u32be(2, e.op); // NFTA_RANGE_OP
      writeValue(b, 3, e.from); // NFTA_RANGE_FROM_DATA
      writeValue(b, 4, e.to); // NFTA_RANGE_TO_DATA
      break;
    case 'bitwise':
      b.u32be(1, e.sreg); // NFTA_BITWISE_SREG
      b.u32be(2, e.dreg); // NFTA_BITWISE_DREG
      if (e.withOp) b.u32be(6, 0); // NFTA_BITWISE_OP: NFT_BITWISE_BOOL
      b.u32be(3, e.mask.length); // NFTA_BITWISE_LEN
      writeValue(b, 4, e.mask); // NFTA_BITWISE_MASK
      writeValue(b, 5, e.xor); // NFTA_BITWISE_XOR
      break;
    case 'lookup':
      b.u32be(2, e.sreg); // NFTA_LOOKUP_SREG
      if (e.dreg !== null) b.u32be(3, e.dreg); // NFTA_LOOKUP_DREG
      b.strz(1, e.set); // NFTA_LOOKUP_SET
      if (e.setId !== null) b.u32be(4, e.setId); // NFTA_LOOKUP_SET_ID
      if (e.invert) b.u32be(5, NFT_LOOKUP_F_INV); // NFTA_LOOKUP_FLAGS
      break;
    case 'immediate':
      b.u32be(1, e.dreg); // NFTA_IMMEDIATE_DREG
      writeValue(b, 2, e.data); // NFTA_IMMEDIATE_DATA
      break;
    case 'verdict':
      b.u32be(1, NFT_REG_VERDICT);
      writeVerdict(b, 2, e.verdict);
      break;
    case 'numgen':
      b.u32be(1, e.dreg); // NFTA_NG_DREG
      b.u32be(2, e.modulus); // NFTA_NG_MODULUS
      b.u32be(3, NFT_NG_RANDOM); // NFTA_NG_TYPE
      b.u32be(4, 0); // NFTA_NG_OFFSET
      break;
    case 'fib':
      b.u32be(3, e.flags); // NFTA_FIB_FLAGS
      b.u32be(2, e.result); // NFTA_FIB_RESULT
      b.u32be(1, e.dreg); // NFTA_FIB_DREG
      break;
    case 'dnat':
      b.u32be(1, NFT_NAT_DNAT); // NFTA_NAT_TYPE
      b.u32be(2, e.family); // NFTA_NAT_FAMILY
      b.u32be(3, e.regAddr); // NFTA_NAT_REG_ADDR_MIN
      b.u32be(5, e.regProto); // NFTA_NAT_REG_PROTO_MIN
      b.u32be(7, NF_NAT_RANGE_PROTO_SPECIFIED); // NFTA_NAT_FLAGS
      break;
    case 'masq':
      b.u32be(1, e.flags); // NFTA_MASQ_FLAGS
      break;
    case 'reject':
      b.u32be(1, NFT_REJECT_ICMP_UNREACH); // NFTA_REJECT_TYPE
      b.attr(2, u8(e.icmpCode)); // NFTA_REJECT_ICMP_CODE
      break;
    case 'dynset-update':
      b.u32be(4, e.sreg); // NFTA_DYNSET_SREG_KEY
      b.u32be(3, NFT_DYNSET_OP_UPDATE); // NFTA_DYNSET_OP
      b.strz(1, e.set); // NFTA_DYNSET_SET_NAME
      if (e.setId !== null) b.u32be(2, e.setId); // NFTA_DYNSET_SET_ID
      break;
  }
  b.endNest(data);
  b.endNest(elem);
}

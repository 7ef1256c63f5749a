/**
 * Values as nf_tables holds them: addresses in network byte order, ports as
 * big-endian 16-bit numbers, protocols as one byte; in a concatenated key
 * (`ipv4_addr . inet_proto . inet_service`) each part padded to 4 bytes. And
 * the set types nft writes for kproxy's sets (nft's datatype numbers).
 */

export type AddrFamily = 'ip' | 'ip6';

/** parseV4 reads a dotted quad as kproxy writes it (no leading zeros, as canonicalIP); null otherwise. */
function parseV4(text: string): Uint8Array | null {
  const out = new Uint8Array(4);
  let part = 0;
  let value = 0;
  let digits = 0;
  for (let i = 0; i <= text.length; i++) {
    const c = i < text.length ? text.charCodeAt(i) : 0x2e;
    if (c === 0x2e) {
      if (digits === 0 || part > 3) return null;
      out[part++] = value;
      value = 0;
      digits = 0;
    } else if (c >= 0x30 && c <= 0x39) {
      if (digits > 0 && value === 0) return null;
      value = value * 10 + (c - 0x30);
      if (++digits > 3 || value > 255) return null;
    } else return null;
  }
  return part === 4 ? out : null;
}

function parseV6(text: string): Uint8Array | null {
  if (!/^[0-9a-fA-F:.]+$/.test(text) || text.length > 45) return null;
  let tail4: Uint8Array | null = null;
  let body = text;
  const lastColon = text.lastIndexOf(':');
  if (text.includes('.')) {
    tail4 = parseV4(text.slice(lastColon + 1));
    if (!tail4) return null;
    body = text.slice(0, lastColon + 1) + '0:0';
  }
  const halves = body.split('::');
  if (halves.length > 2) return null;
  const groups = (s: string) => (s === '' ? [] : s.split(':'));
  const head = groups(halves[0]);
  const rest = halves.length === 2 ? groups(halves[1]) : [];
  const missing = 8 - head.length - rest.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return null;
  const all = [...head, ...new Array<string>(halves.length === 2 ? missing : 0).fill('0'), ...rest];
  const out = new Uint8Array(16);
  for (let i = 0; i < 8; i++) {
    if (!/^[0-9a-fA-F]{1,4}$/.test(all[i])) return null;
    const v = Number.parseInt(all[i], 16);
    out[2 * i] = v >> 8;
    out[2 * i + 1] = v & 0xff;
  }
  if (tail4) out.set(tail4, 12);
  return out;
}

/** parseAddress reads an address of a family into its bytes; null when it is not one. */
export function parseAddress(text: string, family: AddrFamily): Uint8Array | null {
  return family === 'ip' ? parseV4(text) : parseV6(text);
}

/** addressBytes is parseAddress for values that must be addresses (throws otherwise). */
export function addressBytes(text: string, family: AddrFamily): Uint8Array {
  const b = parseAddress(text, family);
  if (!b) throw new NftValueError(`"${text}" is not an ${family === 'ip' ? 'IPv4' : 'IPv6'} address`);
  return b;
}

/** NftValueError: a value the encoder cannot read (the runner falls back to nft for that transaction). */
export class NftValueError extends Error {}

export type AddressRange =
  { readonly kind: 'prefix'; readonly first: Uint8Array; readonly last: Uint8Array; readonly prefix: number } | { readonly kind: 'range'; readonly first: Uint8Array; readonly last: Uint8Array };

/**
 * addressRange reads "A", "A/n" (A must be the network address, as kproxy
 * writes it) or "A-B" (A ≤ B); null for anything else.
 */
export function addressRange(text: string, family: AddrFamily): AddressRange | null {
  const bits = family === 'ip' ? 32 : 128;
  const dash = text.indexOf('-');
  if (dash > 0) {
    const first = parseAddress(text.slice(0, dash), family);
    const last = parseAddress(text.slice(dash + 1), family);
    if (!first || !last || Buffer.compare(first, last) > 0) return null;
    return { kind: 'range', first, last };
  }
  const slash = text.indexOf('/');
  const first = parseAddress(slash === -1 ? text : text.slice(0, slash), family);
  if (!first) return null;
  let prefix = bits;
  if (slash !== -1) {
    const p = text.slice(slash + 1);
    if (!/^\d{1,3}$/.test(p) || Number(p) > bits) return null;
    prefix = Number(p);
  }
  const last = Uint8Array.from(first);
  for (let i = prefix; i < bits; i++) {
    const bit = 0x80 >> (i & 7);
    // The network address must have no host bits: nft would list another text than the one written.
    if (first[i >> 3] & bit) return null;
    last[i >> 3] |= bit;
  }
  return { kind: 'prefix', first, last, prefix };
}

/** nft datatype numbers (nftables include/datatype.h), as the kernel keeps them in NFTA_SET_KEY_TYPE. */
export const TYPE_IPADDR = 7;
export const TYPE_IP6ADDR = 8;
export const TYPE_INET_PROTOCOL = 12;
export const TYPE_INET_SERVICE = 13;
/** TYPE_BITS: nft packs a concatenation's types into one number, 6 bits each, first part highest. */
const TYPE_BITS = 6;

const TYPE_NAMES: Readonly<Record<string, { id: number; len: number }>> = {
  ipv4_addr: { id: TYPE_IPADDR, len: 4 },
  ipv6_addr: { id: TYPE_IP6ADDR, len: 16 },
  inet_proto: { id: TYPE_INET_PROTOCOL, len: 1 },
  inet_service: { id: TYPE_INET_SERVICE, len: 2 },
};

/** SetKeyType: a set's key type as nft writes it: the packed type id, the key length, the parts. */
export interface SetKeyType {
  readonly id: number;
  readonly len: number;
  readonly parts: readonly string[];
}

/** setKeyType reads "ipv4_addr" or "ipv4_addr . inet_proto . inet_service"; null for a type kproxy does not write. */
export function setKeyType(text: string): SetKeyType | null {
  const parts = text.split(' . ');
  let id = 0;
  let len = 0;
  for (const p of parts) {
    const t = TYPE_NAMES[p];
    if (!t) return null;
    id = (id << TYPE_BITS) | t.id;
    len += parts.length > 1 ? (t.len + 3) & ~3 : t.len;
  }
  return { id, len, parts };
}

const PROTOCOL_NUMBERS: Readonly<Record<string, number>> = { tcp: 6, udp: 17, sctp: 132 };

/**
 * inferKeyType: the type of an element key kproxy writes, from its text
 * ("10.0.0.1", "10.0.0.1 . tcp . 80", "tcp . 3001"), for sets that were made
 * in an earlier transaction.
 */
export function inferKeyType(key: string, family: AddrFamily): string | null {
  const parts = key.split(' . ');
  const kinds = parts.map((p, i) => {
    if (parseAddress(p, family)) return family === 'ip' ? 'ipv4_addr' : 'ipv6_addr';
    if (PROTOCOL_NUMBERS[p] !== undefined) return 'inet_proto';
    if (/^\d{1,5}$/.test(p) && i > 0) return 'inet_service';
    return null;
  });
  if (kinds.some((k) => k === null)) return null;
  return kinds.join(' . ');
}

/** encodeKey writes an element key of a set type; throws NftValueError when the text does not fit the type. */
export function encodeKey(key: string, type: SetKeyType, family: AddrFamily): Uint8Array {
  const parts = key.split(' . ');
  if (parts.length !== type.parts.length) throw new NftValueError(`element "${key}" does not fit the set's type ${type.parts.join(' . ')}`);
  const out = new Uint8Array(type.len);
  let off = 0;
  const concat = parts.length > 1;
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i];
    const t = type.parts[i];
    let bytes: Uint8Array;
    if (t === 'ipv4_addr' || t === 'ipv6_addr') {
      if ((t === 'ipv4_addr') !== (family === 'ip')) throw new NftValueError(`a ${t} set in a table of family ${family}`);
      bytes = addressBytes(p, family);
    } else if (t === 'inet_proto') {
      const n = PROTOCOL_NUMBERS[p];
      if (n === undefined) throw new NftValueError(`"${p}" is not a protocol kproxy writes`);
      bytes = Uint8Array.of(n);
    } else {
      if (!/^\d{1,5}$/.test(p) || Number(p) > 65535) throw new NftValueError(`"${p}" is not a port`);
      bytes = Uint8Array.of(Number(p) >> 8, Number(p) & 0xff);
    }
    out.set(bytes, off);
    off += concat ? (bytes.length + 3) & ~3 : bytes.length;
  }
  return out;
}

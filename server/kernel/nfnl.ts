/**
 * Netlink framing for the netfilter subsystem (nfnetlink), in TypeScript:
 * messages (nlmsghdr + nfgenmsg) with type-length-value attributes, built into
 * one growing buffer and read back. The byte layout is the kernel's
 * (include/uapi/linux/netlink.h, linux/netfilter/nfnetlink.h): host byte order
 * (little endian on every platform kproxy ships for) for headers and
 * attribute headers, 4-byte alignment, NLA_F_NESTED on nested attributes.
 * What the attributes mean is nft-netlink-*.ts's business.
 */

export const NLMSG_HDRLEN = 16;
export const NFGENMSG_LEN = 4;
export const NLA_HDRLEN = 4;
export const NLA_F_NESTED = 0x8000;
const NLA_TYPE_MASK = 0x3fff;
/** NLA_MAX_LEN: an attribute's length field (nla_len) is 16 bits and counts its header: no attribute, nest or not, holds more. */
export const NLA_MAX_LEN = 0xffff;

export const NLM_F_REQUEST = 0x1;
export const NLM_F_MULTI = 0x2;
export const NLM_F_ACK = 0x4;
export const NLM_F_DUMP = 0x300;
export const NLM_F_REPLACE = 0x100;
export const NLM_F_EXCL = 0x200;
export const NLM_F_CREATE = 0x400;
export const NLM_F_APPEND = 0x800;

export const NLMSG_ERROR = 2;
export const NLMSG_DONE = 3;
/** NLMSGERR_ATTR_MSG, NLMSGERR_ATTR_OFFS: extended ack attributes (NETLINK_EXT_ACK) after a capped error. */
export const NLMSGERR_ATTR_MSG = 1;
export const NLMSGERR_ATTR_OFFS = 2;
/** NLM_F_CAPPED, NLM_F_ACK_TLVS: an error message's flags: the request is cut to its header; TLVs follow. */
const NLM_F_CAPPED = 0x100;
const NLM_F_ACK_TLVS = 0x200;

export const NFNL_MSG_BATCH_BEGIN = 0x10;
export const NFNL_MSG_BATCH_END = 0x11;
export const NFNL_SUBSYS_NFTABLES = 10;
export const NFNETLINK_V0 = 0;

const align4 = (n: number) => (n + 3) & ~3;

/**
 * NlOverflowError: an attribute would not fit its 16-bit length. The builder
 * throws rather than write it: a length that wraps makes the kernel read a
 * shorter attribute (a nest of set elements cut short, and the rest taken
 * as other attributes), which it may accept as a smaller, wrong object.
 */
export class NlOverflowError extends Error {
  /** bytes: how long the attribute would have been. */
  readonly bytes: number;
  constructor(what: string, bytes: number) {
    super(`${what} of ${bytes} bytes is over netlink's limit of ${NLA_MAX_LEN} bytes for one attribute`);
    this.bytes = bytes;
  }
}

/**
 * NlBuilder writes netlink messages one after another into one buffer. A
 * message is opened with begin(), filled with attributes (nests opened and
 * closed in order) and closed with end(), which writes its length. Bytes are
 * written once into zeroed memory (a grown buffer is a new zeroed one), so
 * padding needs no writes: a first sync at 10,000 services is ~100 MB of
 * messages, written byte by byte here.
 */
export class NlBuilder {
  #buf: Buffer;
  #len = 0;

  constructor(capacity = 64 * 1024) {
    this.#buf = Buffer.alloc(capacity);
  }

  get length(): number {
    return this.#len;
  }

  /** bytes returns what was written (a view: valid until the next write). */
  bytes(): Buffer {
    return this.#buf.subarray(0, this.#len);
  }

  #reserve(n: number): number {
    const at = this.#len;
    const need = at + n;
    if (need > this.#buf.length) {
      let cap = this.#buf.length * 2;
      while (cap < need) cap *= 2;
      const next = Buffer.alloc(cap);
      this.#buf.copy(next, 0, 0, at);
      this.#buf = next;
    }
    this.#len = need;
    return at;
  }

  #u16(at: number, v: number): void {
    const b = this.#buf;
    b[at] = v & 0xff;
    b[at + 1] = (v >>> 8) & 0xff;
  }

  #u32be(at: number, v: number): void {
    const b = this.#buf;
    b[at] = (v >>> 24) & 0xff;
    b[at + 1] = (v >>> 16) & 0xff;
    b[at + 2] = (v >>> 8) & 0xff;
    b[at + 3] = v & 0xff;
  }

  /** begin opens a message: nlmsghdr and nfgenmsg (family, version 0, res_id big endian); returns its offset for end(). */
  begin(type: number, flags: number, seq: number, family: number, resId = 0): number {
    const at = this.#reserve(NLMSG_HDRLEN + NFGENMSG_LEN);
    const b = this.#buf;
    this.#u16(at + 4, type);
    this.#u16(at + 6, flags);
    b.writeUInt32LE(seq >>> 0, at + 8);
    b[at + 16] = family;
    b[at + 17] = NFNETLINK_V0;
    b[at + 18] = (resId >>> 8) & 0xff;
    b[at + 19] = resId & 0xff;
    return at;
  }

  /** end closes the message opened at `at`. */
  end(at: number): void {
    this.#buf.writeUInt32LE(this.#len - at, at);
  }

  /**
   * truncate takes back everything written after `length` (an element that
   * did not fit its message): the bytes are zeroed again, as the builder
   * expects of memory it has not written.
   */
  truncate(length: number): void {
    if (length > this.#len || length < 0) throw new RangeError(`cannot truncate ${this.#len} bytes to ${length}`);
    this.#buf.fill(0, length, this.#len);
    this.#len = length;
  }

  /** attr writes one attribute whose payload is `data` (padded to 4 bytes). */
  attr(type: number, data: Uint8Array): void {
    const len = NLA_HDRLEN + data.length;
    if (len > NLA_MAX_LEN) throw new NlOverflowError(`attribute ${type}`, len);
    const at = this.#reserve(align4(len));
    this.#u16(at, len);
    this.#u16(at + 2, type);
    if (data.length <= 16) for (let i = 0; i < data.length; i++) this.#buf[at + NLA_HDRLEN + i] = data[i];
    else this.#buf.set(data, at + NLA_HDRLEN);
  }

  /** strz writes a NUL-terminated string attribute. */
  strz(type: number, s: string): void {
    const n = s.length;
    let ascii = true;
    for (let i = 0; i < n; i++) {
      if (s.charCodeAt(i) > 0x7f) {
        ascii = false;
        break;
      }
    }
    const bytes = ascii ? n : Buffer.byteLength(s);
    const len = NLA_HDRLEN + bytes + 1;
    if (len > NLA_MAX_LEN) throw new NlOverflowError(`string attribute ${type}`, len);
    const at = this.#reserve(align4(len));
    this.#u16(at, len);
    this.#u16(at + 2, type);
    const b = this.#buf;
    if (ascii) for (let i = 0; i < n; i++) b[at + NLA_HDRLEN + i] = s.charCodeAt(i);
    else b.write(s, at + NLA_HDRLEN, 'utf8');
  }

  /** u32be writes a 32-bit attribute in network byte order (most nf_tables numbers). */
  u32be(type: number, v: number): void {
    const at = this.#reserve(8);
    this.#u16(at, 8);
    this.#u16(at + 2, type);
    this.#u32be(at + 4, v >>> 0);
  }

  /** u64be writes a 64-bit attribute in network byte order. */
  u64be(type: number, v: bigint): void {
    const at = this.#reserve(12);
    this.#u16(at, 12);
    this.#u16(at + 2, type);
    this.#buf.writeBigUInt64BE(v, at + 4);
  }

  /** nest opens a nested attribute; close it with endNest(). */
  nest(type: number): number {
    const at = this.#reserve(NLA_HDRLEN);
    this.#u16(at + 2, type | NLA_F_NESTED);
    return at;
  }

  /** endNest closes the nest opened at `at`; a nest longer than NLA_MAX_LEN throws NlOverflowError (see fits()). */
  endNest(at: number): void {
    const len = this.#len - at;
    if (len > NLA_MAX_LEN) throw new NlOverflowError(`nested attribute ${this.#buf.readUInt16LE(at + 2) & NLA_TYPE_MASK}`, len);
    this.#u16(at, len);
  }

  /** fits says whether the nest opened at `at` can still be closed (its length so far within NLA_MAX_LEN). */
  fits(at: number): boolean {
    return this.#len - at <= NLA_MAX_LEN;
  }

  /** raw appends bytes as they are (already aligned). */
  raw(data: Uint8Array): void {
    const at = this.#reserve(data.length);
    this.#buf.set(data, at);
  }
}

/** NlMessage is one message read back: its header, and its payload after the nfgenmsg. */
export interface NlMessage {
  readonly type: number;
  readonly flags: number;
  readonly seq: number;
  /** family: nfgenmsg's family (0 for NLMSG_ERROR/NLMSG_DONE, which have none). */
  readonly family: number;
  /** body: the whole message after nlmsghdr (for NLMSG_ERROR: error code, request header, TLVs). */
  readonly body: Buffer;
}

/**
 * NlParseError: bytes read back as netlink are not well formed: a length that
 * is shorter than its header or runs past the bytes it sits in, or bytes left
 * over that cannot be a whole message or attribute. The parsers below throw
 * it, saying where, rather than read past the buffer (a bare RangeError from
 * Buffer) or take a cut message for a whole one.
 */
export class NlParseError extends Error {}

/**
 * parseMessages splits a datagram (or several, concatenated) into messages.
 * Every length is checked against the bytes left before anything is read; a
 * message whose aligned length passes the end (an unaligned last one) ends
 * the walk; fewer bytes left than a header are an NlParseError.
 */
export function parseMessages(buf: Buffer, out: NlMessage[] = []): NlMessage[] {
  let off = 0;
  while (off < buf.length) {
    const left = buf.length - off;
    if (left < NLMSG_HDRLEN) throw new NlParseError(`${left} bytes after the last netlink message, at byte ${off} of ${buf.length}: too short for a message header (${NLMSG_HDRLEN})`);
    const len = buf.readUInt32LE(off);
    if (len < NLMSG_HDRLEN || len > left)
      throw new NlParseError(`malformed netlink message at byte ${off} of ${buf.length}: its length is ${len}, ${left} bytes are left (a header is ${NLMSG_HDRLEN})`);
    const type = buf.readUInt16LE(off + 4);
    out.push({
      type,
      flags: buf.readUInt16LE(off + 6),
      seq: buf.readUInt32LE(off + 8),
      family: type >= 0x10 && len >= NLMSG_HDRLEN + NFGENMSG_LEN ? buf.readUInt8(off + 16) : 0,
      body: buf.subarray(off + NLMSG_HDRLEN, off + len),
    });
    off += align4(len);
  }
  return out;
}

/** Attrs: the attributes of one level, by type (the last one of a type wins; lists use attrList). */
export type Attrs = Map<number, Buffer>;

/** parseAttrs reads one level of attributes from `buf` (from `offset`). */
export function parseAttrs(buf: Buffer, offset = 0): Attrs {
  const out: Attrs = new Map();
  for (const [type, data] of attrList(buf, offset)) out.set(type, data);
  return out;
}

/**
 * attrList reads one level of attributes in order, repeated types kept. As
 * parseMessages: every length is checked before it is used, an attribute
 * running past the end or bytes too few for an attribute header are an
 * NlParseError, and so is an offset past the end (a message too short to
 * hold its fixed header).
 */
export function attrList(buf: Buffer, offset = 0): [number, Buffer][] {
  if (offset > buf.length) throw new NlParseError(`netlink attributes would start at byte ${offset} of ${buf.length}: the message is shorter than its fixed header`);
  const out: [number, Buffer][] = [];
  let off = offset;
  while (off < buf.length) {
    const left = buf.length - off;
    if (left < NLA_HDRLEN) throw new NlParseError(`${left} bytes after the last netlink attribute, at byte ${off} of ${buf.length}: too short for an attribute header (${NLA_HDRLEN})`);
    const len = buf.readUInt16LE(off);
    if (len < NLA_HDRLEN || len > left) throw new NlParseError(`malformed netlink attribute at byte ${off} of ${buf.length}: its length is ${len}, ${left} bytes are left`);
    out.push([buf.readUInt16LE(off + 2) & NLA_TYPE_MASK, buf.subarray(off + NLA_HDRLEN, off + len)]);
    off += align4(len);
  }
  return out;
}

/** attrBody: a message's attributes start after the nfgenmsg. */
export function messageAttrs(m: NlMessage): Attrs {
  return parseAttrs(m.body, NFGENMSG_LEN);
}

export const strzOf = (b: Buffer | undefined): string | undefined => (b === undefined ? undefined : b.toString('utf8', 0, b.indexOf(0) === -1 ? b.length : b.indexOf(0)));
export const u32beOf = (b: Buffer | undefined): number | undefined => (b === undefined || b.length < 4 ? undefined : b.readUInt32BE(0));

/** NlError is an NLMSG_ERROR read back: errno (0: an ack) and the sequence number of the request it answers. */
export interface NlError {
  readonly errno: number;
  readonly seq: number;
  readonly type: number;
  /** message: the kernel's extended ack text, if it gave one. */
  readonly message: string | null;
}

/** NLMSGERR_MIN: an NLMSG_ERROR's body holds at least the error code and the request's header. */
const NLMSGERR_MIN = 4 + NLMSG_HDRLEN;

/**
 * parseError reads an NLMSG_ERROR's body: error (negative errno), the
 * request's header (or the whole request), optional TLVs. A body too short
 * for the error code and the header, or an echoed request longer than the
 * body, is an NlParseError.
 */
export function parseError(m: NlMessage): NlError {
  const body = m.body;
  if (body.length < NLMSGERR_MIN) throw new NlParseError(`an NLMSG_ERROR (sequence ${m.seq}) of ${body.length} bytes: the error code and the request's header take ${NLMSGERR_MIN}`);
  // 0 - x, not -x: an ack is errno 0, not -0.
  const errno = 0 - body.readInt32LE(0);
  const seq = body.readUInt32LE(4 + 8);
  const type = body.readUInt16LE(4 + 4);
  let message: string | null = null;
  if (m.flags & NLM_F_ACK_TLVS) {
    // With NETLINK_CAP_ACK the request is cut to its header (NLM_F_CAPPED); TLVs follow it.
    const reqLen = m.flags & NLM_F_CAPPED ? NLMSG_HDRLEN : body.readUInt32LE(4);
    if (reqLen < NLMSG_HDRLEN || 4 + reqLen > body.length) throw new NlParseError(`an NLMSG_ERROR (sequence ${seq}) echoes a request of ${reqLen} bytes in a body of ${body.length}`);
    const tlvs = parseAttrs(body, Math.min(body.length, 4 + align4(reqLen)));
    message = strzOf(tlvs.get(NLMSGERR_ATTR_MSG)) ?? null;
  }
  return { errno, seq, type, message };
}

import { describe, expect, it } from 'vitest';
import { attrList, NLA_F_NESTED, NlBuilder, NLMSG_ERROR, NlParseError, parseAttrs, parseError, parseMessages, type NlMessage } from './nfnl.ts';

/** message: one netlink message (header, then body), its length field as given (default: the real one), padded to 4 bytes unless told. */
function message(body: Buffer, o: { type?: number; flags?: number; seq?: number; len?: number; pad?: boolean } = {}): Buffer {
  const len = 16 + body.length;
  const b = Buffer.alloc(o.pad === false ? len : (len + 3) & ~3);
  b.writeUInt32LE(o.len ?? len, 0);
  b.writeUInt16LE(o.type ?? 0x0a01, 4);
  b.writeUInt16LE(o.flags ?? 0, 6);
  b.writeUInt32LE(o.seq ?? 7, 8);
  body.copy(b, 16);
  return b;
}

/** attr: one attribute, its length field as given (default: the real one), padded to 4 bytes unless told. */
function attr(type: number, data: Buffer, o: { len?: number; pad?: boolean } = {}): Buffer {
  const len = 4 + data.length;
  const b = Buffer.alloc(o.pad === false ? len : (len + 3) & ~3);
  b.writeUInt16LE(o.len ?? len, 0);
  b.writeUInt16LE(type, 2);
  data.copy(b, 4);
  return b;
}

const nfgen = Buffer.from([2, 0, 0, 0]);

describe('parseMessages', () => {
  it('reads consecutive messages, and a last message whose length is not a multiple of 4', () => {
    const two = Buffer.concat([message(Buffer.concat([nfgen, attr(1, Buffer.from('abc\0'))]), { seq: 1 }), message(Buffer.from('xyz'), { seq: 2, pad: false })]);
    const msgs = parseMessages(two);
    expect(msgs.map((m) => [m.seq, m.body.length, m.family])).toEqual([
      [1, 12, 2],
      [2, 3, 0],
    ]);
  });

  it('throws on a message whose length runs past the datagram, naming where', () => {
    const cut = message(Buffer.alloc(40)).subarray(0, 30);
    expect(() => parseMessages(cut)).toThrow(NlParseError);
    expect(() => parseMessages(cut)).toThrow('malformed netlink message at byte 0 of 30: its length is 56, 30 bytes are left');
    // The second message of a datagram, with a length 4 bytes too long.
    const second = Buffer.concat([message(Buffer.alloc(4)), message(Buffer.alloc(4), { len: 24 })]);
    expect(() => parseMessages(second)).toThrow('malformed netlink message at byte 20 of 40: its length is 24, 20 bytes are left');
  });

  it('throws on a length shorter than the header (0 would never move on)', () => {
    for (const len of [0, 4, 15]) expect(() => parseMessages(message(Buffer.alloc(8), { len }))).toThrow(`its length is ${len}`);
  });

  it('throws on bytes after the last message that cannot hold a header', () => {
    const trailing = Buffer.concat([message(Buffer.alloc(4)), Buffer.alloc(6)]);
    expect(() => parseMessages(trailing)).toThrow('6 bytes after the last netlink message, at byte 20 of 26');
    expect(() => parseMessages(Buffer.alloc(3))).toThrow(NlParseError);
    expect(parseMessages(Buffer.alloc(0))).toEqual([]);
  });
});

describe('attrList', () => {
  it('reads attributes in order, repeated types kept, the nested flag stripped, an unpadded last one included', () => {
    const b = Buffer.concat([attr(1, Buffer.from([1])), attr(1 | NLA_F_NESTED, attr(2, Buffer.alloc(4))), attr(3, Buffer.from('ab'), { pad: false })]);
    expect(attrList(b).map(([t, d]) => [t, d.length])).toEqual([
      [1, 1],
      [1, 8],
      [3, 2],
    ]);
  });

  it('reads what NlBuilder writes', () => {
    const b = new NlBuilder(64);
    const at = b.begin(0x0a01, 0, 1, 2);
    b.strz(1, 'kube-proxy');
    const n = b.nest(2);
    b.u32be(1, 7);
    b.endNest(n);
    b.end(at);
    const [m] = parseMessages(b.bytes());
    const top = parseAttrs(m.body, 4);
    expect(top.get(1)!.toString()).toBe('kube-proxy\0');
    expect(parseAttrs(top.get(2)!).get(1)!.readUInt32BE(0)).toBe(7);
  });

  it('throws on an attribute running past its container, one shorter than its header, or bytes too few for a header', () => {
    expect(() => attrList(attr(1, Buffer.alloc(8)).subarray(0, 10))).toThrow('malformed netlink attribute at byte 0 of 10: its length is 12, 10 bytes are left');
    expect(() => attrList(attr(1, Buffer.alloc(4), { len: 2 }))).toThrow('its length is 2');
    expect(() => attrList(Buffer.concat([attr(1, Buffer.alloc(4)), Buffer.alloc(2)]))).toThrow('2 bytes after the last netlink attribute, at byte 8 of 10');
  });

  it('throws when the attributes would start past the end (a message too short for its fixed header)', () => {
    expect(() => attrList(Buffer.alloc(2), 4)).toThrow('netlink attributes would start at byte 4 of 2');
    expect(attrList(Buffer.alloc(4), 4)).toEqual([]);
  });
});

describe('parseError', () => {
  /** errorMessage: an NLMSG_ERROR answering seq with -errno; capped (the request's header only) with an extended ack text, or echoing a request of reqLen bytes. */
  function errorMessage(o: { errno: number; seq: number; text?: string; reqLen?: number; bodyLen?: number }): NlMessage {
    const capped = o.reqLen === undefined;
    const req = Buffer.alloc(capped ? 16 : o.reqLen!);
    req.writeUInt32LE(capped ? 16 : o.reqLen!, 0);
    req.writeUInt16LE(0x0a06, 4);
    req.writeUInt32LE(o.seq, 8);
    const tlvs = o.text === undefined ? Buffer.alloc(0) : attr(1, Buffer.from(`${o.text}\0`));
    const code = Buffer.alloc(4);
    code.writeInt32LE(-o.errno, 0);
    let body = Buffer.concat([code, req, tlvs]);
    if (o.bodyLen !== undefined) body = body.subarray(0, o.bodyLen);
    const flags = (capped ? 0x100 : 0) | (o.text === undefined ? 0 : 0x200);
    return parseMessages(message(body, { type: NLMSG_ERROR, flags, seq: 0 }))[0];
  }

  it('reads the errno, the request it answers and the extended ack text', () => {
    expect(parseError(errorMessage({ errno: 2, seq: 9, text: 'Could not process rule' }))).toEqual({ errno: 2, seq: 9, type: 0x0a06, message: 'Could not process rule' });
    expect(parseError(errorMessage({ errno: 0, seq: 3 }))).toEqual({ errno: 0, seq: 3, type: 0x0a06, message: null });
    expect(parseError(errorMessage({ errno: 22, seq: 4, reqLen: 24, text: 'bad' })).message).toBe('bad');
  });

  it('throws on a body too short for the error code and the request header', () => {
    const short = errorMessage({ errno: 2, seq: 9, bodyLen: 12 });
    expect(() => parseError(short)).toThrow(NlParseError);
    expect(() => parseError(short)).toThrow('an NLMSG_ERROR (sequence 0) of 12 bytes: the error code and the request');
  });

  it('throws on an echoed request longer than the error message', () => {
    const m = errorMessage({ errno: 22, seq: 4, reqLen: 24, text: 'bad' });
    m.body.writeUInt32LE(4000, 4);
    expect(() => parseError(m)).toThrow('an NLMSG_ERROR (sequence 4) echoes a request of 4000 bytes in a body of');
  });
});

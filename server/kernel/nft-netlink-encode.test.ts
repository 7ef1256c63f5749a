import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { attrList, NLA_MAX_LEN, NlBuilder, NlOverflowError, parseAttrs, parseMessages } from './nfnl.ts';
import { encodeTransaction, nftOrder } from './nft-netlink-encode.ts';
import { compileRule, NftCompileError } from './nft-netlink-rules.ts';
import { parseTransaction } from './nft-script.ts';

/**
 * The encoder against nft itself: testdata/nfnl/*.hex are the batches nft
 * 1.0.6 sent for golden tables and hand-written probes (recorded by
 * test/kernel/record-nfnl-testdata.ts with strace); the encoder must send the
 * same bytes, message for message.
 */
const ROOT = join(import.meta.dirname, '../..');
const DIR = join(import.meta.dirname, 'testdata/nfnl');

function messages(b: Buffer): string[] {
  const out: string[] = [];
  for (let off = 0; off < b.length;) {
    const len = b.readUInt32LE(off);
    out.push(b.subarray(off, off + len).toString('hex'));
    off += (len + 3) & ~3;
  }
  return out;
}

/**
 * zeroPadding: a recorded message with every attribute's padding zeroed.
 * nft 1.0.6 once left a stray byte in the padding after a table name (a
 * continuation message of a big set's elements, in a new page of its
 * batch); the kernel never reads padding, and kproxy always writes zeros.
 */
function zeroPadding(hex: string): string {
  const m = Buffer.from(hex, 'hex');
  const walk = (from: number, to: number) => {
    for (let off = from; off + 4 <= to;) {
      const len = m.readUInt16LE(off);
      if (len < 4 || off + len > to) return;
      if (m.readUInt16LE(off + 2) & 0x8000) walk(off + 4, off + len);
      const padded = Math.min(to, (off + len + 3) & ~3);
      m.fill(0, off + len, padded);
      off = padded;
    }
  };
  // Attributes start after nlmsghdr (16) and nfgenmsg (4).
  walk(20, m.length);
  return m.toString('hex');
}

/** ifindex: the recordings ran with cbr0 as the namespace's second link. */
const ifindex = (name: string) => {
  if (name !== 'cbr0') throw new Error(`no interface ${name}`);
  return 2;
};

describe('the netlink encoder sends what nft 1.0.6 sends', () => {
  const recordings = readdirSync(DIR).filter((f) => f.endsWith('.hex'));

  it('has recordings of golden tables and probes', () => expect(recordings.length).toBeGreaterThanOrEqual(12));

  for (const file of recordings) {
    it(file.replace(/\.hex$/, ''), () => {
      const lines = readFileSync(join(DIR, file), 'utf8').split('\n');
      const source = /^# source: (.+)$/m.exec(lines.join('\n'))![1];
      const want = lines.filter((l) => l !== '' && !l.startsWith('#')).map(zeroPadding);
      const got = messages(encodeTransaction(parseTransaction(readFileSync(join(ROOT, source), 'utf8')), { ifindex }).bytes);
      expect(got.length).toBe(want.length);
      for (let i = 0; i < want.length; i++) expect(got[i], `message ${i}`).toBe(want[i]);
    });
  }
});

describe('the encoder maps sequence numbers back to lines', () => {
  it('gives every message the line it came from, the anonymous sets of a rule its line', () => {
    const text = [
      'add table ip t',
      'add chain ip t c',
      'add chain ip t e',
      'add rule ip t c numgen random mod 1 vmap { 0 : goto e }',
      'add rule ip t c ip saddr != { 10.0.0.0/8 , 192.168.0.0/16 } drop',
    ].join('\n');
    const batch = encodeTransaction(parseTransaction(text), { ifindex });
    // begin, table, 2 chains, (set, elements, rule) twice, end.
    expect(batch.lineOfSeq).toEqual([0, 1, 2, 3, 4, 4, 4, 5, 5, 5, 0]);
  });
});

describe('nftOrder', () => {
  it('sends a run of elements for one set first, then the rest last to first, as nft 1.0.6 collapses them', () => {
    const cmds = parseTransaction(
      [
        'add element ip t s { 1.1.1.1 }',
        'add element ip t s { 1.1.1.2 }',
        'add element ip t s { 1.1.1.3 }',
        'add element ip t m { 2.2.2.2 }',
        'add chain ip t c',
        'add element ip t s { 1.1.1.4 }',
      ].join('\n'),
    );
    expect(nftOrder(cmds).map((c) => c.line)).toEqual([1, 3, 2, 4, 5, 6]);
  });
});

describe('the rule compiler', () => {
  const ctx = { family: 'ip' as const, setId: () => null, newSetId: () => 1, ifindex };

  it.each([
    ['counter', 'a statement kproxy never writes'],
    ['ip protocol tcp accept', 'a selector it does not know'],
    ['ct state established accept', 'a conntrack state other than new'],
    ['ip6 daddr ::1 accept', 'the other family'],
    ['ip saddr 10.0.0.1/8 drop', 'a prefix with host bits'],
    ['meta l4proto icmp accept', 'a protocol kproxy does not write'],
    ['dnat to 10.0.0.1:80', 'dnat without its protocol'],
    ['jump a jump b', 'anything after the verdict'],
    ['log prefix "x"', 'logging'],
    ['', 'an empty rule'],
  ])('refuses %j (%s) instead of guessing', (rule) => {
    expect(() => compileRule(rule, ctx)).toThrow(NftCompileError);
  });

  it('reads the comment as user data, not as part of the rule', () => {
    const r = compileRule('jump x comment "a b c"', ctx);
    expect(r.comment).toBe('a b c');
    expect(r.exprs).toHaveLength(1);
  });
});

/** elementLists: every NEWSETELEM message of a batch: its sequence number and its elements' list (each element's bytes). */
function elementLists(batch: Buffer): { seq: number; listBytes: number; elements: Buffer[] }[] {
  const out: { seq: number; listBytes: number; elements: Buffer[] }[] = [];
  for (const m of parseMessages(batch)) {
    if ((m.type & 0xff) !== 12 || m.type >> 8 !== 10) continue;
    const list = parseAttrs(m.body, 4).get(3);
    if (!list) continue;
    out.push({ seq: m.seq, listBytes: list.length + 4, elements: attrList(list).map(([, e]) => e) });
  }
  return out;
}

describe('the encoder never writes an attribute over its 16-bit length', () => {
  const endpoints = (n: number) =>
    Array.from({ length: n }, (_, i) => `endpoint-${String(i).padStart(5, '0')}-a-namespace-of-some-length/a-service-name/tcp/http__10.${i >> 16}.${(i >> 8) & 255}.${i & 255}/8080`);

  function vmapTransaction(n: number): string {
    const names = endpoints(n);
    return [
      'add table ip t',
      'add chain ip t svc',
      ...names.map((e) => `add chain ip t ${e}`),
      `add rule ip t svc numgen random mod ${n} vmap { ${names.map((e, i) => `${i} : goto ${e}`).join(' , ')} }`,
    ].join('\n');
  }

  it.each([1, 2, 255, 256, 600, 700, 738, 760, 1000, 5000, 10_000])('splits a numgen vmap of %i endpoints into lists that each fit, every element once, in order', (n) => {
    const batch = encodeTransaction(parseTransaction(vmapTransaction(n)), { ifindex });
    const lists = elementLists(batch.bytes);
    for (const l of lists) expect(l.listBytes).toBeLessThanOrEqual(NLA_MAX_LEN);
    // Every list is one command: the rule's line, one sequence number.
    expect(new Set(lists.map((l) => l.seq)).size).toBe(1);
    expect(batch.lineOfSeq[lists[0].seq]).toBe(n + 3);
    const keys = lists.flatMap((l) => l.elements.map((e) => parseAttrs(parseAttrs(e).get(1)!).get(1)!.readUInt32LE(0)));
    // (numgen's register holds the number in host byte order.)
    expect(keys).toEqual(Array.from({ length: n }, (_, i) => i));
    // The lists hold as much as fits: every list but the last is more than one element short of the limit.
    for (const l of lists.slice(0, -1)) expect(l.listBytes).toBeGreaterThan(NLA_MAX_LEN - 2 * l.elements[0].length - 8);
  });

  it('splits a long source-range list (an interval set) the same way, with the interval ends where they belong', () => {
    const ranges = Array.from({ length: 4096 }, (_, i) => `${11 + (i >> 12)}.${(i >> 4) & 255}.${(i & 15) * 16}.0/28`);
    const text = ['add table ip t', 'add chain ip t fw', `add rule ip t fw ip saddr != { ${ranges.join(' , ')} } drop`].join('\n');
    const lists = elementLists(encodeTransaction(parseTransaction(text), { ifindex }).bytes);
    expect(lists.length).toBeGreaterThan(1);
    for (const l of lists) expect(l.listBytes).toBeLessThanOrEqual(NLA_MAX_LEN);
    // Each range is a start and an end (a flagged element), after the end of the gap below the first range, as nft writes it: none lost.
    const all = lists.flatMap((l) => l.elements);
    const ends = all.filter((e) => parseAttrs(e).has(3)).length;
    expect(ends).toBe(4096 + 1);
    expect(all.length).toBe(2 * 4096 + 1);
  });

  it('packs named-set elements into messages that each fit, however much it is asked to pack', () => {
    const cmds = ['add table ip t', 'add map ip t m { type ipv4_addr . inet_proto . inet_service : verdict ; }', 'add chain ip t c'];
    for (let i = 0; i < 3000; i++) cmds.push(`add element ip t m { 10.${i >> 8}.${i & 255}.1 . tcp . 80 comment "a-namespace/a-service-name-of-some-length:http" : goto c }`);
    const batch = encodeTransaction(parseTransaction(cmds.join('\n')), { ifindex, packElements: 1 << 20, anonName: (k, id) => `__${k}k_${id}` });
    const lists = elementLists(batch.bytes);
    expect(lists.length).toBeGreaterThan(1);
    for (const l of lists) expect(l.listBytes).toBeLessThanOrEqual(NLA_MAX_LEN);
    expect(lists.reduce((n, l) => n + l.elements.length, 0)).toBe(3000);
  });
});

describe('NlBuilder', () => {
  it('throws rather than let a nest length wrap past 65,535 bytes', () => {
    const b = new NlBuilder();
    const at = b.begin(1, 0, 1, 2);
    const n = b.nest(3);
    for (let i = 0; i < 20; i++) b.attr(1, new Uint8Array(4000));
    expect(b.fits(n)).toBe(false);
    expect(() => b.endNest(n)).toThrow(NlOverflowError);
    b.end(at);
  });

  it('closes a nest as long as an aligned nest can be (65,532 bytes)', () => {
    const b = new NlBuilder();
    const n = b.nest(3);
    b.attr(1, new Uint8Array(NLA_MAX_LEN - 11));
    expect(b.fits(n)).toBe(true);
    b.endNest(n);
    expect(b.bytes().readUInt16LE(0)).toBe(65_532);
  });

  it('throws for an attribute or a string over the limit', () => {
    const b = new NlBuilder();
    expect(() => b.attr(1, new Uint8Array(NLA_MAX_LEN))).toThrow(NlOverflowError);
    expect(() => b.strz(1, 'x'.repeat(NLA_MAX_LEN))).toThrow(NlOverflowError);
  });

  it('takes written bytes back and zeroes them (padding is never written again)', () => {
    const b = new NlBuilder();
    b.u32be(1, 0xffffffff);
    const mark = b.length;
    b.attr(2, new Uint8Array([9, 9, 9]));
    b.truncate(mark);
    b.attr(2, new Uint8Array([1]));
    expect([...b.bytes().subarray(mark)]).toEqual([5, 0, 2, 0, 1, 0, 0, 0]);
  });
});

import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
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

/** ifindex: the recordings ran with cbr0 as the namespace's second link. */
const ifindex = (name: string) => {
  if (name !== 'cbr0') throw new Error(`no interface ${name}`);
  return 2;
};

describe('the netlink encoder sends what nft 1.0.6 sends', () => {
  const recordings = readdirSync(DIR).filter((f) => f.endsWith('.hex'));

  it('has recordings of golden tables and probes', () => expect(recordings.length).toBeGreaterThanOrEqual(9));

  for (const file of recordings) {
    it(file.replace(/\.hex$/, ''), () => {
      const lines = readFileSync(join(DIR, file), 'utf8').split('\n');
      const source = /^# source: (.+)$/m.exec(lines.join('\n'))![1];
      const want = lines.filter((l) => l !== '' && !l.startsWith('#'));
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

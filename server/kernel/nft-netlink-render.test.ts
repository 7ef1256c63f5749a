import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { renderRule, type DumpedSet } from './nft-netlink-render.ts';
import { compileRule } from './nft-netlink-rules.ts';
import { parseTransaction } from './nft-script.ts';

/**
 * The listing's rule reader against the compiler: every rule of every golden
 * table, compiled as the kernel would hold it, reads back as the same text;
 * and a rule that reads differently from what it holds is never rendered.
 */
const GOLDEN = join(import.meta.dirname, '../proxy/nftables/testdata');
const PROBES = join(import.meta.dirname, 'testdata/nfnl');

function held(rule: string, family: 'ip' | 'ip6') {
  const sets = new Map<string, DumpedSet>();
  let n = 0;
  const r = compileRule(rule, { family, setId: () => null, newSetId: () => ++n, ifindex: () => 2, anonName: (k, id) => `__${k}${id}` });
  for (const s of r.sets) sets.set(s.name, { flags: s.flags, keyLen: s.keyLen, elements: [...s.elements].reverse() });
  return { r, ctx: { family, anon: (name: string) => sets.get(name) ?? null, ifname: (i: number) => (i === 2 ? 'cbr0' : null) }, sets };
}

describe('rules read back from the kernel as kproxy wrote them', () => {
  const files = [...readdirSync(GOLDEN).map((d) => join(GOLDEN, d, 'expected.nft')), join(PROBES, 'ip6.nft')];
  const rules = files.flatMap((f) => parseTransaction(readFileSync(f, 'utf8')).flatMap((c) => (c.op.kind === 'rule' ? [{ family: c.family, rule: c.op.rule }] : [])));

  it('covers the golden tables', () => expect(rules.length).toBeGreaterThan(500));

  it('every golden rule', () => {
    const wrong = rules.filter(({ family, rule }) => {
      const { r, ctx } = held(rule, family);
      return renderRule(r.exprs, r.comment, ctx) !== rule;
    });
    expect(wrong).toEqual([]);
  });

  it('sorts a set the kernel holds unsorted, as nft lists it', () => {
    const { r, ctx } = held('ip saddr != { 10.0.0.3 , 10.0.0.2 } drop', 'ip');
    expect(renderRule(r.exprs, r.comment, ctx)).toBe('ip saddr != { 10.0.0.2 , 10.0.0.3 } drop');
  });

  it('reads what the kernel holds in an anonymous map, not what the rule was meant to hold', () => {
    const { r, ctx, sets } = held('numgen random mod 2 vmap { 0 : goto a , 1 : goto b }', 'ip');
    const [name, s] = [...sets][0];
    sets.set(name, { ...s, elements: s.elements.filter((e) => e.key[0] === 1) });
    expect(renderRule(r.exprs, r.comment, ctx)).toBe('numgen random mod 2 vmap { 1 : goto b }');
  });

  it('renders nothing for an anonymous set it cannot write back as it is held', () => {
    const { r, ctx, sets } = held('ip saddr != { 10.0.0.0/8 , 192.168.0.0/16 } drop', 'ip');
    const [name, s] = [...sets][0];
    // An interval that starts and never ends.
    sets.set(name, { ...s, elements: s.elements.filter((e) => !(e.end && e.key[0] === 11)) });
    expect(renderRule(r.exprs, r.comment, ctx)).toBeNull();
  });

  it('renders nothing for an interface index the namespace does not have', () => {
    const { r } = held('iif "cbr0" accept', 'ip');
    expect(renderRule(r.exprs, r.comment, { family: 'ip', anon: () => null, ifname: () => null })).toBeNull();
  });
});

import { describe, expect, it } from 'vitest';
import { ChainTable, RuleStore } from './rule-store.ts';

const TEXT = '-j A\n-j B\n-j C\n-j D\n';
/** at: the range of rule n (0-based) of TEXT. */
const at = (n: number) => [n * 5, n * 5 + 4] as const;

function stored(store: RuleStore, name: string) {
  return new ChainTable(store).declare(name);
}

describe('RuleStore and StoredChain', () => {
  it('keeps a chain whose rules were stored together as a range, and one appended to later as a list', () => {
    const store = new RuleStore();
    const t = store.addText(TEXT);
    const a = stored(store, 'A');
    const b = stored(store, 'B');
    a.append(store.add(t, ...at(0), 1, 60, 'A'));
    a.append(store.add(t, ...at(1), 2, 120, 'B'));
    expect(a.edited).toBe(false);
    b.append(store.add(t, ...at(2), 0, 0, 'C'));
    // A's next rule comes after B's: A becomes a list.
    a.append(store.add(t, ...at(3), 0, 0, null));
    expect(a.edited).toBe(true);
    expect(a.rules).toEqual([
      { spec: '-j A', target: 'A', packets: 1, bytes: 60 },
      { spec: '-j B', target: 'B', packets: 2, bytes: 120 },
      { spec: '-j D', target: null, packets: 0, bytes: 0 },
    ]);
    expect(b.rules.map((r) => r.spec)).toEqual(['-j C']);
    expect(a.ruleCount).toBe(3);
    // A spec read in place is the built rule's.
    expect([0, 1, 2].map((i) => a.specAt(i))).toEqual(a.rules.map((r) => r.spec));
  });

  it('inserts, removes and flushes, and builds the rules again after each change', () => {
    const store = new RuleStore();
    const t = store.addText(TEXT);
    const a = stored(store, 'A');
    for (let n = 0; n < 3; n++) a.append(store.add(t, ...at(n), 0, 0, null));
    const before = a.rules;
    expect(a.rules).toBe(before); // built once while nothing changes
    a.insert(1, store.addSpec('-j X', 'X'));
    expect(a.rules.map((r) => r.spec)).toEqual(['-j A', '-j X', '-j B', '-j C']);
    a.remove(0);
    expect(a.rules.map((r) => r.spec)).toEqual(['-j X', '-j B', '-j C']);
    expect(store.sameSpec(a.idAt(0), '-j X')).toBe(true);
    expect(store.sameSpec(a.idAt(0), '-j XY')).toBe(false);
    a.flush();
    expect(a.rules).toEqual([]);
    expect(a.ruleCount).toBe(0);
  });

  it('compacts to ranges in chain order, dropping rules no chain holds and texts no rule uses', async () => {
    const store = new RuleStore();
    const t = store.addText(TEXT);
    const a = stored(store, 'A');
    const b = stored(store, 'B');
    b.append(store.add(t, ...at(0), 0, 0, 'A'));
    a.append(store.add(t, ...at(1), 5, 50, 'B'));
    b.append(store.add(t, ...at(2), 0, 0, 'C'));
    a.insert(0, store.addSpec('-j GONE', 'GONE'));
    a.remove(0);
    a.append(store.add(t, ...at(3), 0, 0, 'D'));
    const want = [a.rules, b.rules].map((rs) => rs.map((r) => ({ ...r })));
    expect(store.count).toBe(5);
    await store.compact([a, b], async () => {});
    expect(store.count).toBe(4);
    expect([a.edited, b.edited]).toEqual([false, false]);
    expect([a.rules, b.rules]).toEqual(want);
    expect([...a.ids(), ...b.ids()]).toEqual([0, 1, 2, 3]);
  });

  it('compacts in slices, and a reader between two slices sees the store as it was', async () => {
    const store = new RuleStore();
    const t = store.addText(TEXT);
    // 40 chains whose rules interleave (each a list), as kproxy's restore input leaves service chains.
    const chains = Array.from({ length: 40 }, (_, i) => stored(store, `C${i}`));
    for (let round = 0; round < 3; round++) for (const [i, c] of chains.entries()) c.append(store.add(t, ...at((i + round) % 4), i, round, null));
    const want = chains.map((c) => c.rules.map((r) => ({ ...r })));
    const seen: unknown[][] = [];
    let pauses = 0;
    await store.compact(
      chains,
      async () => {
        pauses++;
        seen.push(chains.map((c) => c.rules.map((r) => ({ ...r }))));
        expect(chains.every((c) => c.edited)).toBe(true);
      },
      30,
    );
    // 120 rules, a pause after every 30 rules' worth of whole chains.
    expect(pauses).toBe(3);
    for (const s of seen) expect(s).toEqual(want);
    expect(chains.some((c) => c.edited)).toBe(false);
    expect(chains.map((c) => c.rules)).toEqual(want);
    expect(store.count).toBe(120);
  });

  it('keeps a bounded number of chains built', () => {
    const store = new RuleStore();
    const t = store.addText(TEXT);
    const chains = Array.from({ length: 100 }, (_, i) => {
      const c = stored(store, `C${i}`);
      c.append(store.add(t, ...at(i % 4), 0, 0, null));
      return c;
    });
    const first = chains[0]!.rules;
    for (const c of chains) void c.rules;
    // The first chain was pushed out: asked again, it is built anew (equal, not the same array).
    expect(chains[0]!.rules).not.toBe(first);
    expect(chains[0]!.rules).toEqual(first);
    // The last one is still built.
    expect(chains[99]!.rules).toBe(chains[99]!.rules);
  });

  it('ChainTable keeps chains in order, finds each by name, empties a chain declared again in its place and puts one deleted and declared again last', () => {
    const store = new RuleStore();
    const t = store.addText(TEXT);
    const table = new ChainTable(store);
    // Enough chains that the name index is rebuilt several times as it grows.
    const names = Array.from({ length: 5000 }, (_, i) => `KUBE-SEP-${i.toString(36).toUpperCase().padStart(16, '0')}`);
    for (const n of names) table.declare(n);
    table.declare('OUTPUT', { builtin: true, policy: 'ACCEPT', packets: 7, bytes: 420 });
    expect(table.size).toBe(5001);
    expect([...table.keys()].slice(0, 3)).toEqual(names.slice(0, 3));
    for (const n of names) expect(table.get(n)?.name).toBe(n);
    expect(table.get('KUBE-SEP-NOPE')).toBeUndefined();
    expect(table.has('KUBE-SEP-NOPE')).toBe(false);
    const out = table.get('OUTPUT')!;
    expect([out.builtin, out.policy, out.packets, out.bytes]).toEqual([true, 'ACCEPT', 7, 420]);
    expect([table.get(names[0]!)!.builtin, table.get(names[0]!)!.policy]).toEqual([false, null]);

    // A view reads the slot: rules appended through one view show through another.
    table.get(names[1]!)!.append(store.add(t, ...at(0), 0, 0, 'A'));
    table.get(names[1]!)!.append(store.add(t, ...at(1), 0, 0, 'B'));
    expect(table.get(names[1]!)!.rules.map((r) => r.spec)).toEqual(['-j A', '-j B']);
    // Declared again: emptied, in the same place.
    table.declare(names[1]!);
    expect(table.get(names[1]!)!.ruleCount).toBe(0);
    expect([...table.keys()][1]).toBe(names[1]);

    // Deleted: gone from lookups and iteration; the names after it are still found (the index goes on past it).
    for (const n of names.slice(0, 2500)) expect(table.delete(n)).toBe(true);
    expect(table.delete(names[0]!)).toBe(false);
    expect(table.size).toBe(2501);
    for (const n of names.slice(2500)) expect(table.get(n)?.name).toBe(n);
    expect(table.get(names[0]!)).toBeUndefined();
    // Declared again after a delete: last, as a Map would put it.
    table.declare(names[0]!);
    expect([...table.keys()].at(-1)).toBe(names[0]);
    expect(table.size).toBe(2502);
    // Deletes and declarations many times over the index's size: every live chain is still found.
    for (let round = 0; round < 4; round++) {
      for (const n of names.slice(2500, 4000)) table.delete(n);
      for (const n of names.slice(2500, 4000)) table.declare(n);
    }
    expect(table.size).toBe(2502);
    for (const n of names.slice(2500)) expect(table.has(n)).toBe(true);
    expect([...table.values()].map((c) => c.name)).toEqual([...table.keys()]);
    // The rules of live chains, counted from the columns, as the views count them.
    table.get(names[2600]!)!.append(store.add(t, ...at(0), 0, 0, 'A'));
    expect(table.ruleTotal()).toBe([...table.values()].reduce((n, c) => n + c.ruleCount, 0));
    expect(table.ruleTotal()).toBe(1);
  });

  it("reads a rule's target back from its text, or from its own list when the text spells it otherwise", () => {
    const store = new RuleStore();
    const t = store.addText('-j KUBE-SEP-A\n-m comment --comment "x" -j DNAT --to-destination 10.0.0.1:80\n');
    const a = new ChainTable(store).declare('X');
    a.append(store.add(t, 0, 13, 0, 0, 'KUBE-SEP-A'));
    a.append(store.add(t, 14, 71, 3, 180, 'DNAT'));
    // A target the rule's text does not spell as is (a quoted one, read through the shared parser).
    a.append(store.addSpec('-j "QUOTED"', 'QUOTED'));
    a.append(store.addSpec('-m mark --mark 0x4000/0x4000', null));
    expect(a.rules.map((r) => [r.target, r.packets, r.bytes])).toEqual([
      ['KUBE-SEP-A', 0, 0],
      ['DNAT', 3, 180],
      ['QUOTED', 0, 0],
      [null, 0, 0],
    ]);
  });
});

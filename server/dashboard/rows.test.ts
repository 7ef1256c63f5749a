import { describe, expect, it } from 'vitest';
import { iptablesSaveText } from './iptables/save-text.ts';
import { kernelTables, type KernelChain, type KernelTable } from './kernel-view.ts';
import { TableRows } from './rows.ts';

/** bigTable: a nat table of `chains` chains with `rules` rules each. */
function bigTable(chains: number, rules: number): KernelTable {
  const map = new Map<string, KernelChain>();
  for (let c = 0; c < chains; c++) {
    const name = `KUBE-SEP-${String(c).padStart(16, '0')}`;
    map.set(name, {
      name,
      builtin: false,
      policy: null,
      packets: 0,
      bytes: 0,
      rules: Array.from({ length: rules }, (_, r) => ({ spec: `-s 10.64.${c % 250}.${r} -j KUBE-MARK-MASQ`, target: 'KUBE-MARK-MASQ', packets: 0, bytes: 0 })),
    });
  }
  return { name: 'nat', chains: map };
}

/** counting is a Yield that counts the turns it gave. */
function counting() {
  const y = Object.assign(async () => void y.turns++, { turns: 0 });
  return y;
}

describe('long dashboard work yields to the event loop', () => {
  it('TableRows.build pauses while it searches 100,000 rules, and finds the same rows as without pausing', async () => {
    const table = bigTable(10_000, 10);
    const pause = counting();
    const rows = await TableRows.build(table, new Map(), { q: '10.64.7.3' }, pause);
    expect(pause.turns).toBeGreaterThanOrEqual(5);
    expect(rows.total).toBe(40 * 2);
    expect(rows.page(0, 2)).toEqual([expect.objectContaining({ t: 'c', chain: 'KUBE-SEP-0000000000000007' }), expect.objectContaining({ t: 'r', spec: '-s 10.64.7.3 -j KUBE-MARK-MASQ' })]);
  });

  it('iptablesSaveText pauses while it writes 100,000 rules, and writes what iptables-save lists', async () => {
    const tables = kernelTables(new Map([['nat', bigTable(10_000, 10)]]));
    const pause = counting();
    const text = (await iptablesSaveText(tables, null, pause)).join('');
    expect(pause.turns).toBeGreaterThanOrEqual(5);
    const lines = text.split('\n');
    expect(lines[0]).toBe('*nat');
    expect(lines[1]).toBe(':KUBE-SEP-0000000000000000 - [0:0]');
    expect(lines[10_001]).toBe('-A KUBE-SEP-0000000000000000 -s 10.64.0.0 -j KUBE-MARK-MASQ');
    expect(lines.at(-2)).toBe('COMMIT');
    expect(lines).toHaveLength(1 + 10_000 + 100_000 + 1 + 1);
  });

  it("kernelTables counts rules through the chains' own total where they keep one, without a chain object each", () => {
    const plain = bigTable(3, 4);
    const chains = Object.assign(new Map(plain.chains), {
      ruleTotal: () => 12,
      values: (): never => {
        throw new Error('walked the chains');
      },
    });
    const t = kernelTables(new Map([['nat', { name: 'nat', chains }]]));
    expect([t.chainCount, t.ruleCount]).toEqual([3, 12]);
    expect(kernelTables(new Map([['nat', plain]])).ruleCount).toBe(12);
  });

  it('iptablesSaveText pauses while it declares many chains, too (30,000 chains without rules)', async () => {
    const tables = kernelTables(new Map([['nat', bigTable(30_000, 0)]]));
    const pause = counting();
    const pieces = await iptablesSaveText(tables, null, pause);
    expect(pause.turns).toBeGreaterThanOrEqual(5);
    expect(Math.max(...pieces.map((p) => p.split('\n').length - 1))).toBeLessThanOrEqual(5_000);
    const lines = pieces.join('').split('\n');
    expect(lines[30_000]).toBe(':KUBE-SEP-0000000000029999 - [0:0]');
    expect(lines).toHaveLength(1 + 30_000 + 1 + 1);
  });
});

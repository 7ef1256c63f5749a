import { describe, expect, it } from 'vitest';
import { readXtablesCounts } from './iptables-legacy-counts.ts';

describe("readXtablesCounts (the helper's answer for legacy tables)", () => {
  const ask = { tables: ['nat', 'filter'], own: (_t: string, c: string) => (c.startsWith('KUBE-') ? c : undefined) };

  it('counts each chain and keeps the jumps of the chains no one owns, whatever the pieces cut', () => {
    const text = 'C PREROUTING 2\nJ KUBE-SERVICES\nJ DOCKER\nC KUBE-SERVICES 1\nJ KUBE-SVC-A\nC KUBE-SVC-A 0\nC DOCKER 1\n';
    for (const cut of [1, 7, 20, 33, text.length - 1]) {
      const c = readXtablesCounts(new Map([['nat', [Buffer.from(text.slice(0, cut)), Buffer.from(text.slice(cut))]]]), ask);
      const nat = c.tables.get('nat')!;
      expect(nat.names).toEqual(['PREROUTING', 'KUBE-SERVICES', 'KUBE-SVC-A', 'DOCKER']);
      expect(nat.counts).toEqual([2, 1, 0, 1]);
      expect(nat.owners).toEqual([undefined, 'KUBE-SERVICES', 'KUBE-SVC-A', undefined]);
      expect(Object.fromEntries([...nat.jumps].map(([k, m]) => [k, Object.fromEntries(m)]))).toEqual({ PREROUTING: { 'KUBE-SERVICES': 1, DOCKER: 1 }, DOCKER: {} });
    }
  });

  it('leaves out a table the kernel does not have (null), and refuses what the helper never writes', () => {
    expect(readXtablesCounts(new Map([['filter', null]]), ask).tables.size).toBe(0);
    expect(() => readXtablesCounts(new Map([['nat', [Buffer.from('X what\n')]]]), ask)).toThrow(/never writes/);
    expect(() => readXtablesCounts(new Map([['nat', [Buffer.from('C PREROUTING 1')]]]), ask)).toThrow(/middle of a line/);
  });
});

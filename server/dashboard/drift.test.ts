import { describe, expect, it } from 'vitest';
import { DriftMemo, DriftTracker, findDrift, type RawFinding } from './drift.ts';
import { readSaveOutput } from './iptables/tables.ts';
import { iptablesRuleKey } from './iptables/rule-key.ts';
import { kernelTables, type KernelChain, type KernelTables } from './kernel-view.ts';
import { noYield } from './yield.ts';

function tables(spec: Record<string, Record<string, string[]>>): KernelTables {
  const out = new Map();
  for (const [t, chains] of Object.entries(spec)) {
    const m = new Map<string, KernelChain>();
    for (const [c, rules] of Object.entries(chains)) {
      m.set(c, { name: c, builtin: c === c.toUpperCase() && !c.includes('-'), policy: null, packets: 0, bytes: 0, rules: rules.map((s) => ({ spec: s, target: null, packets: 0, bytes: 0 })) });
    }
    out.set(t, { name: t, chains: m });
  }
  return kernelTables(out);
}

const rules = {
  ruleKey: (_t: string, r: { spec: string }) => iptablesRuleKey(r.spec),
  ownsChain: (_t: string, c: string) => c.startsWith('KUBE-SVC-') || c.startsWith('KUBE-SEP-'),
  requiredRules: () => [{ table: 'nat', chain: 'PREROUTING', spec: '-m comment --comment "kubernetes service portals" -j KUBE-SERVICES' }],
};

const WRITTEN = { nat: { 'KUBE-SERVICES': ['-m tcp -p tcp -d 10.96.0.1 --dport 443 -j KUBE-SVC-A'], 'KUBE-SVC-A': ['-j KUBE-SEP-1', '-j KUBE-SEP-2'] } };
const PREROUTING = ['-m comment --comment "kubernetes service portals" -j KUBE-SERVICES'];

describe('findDrift', () => {
  it('finds nothing when the kernel lists what kproxy wrote in its own spelling', async () => {
    const kernel = tables({ nat: { PREROUTING, 'KUBE-SERVICES': ['-d 10.96.0.1/32 -p tcp -m tcp --dport 443 -j KUBE-SVC-A'], 'KUBE-SVC-A': ['-j KUBE-SEP-1', '-j KUBE-SEP-2'] } });
    expect(await findDrift(tables(WRITTEN), kernel, rules, noYield)).toEqual([]);
  });

  it("names missing chains, missing and unexpected rules, reordered rules, foreign chains in kproxy's namespace and lost jumps", async () => {
    const kernel = tables({
      nat: {
        'KUBE-SERVICES': ['-d 10.96.0.1/32 -p tcp -m tcp --dport 443 -j KUBE-SVC-A', '-j LOG'],
        'KUBE-SVC-A': ['-j KUBE-SEP-2', '-j KUBE-SEP-1'],
        'KUBE-SVC-OLD': ['-j KUBE-SEP-9'],
      },
    });
    const written = tables({ nat: { ...WRITTEN.nat, 'KUBE-SVC-B': ['-j KUBE-SEP-3'] } });
    const found = await findDrift(written, kernel, rules, noYield);
    const brief = (f: RawFinding) => `${f.kind} ${f.chain}${f.kind.endsWith('rule') ? ` ${f.detail}` : ''}`;
    expect(found.map(brief)).toEqual(['unexpected-rule KUBE-SERVICES -j LOG', 'order KUBE-SVC-A', 'missing-chain KUBE-SVC-B', 'unexpected-chain KUBE-SVC-OLD', 'missing-jump PREROUTING']);
  });

  it('lists at most three rule findings per chain and counts the rest', async () => {
    const written = tables({ nat: { 'KUBE-SVC-A': ['-j A', '-j B', '-j C', '-j D', '-j E'] } });
    const kernel = tables({ nat: { PREROUTING, 'KUBE-SVC-A': [] } });
    const found = await findDrift(written, kernel, rules, noYield);
    expect(found.map((f) => f.detail)).toEqual(['-j A', '-j B', '-j C', 'and 2 more']);
  });

  it('compares again only the chains whose specs changed on either side since they last compared equal', async () => {
    const save = (svcA: string[], svcB: string[]) =>
      [
        '*nat',
        ':PREROUTING ACCEPT [0:0]',
        ':KUBE-SVC-A - [0:0]',
        ':KUBE-SVC-B - [0:0]',
        `-A PREROUTING ${PREROUTING[0]}`,
        ...svcA.map((r) => `-A KUBE-SVC-A ${r}`),
        ...svcB.map((r) => `-A KUBE-SVC-B ${r}`),
        'COMMIT',
        '',
      ].join('\n');
    const written = await readSaveOutput(save(['-m tcp -p tcp -j KUBE-SEP-1'], ['-j KUBE-SEP-2']), noYield);
    const listed = await readSaveOutput(save(['-p tcp -m tcp -j KUBE-SEP-1'], ['-j KUBE-SEP-2']), noYield);
    let keys = 0;
    const counting = { ...rules, ruleKey: (t: string, r: { spec: string }) => (keys++, rules.ruleKey(t, r)) };
    const memo = new DriftMemo();
    expect(await findDrift(written, listed, counting, noYield, memo)).toEqual([]);
    const first = keys;
    expect(first).toBeGreaterThan(1); // KUBE-SVC-A's text differs: compared by key (and the jump's key)
    // A new read listing the same rules: nothing to compare but the required jump.
    keys = 0;
    expect(await findDrift(written, await readSaveOutput(save(['-p tcp -m tcp -j KUBE-SEP-1'], ['-j KUBE-SEP-2']), noYield), counting, noYield, memo)).toEqual([]);
    expect(keys).toBe(2);
    // The kernel's KUBE-SVC-B changed: it is compared again, and found.
    const changed = await readSaveOutput(save(['-p tcp -m tcp -j KUBE-SEP-1'], ['-j KUBE-SEP-3']), noYield);
    const found = await findDrift(written, changed, counting, noYield, memo);
    expect(found.map((f) => `${f.kind} ${f.chain} ${f.detail}`)).toEqual(['missing-rule KUBE-SVC-B -j KUBE-SEP-2', 'unexpected-rule KUBE-SVC-B -j KUBE-SEP-3']);
    // Still found on the next read (a chain with findings is never taken as known).
    expect(await findDrift(written, changed, counting, noYield, memo)).toEqual(found);
    // Cleared (the reader dropped its tables): everything is compared again.
    memo.clear();
    keys = 0;
    await findDrift(written, listed, counting, noYield, memo);
    expect(keys).toBe(first);
  });

  it('expects no jumps after a cleanup (kproxy holds no chains)', async () => {
    expect(await findDrift(tables({}), tables({ nat: { PREROUTING: [] } }), rules, noYield)).toEqual([]);
  });
});

describe('DriftTracker', () => {
  const f: RawFinding = { table: 'nat', chain: 'KUBE-SVC-A', kind: 'missing-chain', detail: 'gone' };

  it('reports a finding seen in two reads in a row, since the first of them', () => {
    const d = new DriftTracker();
    d.update([f], 1000);
    expect(d.report().total).toBe(0);
    d.update([f], 2000);
    expect(d.report()).toEqual({ checkedAt: 2000, total: 1, findings: [{ ...f, since: 1000 }] });
    expect(d.byChain().get('nat/KUBE-SVC-A')).toBe('missing-chain');
  });

  it('forgets a finding a read no longer shows (a read that overlapped a sync)', () => {
    const d = new DriftTracker();
    d.update([f], 1000);
    d.update([], 2000);
    d.update([f], 3000);
    expect(d.count).toBe(0);
  });
});

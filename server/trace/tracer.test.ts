import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { parseTraceQuery } from './packet.ts';
import { loadCase } from './testing.ts';
import { traceKernel, type TraceRead } from './tracer.ts';
import { kernelTables, type KernelRule, type KernelTables } from '../dashboard/kernel-view.ts';

/**
 * Golden cases: testdata/<case>/ holds a kernel read recorded from a node
 * (testing.ts says which files) and packets.yaml; expected.yaml is what the
 * tracer answers for each packet. UPDATE_GOLDEN=1 rewrites expected.yaml
 * (review the diff); by default it is compared.
 */
const TESTDATA = join(import.meta.dirname, 'testdata');
const UPDATE = process.env.UPDATE_GOLDEN === '1';
const cases = readdirSync(TESTDATA, { withFileTypes: true })
  .filter((d) => d.isDirectory() && existsSync(join(TESTDATA, d.name, 'packets.yaml')))
  .map((d) => d.name)
  .sort();

describe('tracer golden cases', () => {
  for (const name of cases) {
    it(`traces ${name} as expected.yaml says`, async () => {
      const dir = join(TESTDATA, name);
      const c = await loadCase(dir);
      const out: Record<string, unknown> = {};
      for (const p of c.packets) out[p.name] = traceKernel(c.read, parseTraceQuery(p));
      const text = stringify(out, { lineWidth: 0 });
      const expectedPath = join(dir, 'expected.yaml');
      if (UPDATE) writeFileSync(expectedPath, text);
      expect(existsSync(expectedPath), `${expectedPath} is missing: run with UPDATE_GOLDEN=1 and review it`).toBe(true);
      expect(text).toBe(readFileSync(expectedPath, 'utf8'));
    });
  }
});

/** withRules returns a read where one chain's rules are replaced (a node someone changed by hand). */
function withRules(read: KernelTables, table: string, chain: string, rules: (old: readonly KernelRule[]) => KernelRule[]): KernelTables {
  const tables = new Map(read.tables);
  const t = tables.get(table)!;
  const chains = new Map(t.chains);
  const c = chains.get(chain);
  const old = c?.rules ?? [];
  // Read field by field: a parsed chain is a view whose fields are getters, which a spread would not copy.
  chains.set(chain, { name: chain, builtin: c?.builtin ?? false, policy: c?.policy ?? null, packets: c?.packets ?? 0, bytes: c?.bytes ?? 0, rules: rules(old) });
  tables.set(table, { ...t, chains });
  return kernelTables(tables);
}
const rule = (spec: string, target: string | null = null): KernelRule => ({ spec, target, packets: 0, bytes: 0 });
const matrix = (mode: string) => loadCase(join(TESTDATA, `${mode}-matrix`));
const trace = (r: TraceRead, p: { proto: string; src: string; dst: string; from?: string }) => traceKernel(r, parseTraceQuery(p));

describe('tracer', () => {
  it('says where the kernel differs from what kproxy wrote on the path, and marks those steps', async () => {
    const c = await matrix('iptables');
    const drift = [
      { table: 'nat', chain: 'KUBE-SERVICES', kind: 'missing-rule' as const, detail: '-m comment --comment "kpt/spread:tcp cluster IP" …' },
      { table: 'nat', chain: 'KUBE-SVC-UNRELATED', kind: 'missing-chain' as const, detail: 'kproxy wrote 3 rules; the kernel has no such chain' },
    ];
    const t = trace({ ...c.read, drift }, { proto: 'tcp', src: '10.0.0.2', dst: '10.96.0.10:80' });
    expect(t.drift).toEqual([drift[0]]);
    expect(t.path.find((s) => s.chain === 'KUBE-SERVICES')?.drift).toBe('missing-rule');
    expect(t.path.find((s) => s.chain === 'PREROUTING')?.drift).toBeUndefined();
    expect(t.reason).toMatch(/the kernel differs from what kproxy wrote on this path \(1 finding, see drift\)$/);
    // Without a record of kproxy's intent, drift is not checked (null), not "none".
    expect(trace(c.read, { proto: 'tcp', src: '10.0.0.2', dst: '10.96.0.10:80' }).drift).toBeNull();
  });

  it('follows iptables affinity when the recent lists are known: a remembered client goes to its endpoint', async () => {
    const c = await matrix('iptables');
    const sep = [...c.read.read.tables.get('nat')!.chains.values()].find((ch) => ch.rules.some((r) => r.spec.includes('--to-destination 10.244.0.12:8080') && r.spec.includes('kpt/sticky')))!.name;
    const known: TraceRead = { ...c.read, facts: { ...c.read.facts, recentEntries: (list) => new Set(list === sep ? ['10.0.0.2'] : []) } };
    const remembered = trace(known, { proto: 'tcp', src: '10.0.0.2', dst: '10.96.0.18:80' });
    expect(remembered.verdict).toBe('dnat');
    expect(remembered.endpoints.map((e) => [e.address, e.probability])).toEqual([['10.244.0.12:8080', 1]]);
    expect(remembered.path.some((s) => s.note?.includes(`is in recent list ${sep}`))).toBe(true);
    // Another client has no entry: a fresh choice among the three.
    const fresh = trace(known, { proto: 'tcp', src: '10.0.0.3', dst: '10.96.0.18:80' });
    expect(fresh.endpoints.map((e) => e.address).sort()).toEqual(['10.244.0.11:8080', '10.244.0.12:8080', '10.244.0.13:8080']);
  });

  it('follows nftables affinity from the affinity set elements the kernel lists', async () => {
    const c = await matrix('nftables');
    const table = c.read.read.tables.get('kube-proxy')!;
    const set = [...table.chains.keys()].find((n) => n.startsWith('@affinity-') && n.endsWith('__10.244.0.13/8080'))!;
    const read = withRules(c.read.read, 'kube-proxy', set, () => [rule('10.0.0.2')]);
    const t = trace({ ...c.read, read }, { proto: 'tcp', src: '10.0.0.2', dst: '10.96.0.18:80' });
    expect(t.endpoints.map((e) => [e.address, e.probability])).toEqual([['10.244.0.13:8080', 1]]);
    expect(t.path.some((s) => s.note === `the client 10.0.0.2 is in ${set}: affinity sends it here`)).toBe(true);
  });

  it('splits on a probability it meets anywhere and reports the other outcome with its chance', async () => {
    const c = await matrix('iptables');
    const read = withRules(c.read.read, 'filter', 'FORWARD', (old) => [rule('-m statistic --mode random --probability 0.25 -j DROP', 'DROP'), ...old]);
    const t = trace({ ...c.read, read }, { proto: 'tcp', src: '10.0.0.2', dst: '10.96.0.10:80' });
    expect(t.verdict).toBe('dnat');
    expect(t.endpoints.reduce((n, e) => n + e.probability, 0)).toBeCloseTo(0.75, 9);
    expect(t.notes).toContain('with probability 25% the outcome is drop instead (see the rules after the shared path)');
  });

  it('walks a long chain through its destination index and finds the same rules', async () => {
    const c = await matrix('iptables');
    const plain = trace(c.read, { proto: 'tcp', src: '10.0.0.2', dst: '10.96.0.10:80' });
    // 300 rules for other addresses ahead of kproxy's (a big node's KUBE-SERVICES), and one by hand whose
    // negated destination matches this packet: the index must not skip it.
    const filler = Array.from({ length: 300 }, (_, i) => rule(`-d 10.97.${i >> 8}.${i & 255}/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-OTHER`, 'KUBE-SVC-OTHER'));
    const read = withRules(c.read.read, 'nat', 'KUBE-SERVICES', (old) => [...filler, rule('! -d 192.0.2.1/32 -p tcp -m tcp --dport 80 -j MARK --set-xmark 0x1/0x1', 'MARK'), ...old]);
    const t = trace({ ...c.read, read }, { proto: 'tcp', src: '10.0.0.2', dst: '10.96.0.10:80' });
    const svc = (x: typeof t) => x.path.filter((s) => s.chain === 'KUBE-SERVICES').map((s) => [s.index, s.verdict]);
    const before = svc(plain)[0];
    expect(svc(t)).toEqual([
      [300, 'MARK 0x1'],
      [(before[0] as number) + 301, before[1]],
    ]);
    expect(t.endpoints.map((e) => e.address)).toEqual(plain.endpoints.map((e) => e.address));
  });

  it('follows a Service of 10,000 endpoints to every one of them, each with its share', async () => {
    const c = await matrix('iptables');
    const n = 10_000;
    const ep = (i: number) => `10.64.${i >> 8}.${i & 255}:8080`;
    // kube-proxy's balancing: rule i takes 1/(n - i) of what reaches it, the last one the rest.
    const svc = Array.from({ length: n }, (_, i) =>
      rule(i < n - 1 ? `-m statistic --mode random --probability ${(1 / (n - i)).toFixed(10)} -j KUBE-SEP-E${i}` : `-j KUBE-SEP-E${i}`, `KUBE-SEP-E${i}`),
    );
    const read = withRules(c.read.read, 'nat', 'KUBE-SERVICES', (old) => [rule('-d 10.96.99.1/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-BIG', 'KUBE-SVC-BIG'), ...old]);
    const nat = read.tables.get('nat')!;
    const chains = new Map(nat.chains);
    const chain = (name: string, rules: KernelRule[]) => ({ name, builtin: false, policy: null, packets: 0, bytes: 0, rules });
    chains.set('KUBE-SVC-BIG', chain('KUBE-SVC-BIG', svc));
    for (let i = 0; i < n; i++) chains.set(`KUBE-SEP-E${i}`, chain(`KUBE-SEP-E${i}`, [rule(`-p tcp -m tcp -j DNAT --to-destination ${ep(i)}`, 'DNAT')]));
    const big = kernelTables(new Map([...read.tables, ['nat', { ...nat, chains }]]));
    const t = trace({ ...c.read, read: big }, { proto: 'tcp', src: '10.0.0.2', dst: '10.96.99.1:80' });
    expect(t.verdict).toBe('dnat');
    expect(t.endpoints).toHaveLength(n);
    expect(new Set(t.endpoints.map((e) => e.address)).size).toBe(n);
    for (const e of t.endpoints) expect(e.probability).toBeCloseTo(1 / n, 8);
    // Built and traced in about 2 s here; the bound is for a loaded machine, not a speed test.
  }, 30_000);

  it('takes a rule it cannot evaluate as not matching, and says so', async () => {
    const c = await matrix('iptables');
    const read = withRules(c.read.read, 'filter', 'FORWARD', (old) => [rule('-m hashlimit --hashlimit-upto 5/sec -j DROP', 'DROP'), ...old]);
    const t = trace({ ...c.read, read }, { proto: 'tcp', src: '10.0.0.2', dst: '10.96.0.10:80' });
    expect(t.verdict).toBe('dnat');
    expect(t.notes).toContain('filter FORWARD rule 1 (-m hashlimit) could not be evaluated: taken as not matching');
  });

  it('reports a foreign DROP policy in Service-neutral terms', async () => {
    const c = await matrix('iptables');
    const tables = new Map(c.read.read.tables);
    const filter = tables.get('filter')!;
    const chains = new Map(filter.chains);
    // A parsed chain is a view whose fields are getters (iptables' RuleStore): copy them by name.
    const forward = chains.get('FORWARD')!;
    chains.set('FORWARD', { name: forward.name, builtin: forward.builtin, packets: forward.packets, bytes: forward.bytes, rules: forward.rules, policy: 'DROP' });
    tables.set('filter', { ...filter, chains });
    // Unmarked forwarded traffic (a pod keeps its address) meets the DROP policy; KUBE-FORWARD accepts only marked packets.
    const t = trace({ ...c.read, read: kernelTables(tables) }, { proto: 'tcp', src: '10.244.0.13', dst: '10.96.0.15:80', from: 'pod' });
    expect(t.verdict).toBe('drop');
    expect(t.reason).toBe("10.96.0.15:80/tcp is dropped by the FORWARD chain's policy, not a kproxy rule");
  });

  it('says so when the node holds no rules of the packet family', async () => {
    const c = await matrix('iptables');
    const t = trace(c.read, { proto: 'tcp', src: 'fd00::2', dst: '[fd00:10:96::10]:80' });
    expect(t.verdict).toBe('none');
    expect(t.notes[0]).toBe('this node holds no IPv6 rules of iptables mode');
  });

  it('refuses a mode it does not know, naming it', async () => {
    const c = await matrix('iptables');
    expect(() => trace({ ...c.read, mode: 'carrier-pigeon' as never }, { proto: 'tcp', src: '10.0.0.2', dst: '10.96.0.10:80' })).toThrow(/does not know carrier-pigeon mode yet/);
  });
});

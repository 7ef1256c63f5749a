import { describe, expect, it } from 'vitest';
import { SimulatedIptables } from './iptables-simulated.ts';
import { IptablesRestoreError } from './iptables.ts';

async function restoreError(k: SimulatedIptables, input: string): Promise<IptablesRestoreError> {
  try {
    await k.restore(input);
  } catch (err) {
    if (err instanceof IptablesRestoreError) return err;
    throw err;
  }
  throw new Error('restore unexpectedly succeeded');
}

describe('SimulatedIptables restore', () => {
  it('keeps undeclared chains under --noflush and flushes declared ones', async () => {
    const k = new SimulatedIptables();
    await k.restore('*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j KUBE-B\n-A KUBE-B -j RETURN\nCOMMIT\n');
    await k.restore('*nat\n:KUBE-A - [0:0]\n-A KUBE-A -s 10.0.0.1 -j KUBE-B\nCOMMIT\n');
    expect(k.rules('nat', 'KUBE-A')).toEqual(['-s 10.0.0.1 -j KUBE-B']);
    expect(k.rules('nat', 'KUBE-B')).toEqual(['-j RETURN']);
  });

  it('without --noflush replaces the whole table', async () => {
    const k = new SimulatedIptables();
    await k.restore('*filter\n:KUBE-A - [0:0]\n-A INPUT -j KUBE-A\nCOMMIT\n');
    await k.restore('*filter\n:KUBE-B - [0:0]\nCOMMIT\n', { noflush: false });
    expect(k.chains('filter')).toEqual(['INPUT', 'FORWARD', 'OUTPUT', 'KUBE-B']);
    expect(k.rules('filter', 'INPUT')).toEqual([]);
  });

  it('refuses a jump to a missing chain, naming the line, and leaves that table as it was', async () => {
    const k = new SimulatedIptables();
    await k.restore('*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j RETURN\nCOMMIT\n');
    const err = await restoreError(k, '*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j DNAT --to-destination 10.0.0.1:80\n-A KUBE-A -j KUBE-NOPE\nCOMMIT\n');
    expect(err.lines).toEqual([4]);
    expect(err.message).toMatch(/line 4 failed: Couldn't load target `KUBE-NOPE'/);
    expect(k.rules('nat', 'KUBE-A')).toEqual(['-j RETURN']);
  });

  it('commits each table at its COMMIT: a failing nat table leaves the committed filter table applied', async () => {
    const k = new SimulatedIptables();
    await restoreError(k, '*filter\n:KUBE-F - [0:0]\n-A KUBE-F -j ACCEPT\nCOMMIT\n*nat\n:KUBE-N - [0:0]\n-A KUBE-N -j KUBE-GONE\nCOMMIT\n');
    expect(k.rules('filter', 'KUBE-F')).toEqual(['-j ACCEPT']);
    expect(k.chains('nat')).not.toContain('KUBE-N');
  });

  it('applies tables committed before a syntax error', async () => {
    const k = new SimulatedIptables();
    const err = await restoreError(k, '*filter\n:KUBE-F - [0:0]\nCOMMIT\n*nat\n-A KUBE-X -m comment --comment "broken\nCOMMIT\n');
    expect(err.lines).toEqual([5]);
    expect(k.chains('filter')).toContain('KUBE-F');
  });

  it('refuses to delete a referenced, non-empty or built-in chain, like the kernel', async () => {
    const k = new SimulatedIptables();
    await k.restore('*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j KUBE-B\n-A KUBE-B -j RETURN\nCOMMIT\n');
    expect((await restoreError(k, '*nat\n-F KUBE-B\n-X KUBE-B\nCOMMIT\n')).message).toMatch(/line 3 failed: .*referenced/);
    expect((await restoreError(k, '*nat\n-X KUBE-B\nCOMMIT\n')).message).toMatch(/referenced/);
    expect((await restoreError(k, '*nat\n-F KUBE-A\n-X KUBE-B\nCOMMIT\n')).message).toMatch(/holds rules/);
    expect((await restoreError(k, '*nat\n-X PREROUTING\nCOMMIT\n')).message).toMatch(/built-in/);
    // Flushing the referrer and the chain (kube-proxy's declare-then-delete) works.
    await k.restore('*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-X KUBE-B\nCOMMIT\n');
    expect(k.chains('nat')).not.toContain('KUBE-B');
  });

  it('refuses comments the kernel would refuse', async () => {
    const k = new SimulatedIptables();
    const err = await restoreError(k, `*filter\n:KUBE-A - [0:0]\n-A KUBE-A -m comment --comment "${'x'.repeat(256)}" -j ACCEPT\nCOMMIT\n`);
    expect(err.message).toMatch(/comment may not exceed 255/);
  });

  it('restores counters only with --counters and serves them in save -c', async () => {
    const k = new SimulatedIptables();
    await k.restore('*filter\n:INPUT DROP [10:1000]\n:KUBE-A - [0:0]\n[7:700] -A KUBE-A -j ACCEPT\nCOMMIT\n');
    expect(await k.save({ table: 'filter', counters: true })).toBe(
      '*filter\n:INPUT DROP [10:1000]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-A - [0:0]\n[7:700] -A KUBE-A -j ACCEPT\nCOMMIT\n',
    );
    await k.restore('*filter\n:KUBE-A - [0:0]\n[7:700] -A KUBE-A -j ACCEPT\nCOMMIT\n', { counters: false });
    expect(k.dump().tables.get('filter')!.chains.get('KUBE-A')!.rules[0].packets).toBe(0);
  });

  it('records every simulated process', async () => {
    const k = new SimulatedIptables();
    await k.restore('*nat\nCOMMIT\n');
    await k.save({ table: 'nat' });
    await k.chainExists('mangle', 'KUBE-PROXY-CANARY');
    expect(k.calls.map((c) => `${c.program} ${c.args.join(' ')}`)).toEqual(['iptables-restore --noflush --counters', 'iptables-save -t nat', 'iptables -S KUBE-PROXY-CANARY -t mangle']);
  });
});

describe('SimulatedIptables commands', () => {
  it('creates chains, checks, inserts and deletes rules by their words', async () => {
    const k = new SimulatedIptables();
    expect(await k.ensureChain('filter', 'KUBE-A')).toBe(false);
    expect(await k.ensureChain('filter', 'KUBE-A')).toBe(true);
    const args = ['-m', 'comment', '--comment', 'kubernetes service portals', '-j', 'KUBE-A'];
    expect(await k.checkRule('filter', 'INPUT', args)).toBe(false);
    await k.insertRule('filter', 'INPUT', ['-j', 'ACCEPT']);
    await k.insertRule('filter', 'INPUT', args);
    expect(k.rules('filter', 'INPUT')).toEqual(['-m comment --comment "kubernetes service portals" -j KUBE-A', '-j ACCEPT']);
    expect(await k.checkRule('filter', 'INPUT', args)).toBe(true);
    await expect(k.deleteChain('filter', 'KUBE-A')).rejects.toThrow(/referenced/);
    expect(await k.deleteRule('filter', 'INPUT', args)).toBe(true);
    expect(await k.deleteRule('filter', 'INPUT', args)).toBe(false);
    await k.deleteChain('filter', 'KUBE-A');
    expect(await k.chainExists('filter', 'KUBE-A')).toBe(false);
  });

  it('refuses a rule jumping to a missing chain', async () => {
    const k = new SimulatedIptables();
    await expect(k.insertRule('filter', 'INPUT', ['-j', 'KUBE-MISSING'])).rejects.toThrow(/Couldn't load target/);
  });

  it('flushAll empties every table (someone ran iptables -F; iptables -X)', async () => {
    const k = new SimulatedIptables();
    await k.ensureChain('mangle', 'KUBE-PROXY-CANARY');
    k.flushAll();
    expect(await k.chainExists('mangle', 'KUBE-PROXY-CANARY')).toBe(false);
  });
});

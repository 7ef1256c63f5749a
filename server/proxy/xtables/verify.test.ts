import { describe, expect, it } from 'vitest';
import { writtenChains } from './verify.ts';

describe('writtenChains: what a restore input leaves in the chains it declares', () => {
  it('counts the rules after each chain’s last declaration, -I and -D included, and drops deleted chains', async () => {
    const w = writtenChains(
      [
        '*nat',
        ':KUBE-MARK-MASQ - [0:0]',
        '-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000',
        'COMMIT',
        '*nat',
        ':KUBE-SVC-A - [0:0]',
        ':KUBE-SEP-A - [0:0]',
        ':KUBE-SEP-OLD - [0:0]',
        '-A KUBE-SVC-A -m comment --comment "shop/web:http -> 10.244.1.1:8080" -j KUBE-SEP-A',
        '-A KUBE-SEP-A -j KUBE-MARK-MASQ',
        '-A KUBE-SEP-A -p tcp -j DNAT --to-destination 10.244.1.1:8080',
        'COMMIT',
        '*nat',
        ':KUBE-MARK-MASQ - [0:0]',
        ':KUBE-SERVICES - [0:0]',
        '-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000',
        '-A KUBE-SERVICES -d 10.96.0.10/32 -j KUBE-SVC-A',
        '-I KUBE-SERVICES 1 -d 10.96.0.11/32 -j KUBE-SVC-A',
        '-D KUBE-SERVICES -d 10.96.0.11/32 -j KUBE-SVC-A',
        '-X KUBE-SEP-OLD',
        '-I PREROUTING 1 -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        'COMMIT',
        '',
      ].join('\n'),
    );
    const nat = (await w.count(true)).get('nat')!;
    const of = (k: 'rules' | 'refs') => Object.fromEntries([...nat].filter(([, c]) => c[k] !== 0).map(([name, c]) => [name, c[k]]));
    expect(Object.keys(Object.fromEntries(nat)).sort()).toEqual(['KUBE-MARK-MASQ', 'KUBE-SEP-A', 'KUBE-SERVICES', 'KUBE-SVC-A']);
    expect(of('rules')).toEqual({ 'KUBE-MARK-MASQ': 1, 'KUBE-SVC-A': 1, 'KUBE-SEP-A': 2, 'KUBE-SERVICES': 1 });
    expect([...w.deleted('nat')!]).toEqual(['KUBE-SEP-OLD']);
    // Jumps from the chains written: the -I and -D of KUBE-SERVICES cancel out; the built-in chain's jump into KUBE-SERVICES is not one.
    expect(of('refs')).toEqual({ 'KUBE-SEP-A': 1, 'KUBE-SVC-A': 1, 'KUBE-MARK-MASQ': 1 });
  });

  it('reads an input far longer than one slice of its walk exactly (the walks go on where they stopped)', async () => {
    const lines = ['*nat', ':KUBE-MARK-MASQ - [0:0]'];
    for (let c = 0; c < 3000; c++) lines.push(`:KUBE-SEP-${String(c).padStart(16, 'A')} - [0:0]`);
    lines.push('-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000');
    for (let c = 0; c < 3000; c++) for (let r = 0; r < 20; r++) lines.push(`-A KUBE-SEP-${String(c).padStart(16, 'A')} ${r % 2 ? '-j KUBE-MARK-MASQ' : '-p tcp -j DNAT --to-destination 10.0.0.1:80'}`);
    lines.push('COMMIT', '');
    const nat = (await writtenChains(lines.join('\n')).count(true)).get('nat')!;
    expect(nat.size).toBe(3001);
    expect([...nat.values()].filter((w) => w.rules === 20)).toHaveLength(3000);
    expect(nat.get('KUBE-MARK-MASQ')).toMatchObject({ rules: 1, refs: 30_000 });
  });
});

import { describe, expect, it } from 'vitest';
import { NftTransactionFailure } from './nft.ts';
import { NFT_PROBE_CASES } from '../../test/kernel/harness/nft-probe-cases.ts';
import { SimulatedNft } from './nft-simulated.ts';

describe('SimulatedNft answers as real nft does', () => {
  for (const c of NFT_PROBE_CASES) {
    it(c.name, async () => {
      const nft = new SimulatedNft();
      for (const [i, step] of c.steps.entries()) {
        const before = nft.table('ip', 'kproxy-probe');
        const err = await nft.run(step.input + '\n').then(
          () => null,
          (e: unknown) => e,
        );
        if (step.refused) {
          expect(err, `step ${i}`).toBeInstanceOf(NftTransactionFailure);
          expect((err as Error).message, `step ${i}`).toContain(step.refused);
          // Nothing of a refused transaction stays.
          expect(nft.table('ip', 'kproxy-probe'), `step ${i}`).toEqual(before);
        } else {
          expect(err, `step ${i}`).toBeNull();
        }
      }
    });
  }

  it('names the refused line as nft does (/dev/stdin:LINE:)', async () => {
    const nft = new SimulatedNft();
    const err = (await nft.run('add table ip t\nadd chain ip t a\nadd rule ip t a jump b\n').catch((e: unknown) => e)) as NftTransactionFailure;
    expect(err.lines).toEqual([3]);
    expect(err.stderr).toMatch(/^\/dev\/stdin:3:1-\d+: Error: .*No such file or directory/);
  });

  it('refuses words nft does not know and lines it cannot parse', async () => {
    const nft = new SimulatedNft();
    await nft.run('add table ip t\nadd chain ip t a\n');
    await expect(nft.run('add rule ip t a ip daddr 10.0.0.1 jmup b\n')).rejects.toThrow(/unexpected jmup/);
    await expect(nft.run('add rule ip t a ip daddr 10.0.0.300 drop\n')).rejects.toThrow(/unexpected 10.0.0.300/);
    await expect(nft.run('insert rule ip t a drop\n')).rejects.toThrow(/syntax error/);
    await expect(nft.run('add map ip t m { type ipv4_addr . inet_proto . inet_service : verdict ; }\nadd element ip t m { 10.0.0.1 . tcp : drop }\n')).rejects.toThrow(/datatype mismatch/);
  });

  it('lists what it holds as nft -j would: dynamic sets without elements, chains without comments', async () => {
    const nft = new SimulatedNft();
    await nft.run(
      'add table ip t\nadd chain ip t reject-chain { comment "helper" ; }\nadd rule ip t reject-chain reject\nadd set ip t aff { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }\nadd set ip t s { type ipv4_addr ; }\nadd element ip t s { 10.0.0.1 }\n',
    );
    const t = (await nft.listTable('ip', 't'))!;
    expect(t.chains.get('reject-chain')).toEqual({ name: 'reject-chain', base: null, comment: null, rules: ['reject'] });
    expect(t.sets.get('aff')).toMatchObject({ flags: ['timeout'], timeoutSeconds: 10800, elements: new Map() });
    expect([...t.sets.get('s')!.elements.keys()]).toEqual(['10.0.0.1']);
    expect(await nft.listTable('ip', 'other')).toBeNull();
    expect(nft.tableNames()).toEqual(['ip t']);
    expect(await nft.deleteTable('ip', 'other')).toBe(false);
    expect(await nft.deleteTable('ip', 't')).toBe(true);
    expect(nft.tableNames()).toEqual([]);
  });
});

import { describe, expect, it } from 'vitest';
import { CommandNotFoundError } from '../../errors.ts';
import { createNftRunner } from '../../kernel/nft.ts';
import { SimulatedNft } from '../../kernel/nft-simulated.ts';
import { MemoryLog } from '../../log.ts';
import { cleanupNftablesLeftovers, takeOverTables } from './cleanup.ts';

describe('cleanupNftablesLeftovers (the iptables and IPVS modes after their first sync, and --cleanup)', () => {
  it("deletes kube-proxy's table of both families, names each in the log, and leaves every other table", async () => {
    const nft = new SimulatedNft();
    await nft.run('add table ip kube-proxy\nadd chain ip kube-proxy services\nadd table ip6 kube-proxy\nadd table ip6 filter\nadd table ip kube-proxy-other\n');
    const log = new MemoryLog();
    const result = await cleanupNftablesLeftovers({ runner: nft, logger: log.logger });
    expect(result).toEqual({ removed: { nftables: 2 }, errors: [] });
    expect(nft.tableNames().sort()).toEqual(['ip kube-proxy-other', 'ip6 filter']);
    expect(log.lines('info').filter((l) => l.includes('removed nftables table'))).toEqual([expect.stringContaining('table="ip kube-proxy"'), expect.stringContaining('table="ip6 kube-proxy"')]);
    // Idempotent: nothing left to remove, nothing written.
    const transactions = nft.transactions().length;
    expect(await cleanupNftablesLeftovers({ runner: nft, logger: log.logger })).toEqual({ removed: {}, errors: [] });
    expect(nft.transactions()).toHaveLength(transactions);
  });

  it('on a host without the nft command reports nothing removed and no error, and says the tables were not checked', async () => {
    const log = new MemoryLog();
    const runner = createNftRunner({
      exec: async () => {
        throw new CommandNotFoundError('nft: command not found');
      },
    });
    expect(await cleanupNftablesLeftovers({ runner, logger: log.logger })).toEqual({ removed: {}, errors: [] });
    expect(log.lines('info').join('\n')).toMatch(/nft is not installed: kube-proxy's nftables tables, if any, were not checked/);
  });

  it('reports a deletion that fails, as a cleanup error naming the table and why, and still tries the other family', async () => {
    const calls: string[] = [];
    const runner = createNftRunner({
      exec: async (_f, args) => {
        calls.push(args.join(' '));
        return args.includes('ip6') ? { code: 0, stdout: '', stderr: '' } : { code: 1, stdout: '', stderr: 'Error: Could not process rule: Operation not permitted' };
      },
    });
    const result = await cleanupNftablesLeftovers({ runner, logger: new MemoryLog().logger });
    expect(result.removed).toEqual({ nftables: 1 });
    expect(result.errors.map((e) => [e.code, e.message])).toEqual([['KPROXY_ERR_CLEANUP_FAILED', expect.stringMatching(/deleting nftables table ip kube-proxy failed: .*Operation not permitted/)]]);
    // Never a listing of the whole ruleset first (nft 1.0.6 fetches every rule of every table for it).
    expect(calls).toEqual(['delete table ip kube-proxy', 'delete table ip6 kube-proxy']);
  });
});

describe('takeOverTables (which nftables mode table a family removes after its first sync)', () => {
  it('on a dual-stack node each family removes its own table only, so the other keeps serving until its rules are in', () => {
    expect(takeOverTables('IPv4', ['IPv4', 'IPv6'])).toEqual(['ip']);
    expect(takeOverTables('IPv6', ['IPv6', 'IPv4'])).toEqual(['ip6']);
  });

  it('a node proxying one family removes both tables (no other backend would remove the other one)', () => {
    expect(takeOverTables('IPv4', ['IPv4'])).toEqual(['ip', 'ip6']);
    expect(takeOverTables('IPv6', ['IPv6'])).toEqual(['ip', 'ip6']);
  });
});

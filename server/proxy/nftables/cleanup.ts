import { CleanupFailedError, CommandNotFoundError, errorMessage, type KproxyError } from '../../errors.ts';
import type { NftRunner } from '../../kernel/nft.ts';
import type { NftFamily } from '../../kernel/nft-types.ts';
import type { Logger } from '../../log.ts';
import type { IPFamily } from '../../net/ip.ts';
import type { CleanupResult } from '../backend.ts';
import { KUBE_PROXY_TABLE } from './names.ts';

export interface NftablesCleanupOptions {
  runner: NftRunner;
  /** families: whose kube-proxy table to delete (--cleanup: both). */
  families: readonly NftFamily[];
  logger: Logger;
}

/**
 * cleanupNftables deletes kube-proxy's nftables table of each family, the
 * whole of nftables mode (kube-proxy's CleanupLeftovers). Deleting a table
 * takes everything in it at once; other tables are never touched. Idempotent:
 * a table that is not there is not an error. removed counts "nftables" tables.
 */
export async function cleanupNftables(opts: NftablesCleanupOptions): Promise<CleanupResult> {
  const errors: KproxyError[] = [];
  let removed = 0;
  for (const family of opts.families) {
    // Deleted straight away, not looked up in a listing first: `nft list tables` fetches the whole ruleset,
    // and after an iptables-nft first sync at 10,000 Services that alone took about 30 s.
    try {
      if (!(await opts.runner.deleteTable(family, KUBE_PROXY_TABLE))) continue;
      removed++;
      opts.logger.info('removed nftables table', { table: `${family} ${KUBE_PROXY_TABLE}` });
    } catch (err) {
      if (err instanceof CommandNotFoundError) {
        // Only the iptables and IPVS modes and --cleanup get here without nft (nftables mode checks for it at start):
        // a table kube-proxy's own image made could still be in the kernel, unseen from this host's tools.
        opts.logger.info("nft is not installed: kube-proxy's nftables tables, if any, were not checked");
        return { removed: {}, errors: [] };
      }
      errors.push(new CleanupFailedError(`deleting nftables table ${family} ${KUBE_PROXY_TABLE} failed: ${errorMessage(err)}`, { cause: err }));
    }
  }
  return { removed: removed ? { nftables: removed } : {}, errors };
}

/** NFTABLES_MODE_FAMILIES: the families of kube-proxy's nftables tables ("ip kube-proxy", "ip6 kube-proxy"). */
export const NFTABLES_MODE_FAMILIES: readonly NftFamily[] = ['ip', 'ip6'];

/**
 * cleanupNftablesLeftovers removes what nftables mode (kube-proxy's or
 * kproxy's) left on a node: the kube-proxy table of both families, as
 * kube-proxy's nftables CleanupLeftovers does when it starts in iptables or
 * IPVS mode, and as --cleanup does. Each table removed is logged by name.
 */
export function cleanupNftablesLeftovers(opts: { runner: NftRunner; logger: Logger; families?: readonly NftFamily[] }): Promise<CleanupResult> {
  return cleanupNftables({ runner: opts.runner, families: opts.families ?? NFTABLES_MODE_FAMILIES, logger: opts.logger });
}

/**
 * takeOverTables says whose kube-proxy table a family's backend removes after
 * its own first sync, when the iptables or IPVS mode takes over from
 * nftables mode: its own family's, so on a dual-stack node the ip6 table keeps
 * serving IPv6 until the IPv6 rules are in; a node that proxies one family
 * only also removes the other family's table (no backend of this process
 * would).
 */
export function takeOverTables(family: IPFamily, proxied: readonly IPFamily[]): NftFamily[] {
  const own: NftFamily = family === 'IPv4' ? 'ip' : 'ip6';
  return proxied.length > 1 ? [own] : [...NFTABLES_MODE_FAMILIES];
}

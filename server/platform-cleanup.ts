import type { ProxyMode } from './config/proxy-mode.ts';
import type { ProxyConfig } from './config/types.ts';
import { errorMessage } from './errors.ts';
import { execFile, type ExecFn } from './kernel/exec.ts';
import { createNftRunner } from './kernel/nft.ts';
import type { Logger } from './log.ts';
import type { IPFamily } from './net/ip.ts';
import { cleanupSummary, mergeCleanup, type CleanupResult } from './proxy/backend.ts';
import { cleanupIpvsHost } from './proxy/ipvs/index.ts';
import { cleanupNftablesLeftovers, takeOverTables } from './proxy/nftables/index.ts';
import { cleanupIptables, cleanupRunners } from './proxy/xtables/cleanup.ts';

/**
 * Every proxy mode's leftovers, in one place, as kube-proxy's platformCleanup
 * (cmd/kube-proxy/app/server_linux.go): `--cleanup` removes what every mode
 * (kproxy's or kube-proxy's) left on the node, and each mode, once its first
 * sync has succeeded (first-sync-housekeeping.ts), removes what the modes it
 * takes over from left. No mode folder knows another mode's objects: the
 * composition hands each backend this work (none with --dry-run, which
 * touches nothing on the host).
 */

export interface PlatformCleanupOptions {
  config: ProxyConfig;
  logger: Logger;
  exec?: ExecFn;
  /** exists: whether a path exists (which legacy iptables tables are loaded, /proc/net/ip_vs); the host's by default. */
  exists?: (path: string) => boolean;
}

/**
 * cleanupAllModes is --cleanup: every KUBE- chain and jump rule in every
 * table, in both iptables flavours (legacy only where its tables exist) and
 * both families, kube-proxy's nftables tables of both families, then IPVS
 * mode's virtual servers (when the kernel has IPVS), ipsets and kube-ipvs0.
 * Idempotent; what cannot be removed comes back in the result's errors.
 */
export async function cleanupAllModes(opts: PlatformCleanupOptions): Promise<CleanupResult> {
  const exec = opts.exec ?? execFile;
  const logger = opts.logger.child('cleanup');
  // iptables first: IPVS mode's ipsets cannot be destroyed while its rules still match them.
  const iptables = await cleanupIptables({ runners: await cleanupRunners(exec, opts.exists), logger });
  const nftables = await cleanupNftablesLeftovers({ runner: createNftRunner({ exec }), logger });
  const ipvs = await cleanupIpvsHost({ config: opts.config, logger: opts.logger, exec, exists: opts.exists });
  return mergeCleanup(iptables, nftables, ipvs);
}

/**
 * OtherModesCleanup is what one family's backend runs after its first
 * successful sync: the family, and every family this process proxies.
 */
export type OtherModesCleanup = (family: IPFamily, proxiedFamilies: readonly IPFamily[]) => Promise<CleanupResult>;

/**
 * otherModesCleanup says what a mode removes of the other modes once its
 * first sync has succeeded (after, not before, so the old rules answer until
 * the new ones are in), as kube-proxy at start:
 *  - iptables and IPVS (kube-proxy's iptables-based modes) remove nftables
 *    mode's tables (takeOverTables: on a dual-stack node each family its own);
 *    each other's chains are their full syncs' own work (stale chains);
 *  - nftables removes the iptables chains (every flavour and family) and IPVS
 *    mode's objects; only the primary family's backend runs it;
 *  - userspace removes nftables mode's tables (both: it proxies one family)
 *    and IPVS mode's objects, as kube-proxy 1.25's userspace mode ran the IPVS
 *    cleanup at start; the other modes' chains are its full sync's work.
 * It never fails the daemon: what cannot be removed is logged.
 */
export function otherModesCleanup(mode: ProxyMode, opts: PlatformCleanupOptions): OtherModesCleanup {
  const exec = opts.exec ?? execFile;
  const logger = opts.logger.child(mode);
  switch (mode) {
    case 'iptables':
    case 'ipvs':
      return (family, proxied) => cleanupNftablesLeftovers({ runner: createNftRunner({ exec }), logger, families: takeOverTables(family, proxied) });
    case 'nftables':
      return async () => {
        // iptables first: IPVS mode's ipsets cannot be destroyed while its rules still match them.
        const iptables = await cleanupIptables({ runners: await cleanupRunners(exec, opts.exists), logger });
        const ipvs = await cleanupIpvsHost({ config: opts.config, logger, exec, exists: opts.exists });
        return reported(mergeCleanup(iptables, ipvs), 'the iptables and IPVS modes', logger);
      };
    case 'userspace':
      return async (family) => {
        const nftables = await cleanupNftablesLeftovers({ runner: createNftRunner({ exec }), logger, families: takeOverTables(family, [family]) });
        const ipvs = await cleanupIpvsHost({ config: opts.config, logger, exec, exists: opts.exists });
        return reported(mergeCleanup(nftables, ipvs), 'the nftables and IPVS modes', logger);
      };
  }
}

/** reported logs a summary of what went (when anything did) and each error as a warning. */
function reported(result: CleanupResult, modes: string, logger: Logger): CleanupResult {
  if (Object.keys(result.removed).length) logger.info(`removed what ${modes} left on this node`, { summary: cleanupSummary(result) });
  for (const e of result.errors) logger.warn(`leftovers of another mode could not be removed: ${errorMessage(e)}`, { code: e.code });
  return result;
}

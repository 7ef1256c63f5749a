import type { Clock } from '../../clock.ts';
import type { ProxyConfig } from '../../config/types.ts';
import { errorMessage } from '../../errors.ts';
import { DRY_RUN_LIMITS } from '../../kernel/call-log.ts';
import { execFile, type ExecFn } from '../../kernel/exec.ts';
import { hostInterfaces } from '../../kernel/netif.ts';
import { checkNftSupport, createNftRunner, type NftRunner, type NftSupport } from '../../kernel/nft.ts';
import { chooseNftRunner } from '../../kernel/nft-netlink.ts';
import { SimulatedNft } from '../../kernel/nft-simulated.ts';
import type { Logger } from '../../log.ts';
import type { IPFamily } from '../../net/ip.ts';
import { nftFamilyOf } from './builder.ts';
import { cleanupNftables } from './cleanup.ts';
import { createNftablesBackend, type NftablesBackend } from './proxier.ts';

export interface HostNftablesOptions {
  config: ProxyConfig;
  nodeName: string;
  family?: IPFamily;
  /** dryRun: program the simulated nftables kernel instead of the host (host addresses are still read). */
  dryRun: boolean;
  /** backend: --nftables-backend (default netlink, with nft -f as its fallback). */
  backend?: 'netlink' | 'nft';
  /** runner: a runner to share (the other family's); made here when absent. */
  runner?: NftRunner;
  clock: Clock;
  logger: Logger;
  exec?: ExecFn;
  /** proxiedFamilies: every family this process proxies, read at the first sync (given to afterFirstSync; default: this family only). */
  proxiedFamilies?: () => readonly IPFamily[];
  /**
   * afterFirstSync: what the backend removes of the other modes once its
   * first sync has succeeded (the composition's platform cleanup: the iptables
   * and IPVS modes' objects); none by default, and never with --dry-run. Only
   * the primary family's backend runs it.
   */
  afterFirstSync?: (family: IPFamily, proxiedFamilies: readonly IPFamily[]) => Promise<unknown>;
}

export interface HostNftables {
  backend: NftablesBackend;
  /** kernel: the simulated kernel of --dry-run (its describe() is what would be programmed), else null. */
  kernel: SimulatedNft | null;
  /** support: what the start-up check found on the host (null with --dry-run). */
  support: NftSupport | null;
}

/**
 * createHostNftablesBackend wires nftables mode for the daemon. On the host it
 * first checks, before anything is programmed, that nft and the kernel can run
 * it (checkNftSupport: nft 1.0.1+, Linux 5.13+, nf_tables); a failure throws
 * NftUnsupportedError and kproxy exits 1. After its first successful sync the
 * backend runs afterFirstSync: the composition's removal of what the iptables
 * and IPVS modes (kproxy's or kube-proxy's) left on the node, as kube-proxy
 * does when it starts in nftables mode: after, not before, so new connections
 * are served throughout a switch of modes.
 */
export async function createHostNftablesBackend(opts: HostNftablesOptions): Promise<HostNftables> {
  const exec = opts.exec ?? execFile;
  const family = opts.family ?? 'IPv4';
  const log = opts.logger.child('nftables');
  const afterFirstSync = opts.afterFirstSync;
  let kernel: SimulatedNft | null = null;
  let support: NftSupport | null = null;
  let runner;
  if (opts.dryRun) {
    kernel = new SimulatedNft({ callLog: DRY_RUN_LIMITS });
    runner = kernel;
  } else {
    support = await checkNftSupport({ exec, family: nftFamilyOf(family) });
    if (opts.runner) runner = opts.runner;
    else {
      const chosen = await chooseNftRunner({ backend: opts.backend ?? 'netlink', fallback: createNftRunner({ exec }), logger: log });
      runner = chosen;
      log.info('using nftables', { nft: support.nftVersion, kernel: support.kernel, writer: chosen.writer === 'netlink' ? 'netlink (nft -f as fallback)' : 'nft -f' });
    }
  }
  const backend = createNftablesBackend({
    config: opts.config,
    nodeName: opts.nodeName,
    family,
    runner,
    netif: hostInterfaces(exec),
    clock: opts.clock,
    logger: opts.logger,
    cleanup: () => cleanupNftables({ runner, families: [nftFamilyOf(family)], logger: log }),
    // --dry-run touches nothing on the host: no other mode's leftovers are removed.
    ...(afterFirstSync && !opts.dryRun ? { afterFirstSync: () => afterFirstSync(family, opts.proxiedFamilies?.() ?? [family]) } : {}),
  });
  return { backend, kernel, support };
}

export interface HostNftablesFamilies {
  /** backends: one per family (the ip and ip6 kube-proxy tables), the primary first; one runner (or simulated kernel) for both. */
  backends: NftablesBackend[];
  kernel: SimulatedNft | null;
  support: NftSupport | null;
  /** unsupported: why the secondary family is not proxied, or null. */
  unsupported: string | null;
}

/**
 * createHostNftablesBackends wires nftables mode for each family: the primary
 * family's table as createHostNftablesBackend does, and the other family's
 * (table ip6 kube-proxy for IPv6) when the host's nft can make it, with the
 * same runner; only the primary cleans up the other modes after its first sync.
 */
export async function createHostNftablesBackends(opts: Omit<HostNftablesOptions, 'family'> & { families: readonly IPFamily[] }): Promise<HostNftablesFamilies> {
  const exec = opts.exec ?? execFile;
  const [primary, secondary] = opts.families;
  const backends: NftablesBackend[] = [];
  const first = await createHostNftablesBackend({ ...opts, family: primary, proxiedFamilies: () => backends.map((b) => b.family) });
  backends.push(first.backend);
  let unsupported: string | null = null;
  if (secondary) {
    if (!opts.dryRun) {
      try {
        await checkNftSupport({ exec, family: nftFamilyOf(secondary) });
      } catch (err) {
        unsupported = errorMessage(err);
      }
    }
    if (unsupported === null) {
      // One runner for both tables: one netlink helper, or nft.
      const runner = first.kernel ?? first.backend.runner;
      const log = opts.logger.child('nftables');
      backends.push(
        createNftablesBackend({
          config: opts.config,
          nodeName: opts.nodeName,
          family: secondary,
          runner,
          netif: hostInterfaces(exec),
          clock: opts.clock,
          logger: opts.logger,
          cleanup: () => cleanupNftables({ runner, families: [nftFamilyOf(secondary)], logger: log }),
        }),
      );
    }
  }
  return { backends, kernel: first.kernel, support: first.support, unsupported };
}

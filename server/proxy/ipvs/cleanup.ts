import { CleanupFailedError, CommandNotFoundError, errorMessage, type KproxyError } from '../../errors.ts';
import { IpsetBatch, IpsetRestoreError, type IpsetRunner } from '../../kernel/ipset.ts';
import { IpvsBatch } from '../../kernel/ipvs-batch.ts';
import type { IpvsRunner } from '../../kernel/ipvs.ts';
import { NetlinkBatch, type Netlink } from '../../kernel/netlink.ts';
import type { Logger } from '../../log.ts';
import type { CleanupResult } from '../backend.ts';
import { cidrContains, type CIDR } from '../../net/ip.ts';
import { allSetNames, DUMMY_DEVICE } from './names.ts';

export interface IpvsCleanupOptions {
  /** ipvs: null when the kernel has no IPVS (nothing to remove there; said in the log). */
  ipvs: IpvsRunner | null;
  ipset: IpsetRunner;
  netlink: Netlink;
  logger: Logger;
  /** excludeCIDRs: virtual servers there belong to someone else and stay (ipvs.excludeCIDRs). */
  excludeCIDRs?: readonly CIDR[];
  /** ipvsSkipReason: why ipvs is null, for the log. */
  ipvsSkipReason?: string;
}

/**
 * cleanupIpvs removes what IPVS mode (kproxy's or kube-proxy's) created: the
 * virtual servers (all of them, as kube-proxy's cleanup flushes IPVS, except
 * those in excludeCIDRs), kube-proxy's ipsets of both families, and the
 * kube-ipvs0 link. Run it after the iptables cleanup: a set that a rule still
 * matches cannot be destroyed. Each part is tried even when another failed;
 * it is idempotent.
 */
export async function cleanupIpvs(opts: IpvsCleanupOptions): Promise<CleanupResult> {
  const removed: Record<string, number> = {};
  const errors: KproxyError[] = [];
  const log = opts.logger;

  if (opts.ipvs === null) {
    log.info('IPVS virtual servers skipped: this kernel has no IPVS', { why: opts.ipvsSkipReason ?? 'ip_vs is not loaded' });
  } else {
    try {
      const services = await opts.ipvs.save();
      const b = new IpvsBatch();
      let kept = 0;
      for (const s of services) {
        if ((opts.excludeCIDRs ?? []).some((c) => cidrContains(c, s.address))) kept++;
        else b.deleteService(s);
      }
      if (!b.empty) {
        await opts.ipvs.restore(b.text());
        removed['virtual-servers'] = b.lines;
        log.info('removed IPVS virtual servers', { count: b.lines, keptInExcludeCIDRs: kept });
      }
    } catch (err) {
      errors.push(new CleanupFailedError(`removing IPVS virtual servers failed: ${errorMessage(err)}`, { cause: err }));
    }
  }

  try {
    const present = await opts.ipset.save();
    let names = allSetNames()
      .filter((n) => present.has(n))
      .sort();
    let destroyed = 0;
    // One batch; a set still in use stops it at its line: report that set and go on with the rest.
    while (names.length) {
      const b = new IpsetBatch();
      for (const n of names) b.destroy(n);
      try {
        await opts.ipset.restore(b.text());
        destroyed += names.length;
        names = [];
      } catch (err) {
        const at = err instanceof IpsetRestoreError && err.line > 0 ? err.line - 1 : -1;
        if (at < 0) throw err;
        destroyed += at;
        errors.push(new CleanupFailedError(`ipset ${names[at]} could not be destroyed (a rule of other software may still use it): ${errorMessage(err)}`, { cause: err }));
        names = names.slice(at + 1);
      }
    }
    if (destroyed) {
      removed.ipsets = destroyed;
      log.info('removed ipsets', { count: destroyed });
    }
  } catch (err) {
    // Without the ipset program no kube-proxy could have made sets here: nothing to remove.
    if (err instanceof Error && err.cause instanceof CommandNotFoundError) log.info('ipsets skipped: ipset is not installed');
    else errors.push(new CleanupFailedError(`removing IPVS mode's ipsets failed: ${errorMessage(err)}`, { cause: err }));
  }

  try {
    const links = await opts.netlink.show();
    if (links.has(DUMMY_DEVICE)) {
      const b = new NetlinkBatch();
      b.deleteLink(DUMMY_DEVICE);
      await opts.netlink.batch(b.text());
      removed.links = 1;
      log.info('removed the dummy link', { link: DUMMY_DEVICE, addresses: links.get(DUMMY_DEVICE)!.length });
    }
  } catch (err) {
    errors.push(new CleanupFailedError(`removing ${DUMMY_DEVICE} failed: ${errorMessage(err)}`, { cause: err }));
  }
  return { removed, errors };
}

import type { ProxyConfig } from './types.ts';

/**
 * What the modes' settings hold: the schedulers and keywords the
 * configuration accepts, and each mode's own section of it, read through
 * modeSettings. The modes' names are proxy-mode.ts's.
 */

/**
 * IPVS_SCHEDULERS are the IPVS schedulers kproxy accepts ("" means rr): the ten
 * kube-proxy has always validated, plus the kernel's mh, fo and ovf, which
 * current kube-proxy passes through to the kernel.
 */
export const IPVS_SCHEDULERS = ['rr', 'wrr', 'lc', 'wlc', 'lblc', 'lblcr', 'sh', 'dh', 'sed', 'nq', 'mh', 'fo', 'ovf'] as const;

/** NODE_PORT_ADDRESSES_PRIMARY is the nodePortAddresses keyword for the Node's primary IPs. */
export const NODE_PORT_ADDRESSES_PRIMARY = 'primary';

/** ModeSyncSettings are the sync periods every mode's section carries. */
export interface ModeSyncSettings {
  readonly syncPeriodMs: number;
  readonly minSyncPeriodMs: number;
}

/**
 * modeSettings is the configuration section of the configured mode (its sync
 * periods): the sync loop's timing and the health timeout (twice syncPeriod,
 * as kube-proxy) read it from here.
 */
export function modeSettings(config: Pick<ProxyConfig, 'mode' | 'iptables' | 'nftables' | 'ipvs'>): ModeSyncSettings {
  switch (config.mode) {
    case 'userspace':
      // kube-proxy's userspace proxier ran on the iptables section's periods (its portals are iptables rules).
      return config.iptables;
    case 'ipvs':
      return config.ipvs;
    case 'nftables':
      return config.nftables;
    case 'iptables':
      return config.iptables;
  }
}

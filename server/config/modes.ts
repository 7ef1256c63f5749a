import type { ProxyConfig } from './types.ts';

/**
 * The proxy modes, once for the whole daemon: the configuration validates
 * `mode` against PROXY_MODES, the backends declare which ProxyMode they are,
 * and the mode's own section of the configuration is read through
 * modeSettings. A new mode is one more name here and a section in
 * ProxyConfig (docs/architecture.md, "Where a new mode plugs in").
 */

/** PROXY_MODES are the values `mode` accepts on Linux ("" means iptables). */
export const PROXY_MODES = ['iptables', 'ipvs', 'nftables', 'userspace'] as const;

/** ProxyMode is one backend kproxy can program. */
export type ProxyMode = (typeof PROXY_MODES)[number];

/** DEFAULT_PROXY_MODE is what a blank `mode` means (kube-proxy: the best-available proxy, iptables on Linux). */
export const DEFAULT_PROXY_MODE: ProxyMode = 'iptables';

/** isProxyMode reports whether a text names a proxy mode. */
export function isProxyMode(text: string): text is ProxyMode {
  return (PROXY_MODES as readonly string[]).includes(text);
}

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

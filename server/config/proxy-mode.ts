/**
 * The proxy modes, once for the whole daemon: the configuration validates
 * `mode` against PROXY_MODES, the backends declare which ProxyMode they are,
 * and the dashboard's wire format names them. This file imports nothing, so
 * every layer (and the web app, through the wire format) can name a mode;
 * the mode's own section of the configuration is read through modes.ts's
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

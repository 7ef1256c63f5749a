import { canonicalIP, ipFamilyOf, isLoopbackIP, parseCIDR } from '../net/ip.ts';
import { formatDuration } from './duration.ts';
import { parsePortRange } from './port-range.ts';
import { IPVS_SCHEDULERS, NODE_PORT_ADDRESSES_PRIMARY } from './modes.ts';
import { isProxyMode, PROXY_MODES } from './proxy-mode.ts';
import { supportedValues, type FieldError } from './field-error.ts';
import { splitHostPort } from './host-port.ts';
import type { KubeProxyConfiguration } from './v1alpha1.ts';

/**
 * kube-proxy's configuration validation (pkg/proxy/apis/config/validation),
 * run on the defaulted v1alpha1 document so every error names the field as it
 * is spelt in the YAML (`iptables.masqueradeBit`, `nodePortAddresses[1]`).
 * Like kube-proxy, only the selected mode's section is checked for sync
 * periods, and the ipvs section only in ipvs mode.
 */

/** LOCAL_MODES are the values `detectLocalMode` accepts ("" means ClusterCIDR). */
export const LOCAL_MODES = ['ClusterCIDR', 'NodeCIDR', 'BridgeInterface', 'InterfaceNamePrefix'] as const;
export const LOG_FORMATS = ['text', 'json'] as const;

const DUAL_STACK_PAIR = 'must be either a single CIDR or a dual-stack pair of CIDRs (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)';

/** validateKubeProxyConfiguration returns every problem with a defaulted configuration ([] when valid). */
export function validateKubeProxyConfiguration(c: KubeProxyConfiguration): FieldError[] {
  const errs: FieldError[] = [];
  const invalid: Invalid = (field, value, detail, related) => errs.push({ field, type: 'Invalid', value, detail, ...(related ? { related } : {}) });
  const atLeastZero = (field: string, value: number, shown: unknown = value) => {
    if (value < 0) invalid(field, shown, 'must be greater than or equal to 0');
  };

  for (const name of Object.keys(c.featureGates)) {
    // kproxy has no feature gate registry; a gate name must at least look like one.
    if (!/^[A-Za-z][A-Za-z0-9]*$/.test(name)) invalid(`featureGates.${name}`, name, 'must be a feature gate name (letters and digits)');
  }

  validateMasqueradeBit('iptables.masqueradeBit', c.iptables.masqueradeBit, invalid);
  switch (c.mode) {
    case 'ipvs':
      validateSyncPeriods('ipvs', c.ipvs, invalid);
      atLeastZero('ipvs.tcpTimeout', c.ipvs.tcpTimeout, duration(c.ipvs.tcpTimeout));
      atLeastZero('ipvs.tcpFinTimeout', c.ipvs.tcpFinTimeout, duration(c.ipvs.tcpFinTimeout));
      atLeastZero('ipvs.udpTimeout', c.ipvs.udpTimeout, duration(c.ipvs.udpTimeout));
      if (c.ipvs.scheduler !== '' && !(IPVS_SCHEDULERS as readonly string[]).includes(c.ipvs.scheduler)) {
        errs.push({
          field: 'ipvs.scheduler',
          type: 'Unsupported',
          value: c.ipvs.scheduler,
          detail: `${supportedValues(IPVS_SCHEDULERS)} (blank means rr)`,
        });
      }
      c.ipvs.excludeCIDRs.forEach((cidr, i) => {
        if (!parseCIDR(cidr)) invalid(`ipvs.excludeCIDRs[${i}]`, cidr, 'must be a valid CIDR');
      });
      break;
    case 'nftables':
      validateSyncPeriods('nftables', c.nftables, invalid);
      validateMasqueradeBit('nftables.masqueradeBit', c.nftables.masqueradeBit, invalid);
      break;
    case 'userspace':
      // kube-proxy 1.25 validated these for every mode; only the userspace mode reads them.
      validateSyncPeriods('iptables', c.iptables, invalid);
      if (c.udpIdleTimeout <= 0) invalid('udpIdleTimeout', duration(c.udpIdleTimeout), 'must be greater than 0');
      // kube-proxy's ErrProxyOnLocalhost: proxy sockets on loopback cannot take redirected traffic.
      if (isLoopbackIP(c.bindAddress)) invalid('bindAddress', c.bindAddress, 'the userspace mode cannot proxy on localhost (its proxy sockets listen on bindAddress)');
      break;
    default:
      validateSyncPeriods('iptables', c.iptables, invalid);
  }

  atLeastZero('conntrack.maxPerCore', c.conntrack.maxPerCore);
  atLeastZero('conntrack.min', c.conntrack.min);
  for (const f of ['tcpEstablishedTimeout', 'tcpCloseWaitTimeout', 'udpTimeout', 'udpStreamTimeout'] as const) {
    atLeastZero(`conntrack.${f}`, c.conntrack[f], duration(c.conntrack[f]));
  }
  if (c.oomScoreAdj < -1000 || c.oomScoreAdj > 1000) invalid('oomScoreAdj', c.oomScoreAdj, 'must be within the range [-1000, 1000]');

  if (c.mode !== '' && !isProxyMode(c.mode)) {
    invalid('mode', c.mode, `must be ${PROXY_MODES.join(', ')} or blank (blank means the best-available proxy [currently iptables])`);
  }
  atLeastZero('clientConnection.burst', c.clientConnection.burst);
  if (c.configSyncPeriod <= 0) invalid('configSyncPeriod', duration(c.configSyncPeriod), 'must be greater than 0');

  if (!canonicalIP(c.bindAddress)) invalid('bindAddress', c.bindAddress, 'not a valid textual representation of an IP address');
  // An empty address disables that server (kube-proxy's flags say "Set empty to disable").
  if (c.healthzBindAddress !== '') validateHostPort('healthzBindAddress', c.healthzBindAddress, invalid);
  if (c.metricsBindAddress !== '') validateHostPort('metricsBindAddress', c.metricsBindAddress, invalid);
  if (parsePortRange(c.portRange) === undefined) invalid('portRange', c.portRange, 'must be a valid port range (e.g. 300-2000)');

  c.nodePortAddresses.some((addr, i) => {
    if (addr === NODE_PORT_ADDRESSES_PRIMARY) {
      if (i !== 0 || c.nodePortAddresses.length !== 1) invalid(`nodePortAddresses[${i}]`, addr, "can't use both 'primary' and CIDRs");
      return true; // like kube-proxy, stop at "primary"
    }
    if (!parseCIDR(addr)) invalid(`nodePortAddresses[${i}]`, addr, 'must be a valid CIDR');
    return false;
  });

  validateDetectLocal(c, errs, invalid);

  if (!(LOG_FORMATS as readonly string[]).includes(c.logging.format)) {
    errs.push({ field: 'logging.format', type: 'Unsupported', value: c.logging.format, detail: supportedValues(LOG_FORMATS) });
  } else if (c.logging.vmodule.length > 0 && c.logging.format !== 'text') {
    invalid('logging.vmodule', c.logging.vmodule, 'only supported for text log format');
  }
  return errs;
}

type Invalid = (field: string, value: unknown, detail: string, related?: readonly string[]) => void;

function duration(ms: number): string {
  // Shown the way the YAML spells it ("-1s"), not as milliseconds.
  return formatDuration(ms);
}

function validateMasqueradeBit(field: string, bit: number, invalid: Invalid): void {
  if (bit < 0 || bit > 31) invalid(field, bit, 'must be within the range [0, 31]');
}

function validateSyncPeriods(section: string, p: { syncPeriod: number; minSyncPeriod: number }, invalid: Invalid): void {
  if (p.syncPeriod <= 0) invalid(`${section}.syncPeriod`, duration(p.syncPeriod), 'must be greater than 0');
  if (p.minSyncPeriod < 0) invalid(`${section}.minSyncPeriod`, duration(p.minSyncPeriod), 'must be greater than or equal to 0');
  if (p.syncPeriod > 0 && p.minSyncPeriod > p.syncPeriod) {
    invalid(`${section}.syncPeriod`, duration(p.syncPeriod), `must be greater than or equal to ${section}.minSyncPeriod`, [`${section}.minSyncPeriod`]);
  }
}

function validateHostPort(field: string, input: string, invalid: Invalid): void {
  const hp = splitHostPort(input);
  if (!hp) return invalid(field, input, 'must be IP:port');
  if (!canonicalIP(hp.host)) invalid(field, hp.host, 'must be a valid IP');
  const port = /^\d+$/.test(hp.port) ? Number(hp.port) : NaN;
  if (!(port >= 1 && port <= 65535)) invalid(field, hp.port, 'must be a valid port');
}

function validateDetectLocal(c: KubeProxyConfiguration, errs: FieldError[], invalid: Invalid): void {
  const mode = c.detectLocalMode;
  if (mode !== '' && !(LOCAL_MODES as readonly string[]).includes(mode)) {
    errs.push({ field: 'detectLocalMode', type: 'Unsupported', value: mode, detail: supportedValues([...LOCAL_MODES, '']) });
    return;
  }
  if (mode === 'BridgeInterface' && c.detectLocal.bridgeInterface === '') {
    invalid('detectLocal.bridgeInterface', '', 'must not be empty', ['detectLocalMode']);
  }
  if (mode === 'InterfaceNamePrefix' && c.detectLocal.interfaceNamePrefix === '') {
    invalid('detectLocal.interfaceNamePrefix', '', 'must not be empty', ['detectLocalMode']);
  }
  // "" is ClusterCIDR for kube-proxy's proxier too, so kproxy checks the CIDRs in both cases.
  if ((mode === 'ClusterCIDR' || mode === '') && c.clusterCIDR !== '') {
    const cidrs = c.clusterCIDR.split(',');
    if (cidrs.length > 2) return invalid('clusterCIDR', c.clusterCIDR, DUAL_STACK_PAIR);
    const parsed = cidrs.map((text) => {
      const cidr = parseCIDR(text.trim());
      if (!cidr) invalid('clusterCIDR', text, 'must be a valid CIDR block (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)');
      return cidr;
    });
    if (parsed.length === 2 && parsed[0] && parsed[1] && parsed[0].family === parsed[1].family) {
      invalid('clusterCIDR', c.clusterCIDR, DUAL_STACK_PAIR);
    }
    // A single CIDR must be of the primary family (bindAddress's): with only a
    // CIDR of the other family, the primary family's proxier would have no local
    // traffic detector and masquerade pod traffic (kube-proxy logs this, kproxy
    // refuses it: it is a typo or a half-configured dual-stack cluster).
    const primary = ipFamilyOf(c.bindAddress);
    if (parsed.length === 1 && parsed[0] && primary && parsed[0].family !== primary) {
      invalid(
        'clusterCIDR',
        c.clusterCIDR,
        `is an ${parsed[0].family} CIDR where an ${primary} one was expected: the primary IP family is ${primary} (bindAddress ${c.bindAddress}); give an ${primary} CIDR or a dual-stack pair`,
        ['bindAddress'],
      );
    }
  }
}

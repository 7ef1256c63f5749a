import { describe, expect, it } from 'vitest';
import { setDefaults } from './defaults.ts';
import { formatFieldError } from './field-error.ts';
import type { KubeProxyConfiguration, KubeProxyConfigurationDocument } from './v1alpha1.ts';
import { validateKubeProxyConfiguration } from './validation.ts';

function check(doc: KubeProxyConfigurationDocument, mutate?: (c: KubeProxyConfiguration) => void): string[] {
  const c = setDefaults(doc);
  mutate?.(c);
  return validateKubeProxyConfiguration(c).map(formatFieldError);
}

describe('validateKubeProxyConfiguration (kube-proxy rules)', () => {
  it('accepts the defaults in every mode', () => {
    expect(check({})).toEqual([]);
    for (const mode of ['iptables', 'nftables', 'ipvs']) expect(check({ mode })).toEqual([]);
  });

  it('accepts a full, realistic configuration', () => {
    expect(
      check({
        mode: 'ipvs',
        clusterCIDR: '10.244.0.0/16,fd00:10:244::/56',
        nodePortAddresses: ['10.0.0.0/8', 'fd00::/8'],
        ipvs: { scheduler: 'wrr', excludeCIDRs: ['192.168.0.0/16'], minSyncPeriod: 2000 },
        healthzBindAddress: '[::]:10256',
        featureGates: { TopologyAwareHints: true },
        portRange: '30000-32767',
      }),
    ).toEqual([]);
  });

  it('checks the masquerade bit range', () => {
    expect(check({ iptables: { masqueradeBit: 40 } })).toEqual(['iptables.masqueradeBit: Invalid value: 40: must be within the range [0, 31]']);
    expect(check({ iptables: { masqueradeBit: -1 } })).toEqual(['iptables.masqueradeBit: Invalid value: -1: must be within the range [0, 31]']);
    expect(check({ mode: 'nftables', nftables: { masqueradeBit: 32 } })).toEqual(['nftables.masqueradeBit: Invalid value: 32: must be within the range [0, 31]']);
    // nftables' own bit only matters in nftables mode, as in kube-proxy
    expect(check({ nftables: { masqueradeBit: 32 } })).toEqual([]);
  });

  it("checks the selected mode's sync periods under that mode's field names", () => {
    for (const [mode, section] of [
      ['', 'iptables'],
      ['iptables', 'iptables'],
      ['nftables', 'nftables'],
      ['ipvs', 'ipvs'],
    ] as const) {
      const sec = (c: KubeProxyConfiguration) => c[section];
      expect(check({ mode }, (c) => (sec(c).syncPeriod = -1000))).toEqual([`${section}.syncPeriod: Invalid value: "-1s": must be greater than 0`]);
      expect(check({ mode }, (c) => (sec(c).minSyncPeriod = -1000))).toEqual([`${section}.minSyncPeriod: Invalid value: "-1s": must be greater than or equal to 0`]);
      expect(check({ mode }, (c) => Object.assign(sec(c), { syncPeriod: 1000, minSyncPeriod: 2000 }))).toEqual([
        `${section}.syncPeriod: Invalid value: "1s": must be greater than or equal to ${section}.minSyncPeriod`,
      ]);
    }
    // other modes' sections are not this mode's business
    expect(check({ mode: 'iptables' }, (c) => (c.ipvs.syncPeriod = -1))).toEqual([]);
  });

  it('checks conntrack values and oomScoreAdj', () => {
    expect(
      check({}, (c) => {
        c.conntrack = { maxPerCore: -1, min: -1, tcpEstablishedTimeout: -1000, tcpCloseWaitTimeout: -1000, tcpBeLiberal: false, udpTimeout: -1000, udpStreamTimeout: -1000 };
        c.oomScoreAdj = 1001;
      }),
    ).toEqual([
      'conntrack.maxPerCore: Invalid value: -1: must be greater than or equal to 0',
      'conntrack.min: Invalid value: -1: must be greater than or equal to 0',
      'conntrack.tcpEstablishedTimeout: Invalid value: "-1s": must be greater than or equal to 0',
      'conntrack.tcpCloseWaitTimeout: Invalid value: "-1s": must be greater than or equal to 0',
      'conntrack.udpTimeout: Invalid value: "-1s": must be greater than or equal to 0',
      'conntrack.udpStreamTimeout: Invalid value: "-1s": must be greater than or equal to 0',
      'oomScoreAdj: Invalid value: 1001: must be within the range [-1000, 1000]',
    ]);
  });

  it('checks the proxy mode', () => {
    expect(check({ mode: 'kernelspace' })).toEqual([
      'mode: Invalid value: "kernelspace": must be iptables, ipvs, nftables, userspace or blank (blank means the best-available proxy [currently iptables])',
    ]);
    expect(check({ mode: 'userspace' })).toEqual([]);
  });

  it('checks udpIdleTimeout and the iptables periods in userspace mode (kube-proxy 1.25 rules)', () => {
    expect(check({ mode: 'userspace', udpIdleTimeout: -1000 })).toEqual(['udpIdleTimeout: Invalid value: "-1s": must be greater than 0']);
    expect(check({ mode: 'userspace', iptables: { syncPeriod: 1000, minSyncPeriod: 5000 } })).toEqual([
      'iptables.syncPeriod: Invalid value: "1s": must be greater than or equal to iptables.minSyncPeriod',
    ]);
    expect(check({ mode: 'userspace', bindAddress: '127.0.0.1' })).toEqual([
      'bindAddress: Invalid value: "127.0.0.1": the userspace mode cannot proxy on localhost (its proxy sockets listen on bindAddress)',
    ]);
    // Other modes never read it.
    expect(check({ mode: 'iptables', udpIdleTimeout: -1000 })).toEqual([]);
  });

  it('checks clientConnection.burst and configSyncPeriod', () => {
    expect(check({ clientConnection: { burst: -1 } })).toEqual(['clientConnection.burst: Invalid value: -1: must be greater than or equal to 0']);
    expect(check({}, (c) => (c.configSyncPeriod = -60_000))).toEqual(['configSyncPeriod: Invalid value: "-1m0s": must be greater than 0']);
  });

  it('checks bindAddress and the listener addresses (host:port, port 1..65535)', () => {
    expect(check({ bindAddress: '10.10.12.11:2000' })).toEqual(['bindAddress: Invalid value: "10.10.12.11:2000": not a valid textual representation of an IP address']);
    expect(check({}, (c) => (c.healthzBindAddress = 'localhost:10256'))).toEqual(['healthzBindAddress: Invalid value: "localhost": must be a valid IP']);
    expect(check({}, (c) => (c.metricsBindAddress = '127.0.0.1:0'))).toEqual(['metricsBindAddress: Invalid value: "0": must be a valid port']);
    expect(check({}, (c) => (c.metricsBindAddress = '127.0.0.1:65536'))).toEqual(['metricsBindAddress: Invalid value: "65536": must be a valid port']);
    expect(check({}, (c) => (c.metricsBindAddress = '127.0.0.1:http'))).toEqual(['metricsBindAddress: Invalid value: "http": must be a valid port']);
    expect(check({}, (c) => (c.healthzBindAddress = '::1:10256'))).toEqual(['healthzBindAddress: Invalid value: "::1:10256": must be IP:port']);
    expect(check({}, (c) => (c.healthzBindAddress = 'nonsense'))).toEqual(['healthzBindAddress: Invalid value: "nonsense": must be IP:port']);
    // empty disables the server
    expect(check({}, (c) => ((c.healthzBindAddress = ''), (c.metricsBindAddress = '')))).toEqual([]);
  });

  it('checks portRange', () => {
    for (const ok of ['', '0', '0-0', '300', '300-2000', '300+1700']) expect(check({ portRange: ok })).toEqual([]);
    expect(check({ portRange: '2000-300' })).toEqual(['portRange: Invalid value: "2000-300": must be a valid port range (e.g. 300-2000)']);
    expect(check({ portRange: 'x' })).toEqual(['portRange: Invalid value: "x": must be a valid port range (e.g. 300-2000)']);
  });

  it('checks nodePortAddresses: CIDRs, or "primary" alone', () => {
    expect(check({ nodePortAddresses: ['primary'] })).toEqual([]);
    expect(check({ nodePortAddresses: ['192.168.0.0/16', 'invalid', '10.20.30.40'] })).toEqual([
      'nodePortAddresses[1]: Invalid value: "invalid": must be a valid CIDR',
      'nodePortAddresses[2]: Invalid value: "10.20.30.40": must be a valid CIDR',
    ]);
    expect(check({ nodePortAddresses: ['primary', '127.0.0.1/32'] })).toEqual(["nodePortAddresses[0]: Invalid value: \"primary\": can't use both 'primary' and CIDRs"]);
    expect(check({ nodePortAddresses: ['127.0.0.1/32', 'primary'] })).toEqual(["nodePortAddresses[1]: Invalid value: \"primary\": can't use both 'primary' and CIDRs"]);
  });

  it('checks cluster CIDRs: valid, at most one per family', () => {
    expect(check({ clusterCIDR: '10.0.0.0/8' })).toEqual([]);
    expect(check({ clusterCIDR: '192.168.0.0/16,invalid' })).toEqual(['clusterCIDR: Invalid value: "invalid": must be a valid CIDR block (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)']);
    expect(check({ clusterCIDR: '192.168.0.0/16,10.0.0.0/8' })).toEqual([
      'clusterCIDR: Invalid value: "192.168.0.0/16,10.0.0.0/8": must be either a single CIDR or a dual-stack pair of CIDRs (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)',
    ]);
    expect(check({ clusterCIDR: '10.0.0.0/8,fd00::/8,10.1.0.0/16' })).toHaveLength(1);
    // One CIDR must be of the primary family, bindAddress's.
    expect(check({ clusterCIDR: 'fd00:10:244::/56' })).toEqual([
      'clusterCIDR: Invalid value: "fd00:10:244::/56": is an IPv6 CIDR where an IPv4 one was expected: the primary IP family is IPv4 (bindAddress 0.0.0.0); give an IPv4 CIDR or a dual-stack pair',
    ]);
    expect(check({ clusterCIDR: 'fd00:10:244::/56', bindAddress: '::' })).toEqual([]);
    expect(check({ clusterCIDR: '10.244.0.0/16', bindAddress: '::' })).toHaveLength(1);
    expect(check({ clusterCIDR: 'fd00:10:244::/56,10.244.0.0/16' })).toEqual([]);
    // only ClusterCIDR (or blank) mode uses it, as in kube-proxy
    expect(check({ detectLocalMode: 'NodeCIDR', clusterCIDR: 'invalid' })).toEqual([]);
  });

  it('checks detectLocalMode and the setting each mode needs', () => {
    expect(check({ detectLocalMode: 'Magic' })).toEqual(['detectLocalMode: Unsupported value: "Magic": supported values: "ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix", ""']);
    expect(check({ detectLocalMode: 'BridgeInterface' })).toEqual(['detectLocal.bridgeInterface: Invalid value: "": must not be empty']);
    expect(check({ detectLocalMode: 'InterfaceNamePrefix' })).toEqual(['detectLocal.interfaceNamePrefix: Invalid value: "": must not be empty']);
    expect(check({ detectLocalMode: 'BridgeInterface', detectLocal: { bridgeInterface: 'cbr0' } })).toEqual([]);
    expect(check({ detectLocalMode: 'NodeCIDR' })).toEqual([]);
  });

  it('checks the IPVS scheduler, timeouts and excludeCIDRs in ipvs mode', () => {
    for (const s of ['', 'rr', 'wrr', 'lc', 'wlc', 'lblc', 'lblcr', 'sh', 'dh', 'sed', 'nq', 'mh']) expect(check({ mode: 'ipvs', ipvs: { scheduler: s } })).toEqual([]);
    expect(check({ mode: 'ipvs', ipvs: { scheduler: 'fastest' } })).toEqual([
      'ipvs.scheduler: Unsupported value: "fastest": supported values: "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq", "mh", "fo", "ovf" (blank means rr)',
    ]);
    expect(check({ mode: 'ipvs', ipvs: { tcpTimeout: -1000, tcpFinTimeout: -1000, udpTimeout: -1000, excludeCIDRs: ['192.168.0.0/16', 'invalid'] } })).toEqual([
      'ipvs.tcpTimeout: Invalid value: "-1s": must be greater than or equal to 0',
      'ipvs.tcpFinTimeout: Invalid value: "-1s": must be greater than or equal to 0',
      'ipvs.udpTimeout: Invalid value: "-1s": must be greater than or equal to 0',
      'ipvs.excludeCIDRs[1]: Invalid value: "invalid": must be a valid CIDR',
    ]);
    expect(check({ mode: 'iptables', ipvs: { scheduler: 'fastest' } })).toEqual([]);
  });

  it('checks feature gate names and the log format', () => {
    expect(check({ featureGates: { 'not a gate': true } })).toEqual(['featureGates.not a gate: Invalid value: "not a gate": must be a feature gate name (letters and digits)']);
    expect(check({ logging: { format: 'xml' } })).toEqual(['logging.format: Unsupported value: "xml": supported values: "text", "json"']);
    expect(check({ logging: { format: 'json', vmodule: [{ filePattern: 'x', verbosity: 2 }] } })).toEqual([
      'logging.vmodule: Invalid value: [{"filePattern":"x","verbosity":2}]: only supported for text log format',
    ]);
  });

  it('collects every error, not just the first', () => {
    const errors = check({ mode: 'ipvs', iptables: { masqueradeBit: 99 }, oomScoreAdj: -5000, bindAddress: 'x', nodePortAddresses: ['y'], ipvs: { scheduler: 'z' } });
    expect(errors.map((e) => e.split(':')[0])).toEqual(['iptables.masqueradeBit', 'ipvs.scheduler', 'oomScoreAdj', 'bindAddress', 'nodePortAddresses[0]']);
  });
});

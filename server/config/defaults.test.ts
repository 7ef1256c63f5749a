import { describe, expect, it } from 'vitest';
import { toProxyConfig } from './convert.ts';
import { decodeKubeProxyConfiguration } from './decode.ts';
import { setDefaults } from './defaults.ts';
import type { KubeProxyConfigurationDocument } from './v1alpha1.ts';

// What `kube-proxy --write-config-to` prints for an empty v1alpha1 config on
// Linux (kube-proxy 1.31+), i.e. kube-proxy's defaults, written out field by field.
const KUBE_PROXY_DEFAULTS_YAML = `
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 10
  contentType: application/vnd.kubernetes.protobuf
  kubeconfig: ""
  qps: 5
clusterCIDR: ""
configSyncPeriod: 15m0s
conntrack:
  maxPerCore: 32768
  min: 131072
  tcpBeLiberal: false
  tcpCloseWaitTimeout: 1h0m0s
  tcpEstablishedTimeout: 24h0m0s
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
featureGates: {}
healthzBindAddress: 0.0.0.0:10256
hostnameOverride: ""
iptables:
  localhostNodePorts: true
  masqueradeAll: false
  masqueradeBit: 14
  minSyncPeriod: 1s
  syncPeriod: 30s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 30s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
logging:
  flushFrequency: 5s
  format: text
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
metricsBindAddress: 127.0.0.1:10249
mode: ""
nftables:
  masqueradeAll: false
  masqueradeBit: 14
  minSyncPeriod: 1s
  syncPeriod: 30s
nodePortAddresses: null
oomScoreAdj: -999
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
`;

function decode(text: string): KubeProxyConfigurationDocument {
  const r = decodeKubeProxyConfiguration(text);
  if (!r.ok) throw new Error(JSON.stringify(r.errors));
  return r.document;
}

const header = 'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n';

describe('setDefaults (kube-proxy v1alpha1 defaults)', () => {
  it("defaults an empty configuration to exactly kube-proxy's defaults", () => {
    const fromKubeProxy = setDefaults(decode(KUBE_PROXY_DEFAULTS_YAML));
    expect(setDefaults({})).toEqual(fromKubeProxy);
    expect(setDefaults(decode(header))).toEqual(fromKubeProxy);
  });

  it('has the documented values', () => {
    const d = setDefaults();
    expect(d.iptables).toEqual({ masqueradeBit: 14, masqueradeAll: false, localhostNodePorts: true, syncPeriod: 30_000, minSyncPeriod: 1000 });
    expect(d.nftables).toEqual({ masqueradeBit: 14, masqueradeAll: false, syncPeriod: 30_000, minSyncPeriod: 1000 });
    expect(d.ipvs).toMatchObject({ syncPeriod: 30_000, minSyncPeriod: 0, scheduler: '', excludeCIDRs: [] });
    expect(d.conntrack).toEqual({
      maxPerCore: 32_768,
      min: 131_072,
      tcpEstablishedTimeout: 24 * 3_600_000,
      tcpCloseWaitTimeout: 3_600_000,
      tcpBeLiberal: false,
      udpTimeout: 0,
      udpStreamTimeout: 0,
    });
    expect(d.healthzBindAddress).toBe('0.0.0.0:10256');
    expect(d.metricsBindAddress).toBe('127.0.0.1:10249');
    expect(d.configSyncPeriod).toBe(15 * 60_000);
    expect(d.oomScoreAdj).toBe(-999);
    expect(d.mode).toBe('');
    expect(d.detectLocalMode).toBe('');
    expect(d.clientConnection).toEqual({ kubeconfig: '', acceptContentTypes: '', contentType: 'application/vnd.kubernetes.protobuf', qps: 5, burst: 10 });
  });

  it('defaults zero plain durations but keeps explicit zero for pointer fields, like kube-proxy', () => {
    const d = setDefaults(
      decode(`${header}iptables: {syncPeriod: 0s, minSyncPeriod: 0s, masqueradeBit: 0, localhostNodePorts: false}
conntrack: {tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s, maxPerCore: 0, min: 0}
oomScoreAdj: 0
configSyncPeriod: 0s
`),
    );
    expect(d.iptables).toMatchObject({ syncPeriod: 30_000, minSyncPeriod: 1000, masqueradeBit: 0, localhostNodePorts: false });
    expect(d.conntrack).toMatchObject({ tcpEstablishedTimeout: 0, tcpCloseWaitTimeout: 0, maxPerCore: 0, min: 0 });
    expect(d.oomScoreAdj).toBe(0);
    expect(d.configSyncPeriod).toBe(15 * 60_000);
  });

  it('moves the default listeners to IPv6 when bindAddress is IPv6', () => {
    const d = setDefaults({ bindAddress: '::' });
    expect(d.healthzBindAddress).toBe('[::]:10256');
    expect(d.metricsBindAddress).toBe('[::1]:10249');
  });

  it('appends the default port to a bare listener IP and leaves host:port alone', () => {
    const d = setDefaults({ healthzBindAddress: '10.0.0.1', metricsBindAddress: 'fd00::1' });
    expect(d.healthzBindAddress).toBe('10.0.0.1:10256');
    expect(d.metricsBindAddress).toBe('[fd00::1]:10249');
    expect(setDefaults({ metricsBindAddress: '0.0.0.0:9999' }).metricsBindAddress).toBe('0.0.0.0:9999');
  });

  it('does not share arrays or maps with the decoded document', () => {
    const doc: KubeProxyConfigurationDocument = { nodePortAddresses: ['10.0.0.0/8'], featureGates: { A: true } };
    const d = setDefaults(doc);
    d.nodePortAddresses.push('x');
    d.featureGates.B = false;
    expect(doc).toEqual({ nodePortAddresses: ['10.0.0.0/8'], featureGates: { A: true } });
  });
});

describe('toProxyConfig', () => {
  it('resolves blank values to what kube-proxy means by them', () => {
    const c = toProxyConfig(setDefaults());
    expect(c.mode).toBe('iptables');
    expect(c.detectLocalMode).toBe('ClusterCIDR');
    expect(c.ipvs.scheduler).toBe('rr');
    expect(c.clusterCIDRs).toEqual([]);
    expect(c.iptables.syncPeriodMs).toBe(30_000);
    expect(c.conntrack.tcpCloseWaitTimeoutMs).toBe(3_600_000);
    expect(c.logging).toEqual({ verbosity: 0, format: 'text' });
  });

  it('splits clusterCIDR into one CIDR per family', () => {
    const c = toProxyConfig(setDefaults({ clusterCIDR: '10.244.0.0/16, fd00:10:244::/56' }));
    expect(c.clusterCIDRs).toEqual(['10.244.0.0/16', 'fd00:10:244::/56']);
  });
});

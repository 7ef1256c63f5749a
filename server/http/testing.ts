import type { ProxyConfig } from '../config/types.ts';

/** testProxyConfig is kube-proxy's defaulted configuration as a ProxyConfig, for tests of the node servers. */
export function testProxyConfig(over: Partial<ProxyConfig> = {}): ProxyConfig {
  return {
    mode: 'iptables',
    hostnameOverride: '',
    bindAddress: '0.0.0.0',
    healthzBindAddress: '0.0.0.0:10256',
    metricsBindAddress: '127.0.0.1:10249',
    bindAddressHardFail: false,
    clusterCIDRs: [],
    detectLocalMode: 'ClusterCIDR',
    detectLocal: { bridgeInterface: '', interfaceNamePrefix: '' },
    nodePortAddresses: [],
    configSyncPeriodMs: 900_000,
    oomScoreAdj: -999,
    clientConnection: { kubeconfig: '', qps: 5, burst: 10, contentType: 'application/vnd.kubernetes.protobuf', acceptContentTypes: '' },
    iptables: { masqueradeAll: false, masqueradeBit: 14, localhostNodePorts: true, syncPeriodMs: 30_000, minSyncPeriodMs: 1_000 },
    nftables: { masqueradeAll: false, masqueradeBit: 14, syncPeriodMs: 30_000, minSyncPeriodMs: 1_000 },
    ipvs: { scheduler: 'rr', excludeCIDRs: [], strictARP: false, syncPeriodMs: 30_000, minSyncPeriodMs: 0, tcpTimeoutMs: 0, tcpFinTimeoutMs: 0, udpTimeoutMs: 0 },
    conntrack: {
      maxPerCore: 32768,
      min: 131072,
      tcpEstablishedTimeoutMs: 86_400_000,
      tcpCloseWaitTimeoutMs: 3_600_000,
      tcpBeLiberal: false,
      udpTimeoutMs: 0,
      udpStreamTimeoutMs: 0,
    },
    featureGates: {},
    logging: { verbosity: 0, format: 'text' },
    ...over,
  };
}

import { ipFamilyOf } from '../net/ip.ts';
import { appendPortIfNeeded } from './host-port.ts';
import { API_VERSION, KIND, type KubeProxyConfiguration, type KubeProxyConfigurationDocument } from './v1alpha1.ts';

/**
 * kube-proxy's v1alpha1 defaults (pkg/proxy/apis/config/v1alpha1/defaults.go),
 * applied the way kube-proxy applies them. Two rules matter:
 * - Plain durations and numbers (iptables.syncPeriod, clientConnection.qps...)
 *   are defaulted when zero: `syncPeriod: 0s` in a file means "default".
 * - Pointer fields (masqueradeBit, localhostNodePorts, oomScoreAdj, conntrack
 *   maxPerCore/min/tcpEstablishedTimeout/tcpCloseWaitTimeout) are defaulted only
 *   when absent or null: `tcpEstablishedTimeout: 0s` means "leave the kernel's
 *   value alone", exactly as with kube-proxy.
 */

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;

/** ProxyHealthzPort / ProxyStatusPort are kube-proxy's ports (pkg/cluster/ports). */
export const PROXY_HEALTHZ_PORT = 10256;
export const PROXY_STATUS_PORT = 10249;
/** KUBE_PROXY_OOM_SCORE_ADJ is qos.KubeProxyOOMScoreAdj. */
export const KUBE_PROXY_OOM_SCORE_ADJ = -999;

const orZero = (v: number | undefined, dflt: number) => (v ? v : dflt);

/** setDefaults returns a complete copy of a decoded document with kube-proxy's defaults filled in. */
export function setDefaults(doc: KubeProxyConfigurationDocument = {}): KubeProxyConfiguration {
  const bindAddress = doc.bindAddress || '0.0.0.0';
  // An IPv6 bindAddress moves the default listeners to IPv6 (getDefaultAddresses).
  const ipv4 = ipFamilyOf(bindAddress) === 'IPv4';
  const [healthzHost, metricsHost] = ipv4 ? ['0.0.0.0', '127.0.0.1'] : ['[::]', '[::1]'];
  const ipt = doc.iptables ?? {};
  const ipvs = doc.ipvs ?? {};
  const nft = doc.nftables ?? {};
  const ct = doc.conntrack ?? {};
  const cc = doc.clientConnection ?? {};
  const log = doc.logging ?? {};
  const win = doc.winkernel ?? {};
  const formatOptions = (o: { splitStream?: boolean; infoBufferSize?: string } = {}) => ({
    splitStream: o.splitStream ?? false,
    infoBufferSize: o.infoBufferSize ?? '0',
  });
  return {
    apiVersion: API_VERSION,
    kind: KIND,
    featureGates: { ...doc.featureGates },
    clientConnection: {
      kubeconfig: cc.kubeconfig ?? '',
      acceptContentTypes: cc.acceptContentTypes ?? '',
      contentType: cc.contentType || 'application/vnd.kubernetes.protobuf',
      qps: orZero(cc.qps, 5),
      burst: orZero(cc.burst, 10),
    },
    // logsapi.SetRecommendedLoggingConfiguration
    logging: {
      format: log.format || 'text',
      flushFrequency: orZero(log.flushFrequency, 5 * SECOND),
      verbosity: log.verbosity ?? 0,
      vmodule: (log.vmodule ?? []).map((v) => ({ filePattern: v.filePattern ?? '', verbosity: v.verbosity ?? 0 })),
      options: { text: formatOptions(log.options?.text), json: formatOptions(log.options?.json) },
    },
    hostnameOverride: doc.hostnameOverride ?? '',
    bindAddress,
    healthzBindAddress: doc.healthzBindAddress ? appendPortIfNeeded(doc.healthzBindAddress, PROXY_HEALTHZ_PORT) : `${healthzHost}:${PROXY_HEALTHZ_PORT}`,
    metricsBindAddress: doc.metricsBindAddress ? appendPortIfNeeded(doc.metricsBindAddress, PROXY_STATUS_PORT) : `${metricsHost}:${PROXY_STATUS_PORT}`,
    bindAddressHardFail: doc.bindAddressHardFail ?? false,
    enableProfiling: doc.enableProfiling ?? false,
    showHiddenMetricsForVersion: doc.showHiddenMetricsForVersion ?? '',
    mode: doc.mode ?? '',
    iptables: {
      masqueradeBit: ipt.masqueradeBit ?? 14,
      masqueradeAll: ipt.masqueradeAll ?? false,
      localhostNodePorts: ipt.localhostNodePorts ?? true,
      syncPeriod: orZero(ipt.syncPeriod, 30 * SECOND),
      minSyncPeriod: orZero(ipt.minSyncPeriod, 1 * SECOND),
    },
    ipvs: {
      syncPeriod: orZero(ipvs.syncPeriod, 30 * SECOND),
      // kube-proxy leaves ipvs.minSyncPeriod at 0s: every change syncs at once.
      minSyncPeriod: ipvs.minSyncPeriod ?? 0,
      scheduler: ipvs.scheduler ?? '',
      excludeCIDRs: [...(ipvs.excludeCIDRs ?? [])],
      strictARP: ipvs.strictARP ?? false,
      tcpTimeout: ipvs.tcpTimeout ?? 0,
      tcpFinTimeout: ipvs.tcpFinTimeout ?? 0,
      udpTimeout: ipvs.udpTimeout ?? 0,
    },
    nftables: {
      masqueradeBit: nft.masqueradeBit ?? 14,
      masqueradeAll: nft.masqueradeAll ?? false,
      syncPeriod: orZero(nft.syncPeriod, 30 * SECOND),
      minSyncPeriod: orZero(nft.minSyncPeriod, 1 * SECOND),
    },
    winkernel: {
      networkName: win.networkName ?? '',
      sourceVip: win.sourceVip ?? '',
      enableDSR: win.enableDSR ?? false,
      rootHnsEndpointName: win.rootHnsEndpointName ?? '',
      forwardHealthCheckVip: win.forwardHealthCheckVip ?? false,
    },
    detectLocalMode: doc.detectLocalMode ?? '',
    detectLocal: {
      bridgeInterface: doc.detectLocal?.bridgeInterface ?? '',
      interfaceNamePrefix: doc.detectLocal?.interfaceNamePrefix ?? '',
    },
    clusterCIDR: doc.clusterCIDR ?? '',
    nodePortAddresses: [...(doc.nodePortAddresses ?? [])],
    oomScoreAdj: doc.oomScoreAdj ?? KUBE_PROXY_OOM_SCORE_ADJ,
    conntrack: {
      maxPerCore: ct.maxPerCore ?? 32 * 1024,
      min: ct.min ?? 128 * 1024,
      tcpEstablishedTimeout: ct.tcpEstablishedTimeout ?? 24 * HOUR,
      tcpCloseWaitTimeout: ct.tcpCloseWaitTimeout ?? 1 * HOUR,
      tcpBeLiberal: ct.tcpBeLiberal ?? false,
      udpTimeout: ct.udpTimeout ?? 0,
      udpStreamTimeout: ct.udpStreamTimeout ?? 0,
    },
    configSyncPeriod: orZero(doc.configSyncPeriod, 15 * MINUTE),
    portRange: doc.portRange ?? '',
    // kube-proxy 1.25's default (removed with the userspace proxy in 1.26).
    udpIdleTimeout: orZero(doc.udpIdleTimeout, 250),
    windowsRunAsService: doc.windowsRunAsService ?? false,
  };
}

import { DEFAULT_PROXY_MODE, isProxyMode } from './proxy-mode.ts';
import { parsePortRange } from './port-range.ts';
import type { ProxyConfig } from './types.ts';
import type { KubeProxyConfiguration } from './v1alpha1.ts';

/**
 * USERSPACE_LIMITS are the userspace mode's default limits. Each relayed TCP
 * connection holds two file descriptors and each UDP session one, so the
 * defaults stay well inside a 65,536 descriptor limit (RLIMIT_NOFILE; the
 * mode warns at start when the process may open fewer).
 */
export const USERSPACE_LIMITS = {
  maxConnections: 16_384,
  maxConnectionsPerService: 4_096,
  maxUDPSessions: 4_096,
  drainTimeoutMs: 0,
} as const;

/**
 * toProxyConfig turns a defaulted, validated v1alpha1 document into kproxy's
 * effective ProxyConfig, resolving kube-proxy's "blank means default" values:
 * mode "" is iptables, detectLocalMode "" is ClusterCIDR, ipvs.scheduler "" is rr.
 * Call it only after validateKubeProxyConfiguration returned no errors: the
 * casts below rely on the enumerations having been checked.
 */
export function toProxyConfig(c: KubeProxyConfiguration): ProxyConfig {
  return {
    mode: isProxyMode(c.mode) ? c.mode : DEFAULT_PROXY_MODE,
    hostnameOverride: c.hostnameOverride,
    bindAddress: c.bindAddress,
    healthzBindAddress: c.healthzBindAddress,
    metricsBindAddress: c.metricsBindAddress,
    bindAddressHardFail: c.bindAddressHardFail,
    clusterCIDRs: c.clusterCIDR === '' ? [] : c.clusterCIDR.split(',').map((s) => s.trim()),
    detectLocalMode: (c.detectLocalMode || 'ClusterCIDR') as ProxyConfig['detectLocalMode'],
    detectLocal: { ...c.detectLocal },
    nodePortAddresses: [...c.nodePortAddresses],
    configSyncPeriodMs: c.configSyncPeriod,
    oomScoreAdj: c.oomScoreAdj,
    clientConnection: { ...c.clientConnection },
    iptables: {
      masqueradeAll: c.iptables.masqueradeAll,
      masqueradeBit: c.iptables.masqueradeBit,
      localhostNodePorts: c.iptables.localhostNodePorts,
      syncPeriodMs: c.iptables.syncPeriod,
      minSyncPeriodMs: c.iptables.minSyncPeriod,
    },
    nftables: {
      masqueradeAll: c.nftables.masqueradeAll,
      masqueradeBit: c.nftables.masqueradeBit,
      syncPeriodMs: c.nftables.syncPeriod,
      minSyncPeriodMs: c.nftables.minSyncPeriod,
    },
    ipvs: {
      scheduler: c.ipvs.scheduler || 'rr',
      excludeCIDRs: [...c.ipvs.excludeCIDRs],
      strictARP: c.ipvs.strictARP,
      syncPeriodMs: c.ipvs.syncPeriod,
      minSyncPeriodMs: c.ipvs.minSyncPeriod,
      tcpTimeoutMs: c.ipvs.tcpTimeout,
      tcpFinTimeoutMs: c.ipvs.tcpFinTimeout,
      udpTimeoutMs: c.ipvs.udpTimeout,
    },
    userspace: {
      udpIdleTimeoutMs: c.udpIdleTimeout,
      portRange: parsePortRange(c.portRange) ?? null,
      ...USERSPACE_LIMITS,
    },
    conntrack: {
      maxPerCore: c.conntrack.maxPerCore,
      min: c.conntrack.min,
      tcpEstablishedTimeoutMs: c.conntrack.tcpEstablishedTimeout,
      tcpCloseWaitTimeoutMs: c.conntrack.tcpCloseWaitTimeout,
      tcpBeLiberal: c.conntrack.tcpBeLiberal,
      udpTimeoutMs: c.conntrack.udpTimeout,
      udpStreamTimeoutMs: c.conntrack.udpStreamTimeout,
    },
    featureGates: { ...c.featureGates },
    logging: { verbosity: c.logging.verbosity, format: c.logging.format as ProxyConfig['logging']['format'] },
  };
}

import type { ProxyMode } from './proxy-mode.ts';
import type { PortRange } from './port-range.ts';

/**
 * ProxyConfig is kproxy's effective configuration: a KubeProxyConfiguration
 * (kubeproxy.config.k8s.io/v1alpha1) after defaults and validation, with flags
 * applied over the file. Durations are milliseconds; field names follow the
 * KubeProxyConfiguration ones so `/configz` reads like kube-proxy's.
 */
export interface ProxyConfig {
  mode: ProxyMode;
  /** hostnameOverride: this node's name when set ("" = use the host name). */
  hostnameOverride: string;
  /** bindAddress: the address kube-proxy historically bound; kproxy uses it for the IP family (0.0.0.0 = IPv4). */
  bindAddress: string;
  /** healthzBindAddress: host:port of /healthz and /livez ("" disables). */
  healthzBindAddress: string;
  /** metricsBindAddress: host:port of /metrics and the dashboard ("" disables). */
  metricsBindAddress: string;
  /** bindAddressHardFail: exit when a server port cannot be bound (kube-proxy's flag). */
  bindAddressHardFail: boolean;
  /** clusterCIDRs: pod network ranges (--cluster-cidr, comma separated). */
  clusterCIDRs: string[];
  detectLocalMode: 'ClusterCIDR' | 'NodeCIDR' | 'BridgeInterface' | 'InterfaceNamePrefix';
  detectLocal: { bridgeInterface: string; interfaceNamePrefix: string };
  /** nodePortAddresses: CIDRs (or the single value "primary") node ports are accepted on; [] = all. */
  nodePortAddresses: string[];
  /** configSyncPeriod: informer resync period. */
  configSyncPeriodMs: number;
  /** oomScoreAdj: the OOM score adjustment for the process (null = leave it). */
  oomScoreAdj: number | null;
  clientConnection: { kubeconfig: string; qps: number; burst: number; contentType: string; acceptContentTypes: string };
  iptables: {
    masqueradeAll: boolean;
    masqueradeBit: number;
    /** localhostNodePorts: node ports answer on 127.0.0.1 (route_localnet). */
    localhostNodePorts: boolean;
    syncPeriodMs: number;
    minSyncPeriodMs: number;
  };
  nftables: {
    masqueradeAll: boolean;
    masqueradeBit: number;
    syncPeriodMs: number;
    minSyncPeriodMs: number;
  };
  ipvs: {
    /** scheduler: rr (default), lc, dh, sh, sed, nq, mh, wrr, wlc, lblc, lblcr, fo, ovf... */
    scheduler: string;
    excludeCIDRs: string[];
    strictARP: boolean;
    syncPeriodMs: number;
    minSyncPeriodMs: number;
    /** tcpTimeout/tcpFinTimeout/udpTimeout: IPVS connection timeouts (0 = leave). */
    tcpTimeoutMs: number;
    tcpFinTimeoutMs: number;
    udpTimeoutMs: number;
  };
  /**
   * userspace: the relay mode (--proxy-mode userspace). udpIdleTimeout and
   * portRange are kube-proxy 1.25's fields; the limits are kproxy's own flags
   * (0 means no limit).
   */
  userspace: {
    /** udpIdleTimeoutMs: a UDP session without a datagram either way for this long ends (default 250 ms). */
    udpIdleTimeoutMs: number;
    /** portRange: the node ports proxy sockets may take; null lets the kernel choose free ones. */
    portRange: PortRange | null;
    /** maxConnections: open TCP connections relayed at once, all Services together. */
    maxConnections: number;
    /** maxConnectionsPerService: open TCP connections relayed at once for one Service (all its ports). */
    maxConnectionsPerService: number;
    /** maxUDPSessions: UDP client sessions at once, all Services together. */
    maxUDPSessions: number;
    /** drainTimeoutMs: open connections to a removed endpoint are closed this long after it left (0: when they end). */
    drainTimeoutMs: number;
  };
  conntrack: {
    /** maxPerCore: nf_conntrack_max = max(maxPerCore * cores, min); 0 leaves the limit alone. */
    maxPerCore: number;
    min: number;
    /** 0 leaves the kernel's value alone. */
    tcpEstablishedTimeoutMs: number;
    tcpCloseWaitTimeoutMs: number;
    tcpBeLiberal: boolean;
    udpTimeoutMs: number;
    udpStreamTimeoutMs: number;
  };
  featureGates: Record<string, boolean>;
  logging: { verbosity: number; format: 'text' | 'json' };
}

/**
 * RunOptions are kproxy's own command-line choices, outside KubeProxyConfiguration.
 */
export interface RunOptions {
  /** configFile: --config path, or null. */
  configFile: string | null;
  /** kubeconfig: --kubeconfig path (also clientConnection.kubeconfig), or null. */
  kubeconfig: string | null;
  /** source: "file:PATH" or null (Kubernetes API). */
  source: string | null;
  /** sourceIsDefault: the embedded default (deploy/examples/) was chosen because no cluster config exists. */
  sourceIsDefault: boolean;
  once: boolean;
  /** onceTimeoutMs (--once-timeout): how long --once waits for its source to sync; 0 = no limit. */
  onceTimeoutMs: number;
  cleanup: boolean;
  dryRun: boolean;
  dashboardTokenFile: string | null;
  /** dashboardBindAddress: the dashboard's own listener (host:port), or null to serve it on the metrics listener. */
  dashboardBindAddress: string | null;
  /** dashboardTlsCertFile / dashboardTlsKeyFile: PEM files the dashboard's listener serves HTTPS with (both or neither). */
  dashboardTlsCertFile: string | null;
  dashboardTlsKeyFile: string | null;
  /** dashboardTokenAudience: the audience delegated auth asks TokenReview for. */
  dashboardTokenAudience: string;
  /** iptablesFlavor (--iptables-flavor): which iptables binaries to use; auto decides like kube-proxy's images. */
  iptablesFlavor: 'auto' | 'legacy' | 'nft';
  /** nftablesBackend (--nftables-backend): nftables mode writes over netlink (nft -f as its fallback) or with nft -f alone. */
  nftablesBackend?: 'netlink' | 'nft';
  /** userspace*: the userspace mode's limits (--userspace-max-connections…); absent keeps the default. */
  userspaceMaxConnections?: number;
  userspaceMaxConnectionsPerService?: number;
  userspaceMaxUDPSessions?: number;
  userspaceDrainTimeoutMs?: number;
  /** version: print versions and exit. */
  version: boolean;
  help: boolean;
}

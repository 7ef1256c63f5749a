import type { RunOptions } from './types.ts';
import { IPVS_SCHEDULERS } from './modes.ts';
import { PROXY_MODES } from './proxy-mode.ts';
import { LOCAL_MODES, LOG_FORMATS } from './validation.ts';

/**
 * The command line (docs/configuration.md, "Flags"): kube-proxy's flag names and
 * meanings where kube-proxy has the flag, plus kproxy's own. A flag either sets
 * KubeProxyConfiguration fields (`fields`, dotted v1alpha1 paths) or a RunOptions
 * entry (`run`). Unlike kube-proxy, which ignores most flags when --config is
 * given, kproxy applies every flag over the file.
 */

export type FlagKind = 'string' | 'bool' | 'int32' | 'uint32' | 'float' | 'duration' | 'strings' | 'boolMap' | 'enum';

export type FlagGroup = 'Sources and node' | 'Proxy' | 'iptables and nftables' | 'IPVS' | 'Userspace' | 'Conntrack' | 'Servers' | 'Process and logging' | 'Run modes';

export interface FlagSpec {
  readonly name: string;
  /** short: a one-letter alias used with one dash (-v, -h). */
  readonly short?: string;
  readonly kind: FlagKind;
  /** values: what an enum flag accepts. */
  readonly values?: readonly string[];
  /** arg: the value's placeholder in --help (FILE, DURATION...). */
  readonly arg?: string;
  readonly group: FlagGroup;
  readonly help: string;
  /** fields: the v1alpha1 fields the flag sets (the first one's default is shown in --help). */
  readonly fields?: readonly string[];
  readonly run?: keyof RunOptions;
  /** defaultText: what --help shows as the default when the field's own default reads badly ("" = none). */
  readonly defaultText?: string;
}

const f = (spec: FlagSpec) => spec;

export const FLAG_SPECS: readonly FlagSpec[] = [
  // --- where objects come from, and who this node is
  f({ name: 'config', kind: 'string', arg: 'FILE', group: 'Sources and node', run: 'configFile', help: 'KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) YAML file; flags override it' }),
  f({
    name: 'kubeconfig',
    kind: 'string',
    arg: 'FILE',
    group: 'Sources and node',
    fields: ['clientConnection.kubeconfig'],
    help: 'kubeconfig for the Kubernetes API; without it, the in-cluster config if present',
  }),
  f({
    name: 'source',
    kind: 'string',
    arg: 'file:PATH',
    group: 'Sources and node',
    run: 'source',
    defaultText: 'the Kubernetes API (--kubeconfig or in-cluster); otherwise, with --dry-run only, the example cluster file:<package>/deploy/examples/; a real start with neither exits 1',
    help: 'read Services, EndpointSlices and Nodes from a manifest file or folder and follow its edits',
  }),
  f({
    name: 'hostname-override',
    kind: 'string',
    arg: 'NAME',
    group: 'Sources and node',
    fields: ['hostnameOverride'],
    defaultText: 'the host name',
    help: "this node's name (decides which endpoints are local)",
  }),
  f({ name: 'config-sync-period', kind: 'duration', arg: 'DURATION', group: 'Sources and node', fields: ['configSyncPeriod'], help: 'how often informers resync from the API server; > 0' }),
  f({ name: 'kube-api-qps', kind: 'float', arg: 'QPS', group: 'Sources and node', fields: ['clientConnection.qps'], help: 'queries per second to the API server' }),
  f({ name: 'kube-api-burst', kind: 'int32', arg: 'N', group: 'Sources and node', fields: ['clientConnection.burst'], help: 'burst of queries to the API server' }),
  f({ name: 'kube-api-content-type', kind: 'string', arg: 'TYPE', group: 'Sources and node', fields: ['clientConnection.contentType'], help: 'content type of requests to the API server' }),

  // --- what gets proxied and how
  f({
    name: 'proxy-mode',
    kind: 'enum',
    values: [...PROXY_MODES, ''],
    arg: 'MODE',
    group: 'Proxy',
    fields: ['mode'],
    defaultText: 'iptables',
    help: 'backend: iptables, nftables, ipvs or userspace (kproxy relays every connection itself)',
  }),
  f({
    name: 'cluster-cidr',
    kind: 'string',
    arg: 'CIDR[,CIDR]',
    group: 'Proxy',
    fields: ['clusterCIDR'],
    help: 'pod network range(s), one per IP family; traffic from it is local with --detect-local-mode=ClusterCIDR',
  }),
  f({
    name: 'detect-local-mode',
    kind: 'enum',
    values: [...LOCAL_MODES, ''],
    arg: 'MODE',
    group: 'Proxy',
    fields: ['detectLocalMode'],
    defaultText: 'ClusterCIDR',
    help: `how to tell pod traffic: ${LOCAL_MODES.join(', ')}`,
  }),
  f({
    name: 'pod-bridge-interface',
    kind: 'string',
    arg: 'IFACE',
    group: 'Proxy',
    fields: ['detectLocal.bridgeInterface'],
    help: 'bridge whose traffic is local (--detect-local-mode=BridgeInterface)',
  }),
  f({
    name: 'pod-interface-name-prefix',
    kind: 'string',
    arg: 'PREFIX',
    group: 'Proxy',
    fields: ['detectLocal.interfaceNamePrefix'],
    help: 'interfaces whose traffic is local (--detect-local-mode=InterfaceNamePrefix)',
  }),
  f({
    name: 'nodeport-addresses',
    kind: 'strings',
    arg: 'CIDR,...|primary',
    group: 'Proxy',
    fields: ['nodePortAddresses'],
    defaultText: 'all local addresses',
    help: "node IPs that accept NodePort connections: CIDRs, or 'primary' for the Node's primary IPs",
  }),
  f({ name: 'masquerade-all', kind: 'bool', group: 'Proxy', fields: ['iptables.masqueradeAll', 'nftables.masqueradeAll'], help: 'SNAT all traffic sent to Service cluster IPs' }),
  f({
    name: 'bind-address',
    kind: 'string',
    arg: 'IP',
    group: 'Proxy',
    fields: ['bindAddress'],
    help: "this node's primary IP as kube-proxy sees it (its family picks IPv4 or IPv6); only the userspace mode binds to it (its proxy sockets)",
  }),
  f({ name: 'feature-gates', kind: 'boolMap', arg: 'NAME=BOOL,...', group: 'Proxy', fields: ['featureGates'], help: 'kube-proxy feature gates (accepted; kproxy implements none yet)' }),

  // --- iptables and nftables backends
  f({
    name: 'iptables-flavor',
    kind: 'enum',
    values: ['auto', 'legacy', 'nft'],
    arg: 'auto|legacy|nft',
    group: 'iptables and nftables',
    run: 'iptablesFlavor',
    defaultText: 'auto',
    help: "which iptables binaries to use; auto picks the one holding the most rules, like kube-proxy's image",
  }),
  f({
    name: 'nftables-backend',
    kind: 'enum',
    values: ['netlink', 'nft'],
    arg: 'netlink|nft',
    group: 'iptables and nftables',
    run: 'nftablesBackend',
    defaultText: 'netlink',
    help: 'how nftables mode writes the kernel: netlink (straight to nf_tables through the nfnl-pipe program, falling back to nft -f for what it cannot write) or nft (nft -f for every sync)',
  }),
  f({ name: 'iptables-masquerade-bit', kind: 'int32', arg: 'N', group: 'iptables and nftables', fields: ['iptables.masqueradeBit'], help: 'fwmark bit for packets needing SNAT; 0..31' }),
  f({
    name: 'iptables-sync-period',
    kind: 'duration',
    arg: 'DURATION',
    group: 'iptables and nftables',
    fields: ['iptables.syncPeriod', 'nftables.syncPeriod'],
    help: 'resync and retry interval (also nftables mode, as in kube-proxy); > 0',
  }),
  f({
    name: 'iptables-min-sync-period',
    kind: 'duration',
    arg: 'DURATION',
    group: 'iptables and nftables',
    fields: ['iptables.minSyncPeriod', 'nftables.minSyncPeriod'],
    help: 'minimum time between syncs (also nftables mode); 0 syncs on every change',
  }),
  f({
    name: 'iptables-localhost-nodeports',
    kind: 'bool',
    group: 'iptables and nftables',
    fields: ['iptables.localhostNodePorts'],
    help: 'accept NodePort connections on 127.0.0.1 (iptables mode, IPv4 only)',
  }),

  // --- IPVS backend
  f({ name: 'ipvs-scheduler', kind: 'string', arg: 'NAME', group: 'IPVS', fields: ['ipvs.scheduler'], defaultText: 'rr', help: `IPVS scheduler: ${IPVS_SCHEDULERS.join(', ')}` }),
  f({ name: 'ipvs-sync-period', kind: 'duration', arg: 'DURATION', group: 'IPVS', fields: ['ipvs.syncPeriod'], help: 'IPVS resync and retry interval; > 0' }),
  f({ name: 'ipvs-min-sync-period', kind: 'duration', arg: 'DURATION', group: 'IPVS', fields: ['ipvs.minSyncPeriod'], help: 'minimum time between IPVS syncs; 0 syncs on every change' }),
  f({ name: 'ipvs-exclude-cidrs', kind: 'strings', arg: 'CIDR,...', group: 'IPVS', fields: ['ipvs.excludeCIDRs'], help: 'virtual servers in these ranges are never cleaned up' }),
  f({ name: 'ipvs-strict-arp', kind: 'bool', group: 'IPVS', fields: ['ipvs.strictARP'], help: 'set arp_ignore=1 and arp_announce=2' }),
  f({ name: 'ipvs-tcp-timeout', kind: 'duration', arg: 'DURATION', group: 'IPVS', fields: ['ipvs.tcpTimeout'], help: 'idle IPVS TCP connection timeout; 0 leaves it' }),
  f({ name: 'ipvs-tcpfin-timeout', kind: 'duration', arg: 'DURATION', group: 'IPVS', fields: ['ipvs.tcpFinTimeout'], help: 'IPVS TCP timeout after a FIN; 0 leaves it' }),
  f({ name: 'ipvs-udp-timeout', kind: 'duration', arg: 'DURATION', group: 'IPVS', fields: ['ipvs.udpTimeout'], help: 'IPVS UDP timeout; 0 leaves it' }),

  // --- userspace (relay) backend: kube-proxy 1.25's two flags, then kproxy's limits
  f({
    name: 'proxy-port-range',
    kind: 'string',
    arg: 'RANGE',
    group: 'Userspace',
    fields: ['portRange'],
    defaultText: 'free ports the kernel picks',
    help: 'node ports the proxy sockets may take: BEGIN-END, BEGIN+OFFSET or one PORT (inclusive)',
  }),
  f({ name: 'udp-timeout', kind: 'duration', arg: 'DURATION', group: 'Userspace', fields: ['udpIdleTimeout'], help: 'an idle UDP session ends after this long; > 0' }),
  f({
    name: 'userspace-max-connections',
    kind: 'uint32',
    arg: 'N',
    group: 'Userspace',
    run: 'userspaceMaxConnections',
    defaultText: '16384',
    help: 'TCP connections relayed at once, all Services together; past it new ones are reset and counted; 0 = no limit',
  }),
  f({
    name: 'userspace-max-connections-per-service',
    kind: 'uint32',
    arg: 'N',
    group: 'Userspace',
    run: 'userspaceMaxConnectionsPerService',
    defaultText: '4096',
    help: 'TCP connections relayed at once for one Service; 0 = no limit',
  }),
  f({
    name: 'userspace-max-udp-sessions',
    kind: 'uint32',
    arg: 'N',
    group: 'Userspace',
    run: 'userspaceMaxUDPSessions',
    defaultText: '4096',
    help: 'UDP client sessions at once; past it datagrams of new clients are dropped and counted; 0 = no limit',
  }),
  f({
    name: 'userspace-drain-timeout',
    kind: 'duration',
    arg: 'DURATION',
    group: 'Userspace',
    run: 'userspaceDrainTimeoutMs',
    defaultText: '0 (until they end)',
    help: 'close open connections to a removed endpoint this long after it left',
  }),

  // --- conntrack sysctls
  f({
    name: 'conntrack-max-per-core',
    kind: 'int32',
    arg: 'N',
    group: 'Conntrack',
    fields: ['conntrack.maxPerCore'],
    help: 'nf_conntrack_max per CPU core; 0 leaves the limit (and ignores --conntrack-min)',
  }),
  f({ name: 'conntrack-min', kind: 'int32', arg: 'N', group: 'Conntrack', fields: ['conntrack.min'], help: 'lower bound for nf_conntrack_max' }),
  f({
    name: 'conntrack-tcp-timeout-established',
    kind: 'duration',
    arg: 'DURATION',
    group: 'Conntrack',
    fields: ['conntrack.tcpEstablishedTimeout'],
    help: 'idle timeout of established TCP entries; 0 leaves it',
  }),
  f({
    name: 'conntrack-tcp-timeout-close-wait',
    kind: 'duration',
    arg: 'DURATION',
    group: 'Conntrack',
    fields: ['conntrack.tcpCloseWaitTimeout'],
    help: 'timeout of TCP entries in CLOSE_WAIT; 0 leaves it',
  }),
  f({ name: 'conntrack-tcp-be-liberal', kind: 'bool', group: 'Conntrack', fields: ['conntrack.tcpBeLiberal'], help: 'set nf_conntrack_tcp_be_liberal=1 (out-of-window packets are not INVALID)' }),
  f({ name: 'conntrack-udp-timeout', kind: 'duration', arg: 'DURATION', group: 'Conntrack', fields: ['conntrack.udpTimeout'], help: 'idle timeout of UNREPLIED UDP entries; 0 leaves it' }),
  f({ name: 'conntrack-udp-timeout-stream', kind: 'duration', arg: 'DURATION', group: 'Conntrack', fields: ['conntrack.udpStreamTimeout'], help: 'idle timeout of ASSURED UDP entries; 0 leaves it' }),

  // --- node-facing servers and the dashboard
  f({ name: 'healthz-bind-address', kind: 'string', arg: 'HOST:PORT', group: 'Servers', fields: ['healthzBindAddress'], help: '/healthz and /livez; empty disables' }),
  f({ name: 'metrics-bind-address', kind: 'string', arg: 'HOST:PORT', group: 'Servers', fields: ['metricsBindAddress'], help: '/metrics, /configz, /proxyMode and the dashboard; empty disables' }),
  f({ name: 'bind-address-hard-fail', kind: 'bool', group: 'Servers', fields: ['bindAddressHardFail'], help: 'exit when a server port cannot be bound' }),
  f({
    name: 'dashboard-token-file',
    kind: 'string',
    arg: 'FILE',
    group: 'Servers',
    run: 'dashboardTokenFile',
    help: "bearer token (32 characters or more) required by the dashboard's API and actions",
  }),
  f({
    name: 'dashboard-bind-address',
    kind: 'string',
    arg: 'HOST:PORT',
    group: 'Servers',
    run: 'dashboardBindAddress',
    defaultText: 'on --metrics-bind-address',
    help: "serve the dashboard on a listener of its own (then the metrics listener serves only kube-proxy's routes)",
  }),
  f({
    name: 'dashboard-tls-cert-file',
    kind: 'string',
    arg: 'FILE',
    group: 'Servers',
    run: 'dashboardTlsCertFile',
    help: "PEM certificate (chain) the dashboard's listener serves HTTPS with; followed as it changes",
  }),
  f({ name: 'dashboard-tls-private-key-file', kind: 'string', arg: 'FILE', group: 'Servers', run: 'dashboardTlsKeyFile', help: 'PEM private key of --dashboard-tls-cert-file' }),
  f({
    name: 'dashboard-token-audience',
    kind: 'string',
    arg: 'AUDIENCE',
    group: 'Servers',
    run: 'dashboardTokenAudience',
    defaultText: 'kproxy-dashboard',
    help: 'audience a Kubernetes token must be issued for to open the dashboard (kubectl create token --audience)',
  }),

  // --- the process
  f({ name: 'oom-score-adj', kind: 'int32', arg: 'N', group: 'Process and logging', fields: ['oomScoreAdj'], help: "the process's oom_score_adj; -1000..1000" }),
  f({ name: 'v', short: 'v', kind: 'uint32', arg: 'N', group: 'Process and logging', fields: ['logging.verbosity'], help: 'log verbosity; 4 and up logs debug lines' }),
  f({ name: 'logging-format', kind: 'enum', values: LOG_FORMATS, arg: 'text|json', group: 'Process and logging', fields: ['logging.format'], help: 'log line format' }),

  // --- what to do
  f({
    name: 'once',
    kind: 'bool',
    group: 'Run modes',
    run: 'once',
    help: "do one full sync, print a one-line summary and exit; rules stay in place. Exit 0 on success, also when objects were skipped: the rest is programmed, the summary counts the invalid objects (a bad IP, a port out of range; each listed after it with why) and the manifest documents left out (a kind kproxy reads in another apiVersion; named in the warnings); exit 1 when the sync failed, or when a source could not be read completely or within --once-timeout (the file and the error, or what never answered, are printed; nothing is touched), or when the Kubernetes API has no Node by this node's name (nothing is touched)",
  }),
  f({
    name: 'once-timeout',
    kind: 'duration',
    arg: 'DURATION',
    group: 'Run modes',
    run: 'onceTimeoutMs',
    defaultText: '2m0s',
    help: "how long --once waits for its source's first complete read (the Kubernetes API's first lists); past it kproxy exits 1 naming what never answered, touching nothing; 0 waits as long as it takes",
  }),
  f({ name: 'cleanup', kind: 'bool', group: 'Run modes', run: 'cleanup', help: 'remove every rule, chain, set and table kproxy or kube-proxy created (all modes), then exit' }),
  f({
    name: 'dry-run',
    kind: 'bool',
    group: 'Run modes',
    run: 'dryRun',
    help: 'program a simulated kernel in memory and change nothing on the host: no rule, no sysctl, and health check node ports are simulated (shown on the dashboard), never bound',
  }),
  f({ name: 'version', kind: 'bool', group: 'Run modes', run: 'version', help: "print kproxy's and Node's versions and exit" }),
  f({ name: 'help', short: 'h', kind: 'bool', group: 'Run modes', run: 'help', help: 'print this help and exit' }),
];

/** KUBE_PROXY_FLAGS_NOT_IMPLEMENTED are kube-proxy flags kproxy rejects, named so the error says why. */
export const KUBE_PROXY_FLAGS_NOT_IMPLEMENTED: readonly string[] = [
  'master',
  'write-config-to',
  'init-only',
  'profiling',
  'show-hidden-metrics-for-version',
  'healthz-port',
  'metrics-port',
  'log-flush-frequency',
  'vmodule',
  'log-text-split-stream',
  'log-json-split-stream',
  'log-text-info-buffer-size',
  'log-json-info-buffer-size',
  'windows-service',
  'network-name',
  'source-vip',
  'enable-dsr',
  'root-hns-endpoint-name',
  'forward-healthcheck-vip',
];

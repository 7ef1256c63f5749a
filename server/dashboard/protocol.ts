/**
 * The dashboard's wire format: what /api/v1/… answers and what /ws streams.
 * Types and three constants; its one import is a type (the proxy modes, named
 * once in config/proxy-mode.ts, which imports nothing), so the web app imports
 * this file as it is and both sides stay in step. Times are epoch
 * milliseconds, durations ms. A change here is a protocol change: README and
 * tests change with it.
 */
import type { ProxyMode } from '../config/proxy-mode.ts';

/** AuthMode says how the dashboard checks callers (see auth.ts). */
export type AuthMode = 'token' | 'delegated' | 'token+delegated' | 'off';

/** Viewer is who the server thinks is calling, and what they may do. */
export interface Viewer {
  readonly authMode: AuthMode;
  /** user: "token" for the static token, the Kubernetes username for delegated auth, "anonymous" with auth off. */
  readonly user: string;
  readonly canAct: boolean;
}

export interface SourceInfo {
  readonly kind: 'kubernetes' | 'file';
  readonly description: string;
  readonly synced: boolean;
  /** waitingFor: while not synced, what the source waits for and the errors that hold it (file, line, error). */
  readonly waitingFor?: string;
  readonly objects: number;
  readonly lastError?: string;
  readonly lastErrorAt?: number;
}

/** Counts are the overview's numbers. */
export interface Counts {
  readonly services: number;
  readonly servicePorts: number;
  readonly endpoints: number;
  readonly localEndpoints: number;
  /** rulesByTable: rules kproxy owns per table after the last successful sync. */
  readonly rulesByTable: Readonly<Record<string, number>>;
  readonly noEndpoints: number;
  readonly noLocalEndpoints: number;
  /** invalid: objects refused (they keep their last valid version, if any). */
  readonly invalid: number;
}

export interface ConntrackInfo {
  /** count/max: nf_conntrack_count and nf_conntrack_max; null when not readable (module not loaded). */
  readonly count: number | null;
  readonly max: number | null;
  readonly readAt: number;
  readonly error?: string;
}

/** ConntrackFrontend is one way into a service port whose tracked flows were counted on request. */
export interface ConntrackFrontend {
  readonly kind: 'clusterIP' | 'externalIP' | 'loadBalancerIP';
  /** portName: the service port's name ("" for an unnamed port). */
  readonly portName: string;
  readonly vip: string;
  readonly port: number;
  readonly protocol: string;
  /** count: flows whose original destination is vip:port over protocol; null when the listing failed. */
  readonly count: number | null;
  /** at: when the listing the count comes from ran (epoch ms); null when it failed. */
  readonly at: number | null;
  /** cached: the count comes from a listing of the last few seconds (one listing per frontend per 5 s). */
  readonly cached: boolean;
  readonly error?: { readonly code: string; readonly message: string };
}

/** ServiceConntrack answers GET /api/v1/services/:ns/:name/conntrack. */
export interface ServiceConntrack {
  readonly service: string;
  /** simulated: --dry-run, the table is kproxy's in-memory one (empty: every count is 0). */
  readonly simulated: boolean;
  readonly frontends: readonly ConntrackFrontend[];
  /** notCounted: frontends left out because one request counts at most MAX_CONNTRACK_FRONTENDS. */
  readonly notCounted: number;
}

/** KernelStatus says how fresh the dashboard's copy of the kernel is. */
export interface KernelStatus {
  readonly kind: KernelKind;
  /** simulated: --dry-run, the kernel is in memory and its counters never move. */
  readonly simulated: boolean;
  readonly readAt: number | null;
  readonly readMs: number | null;
  readonly rules: number;
  readonly chains: number;
  /** error: the last read failed (what is shown is older). */
  readonly error?: string;
  /** driftCount: findings seen in two consecutive reads (see drift.ts). */
  readonly driftCount: number;
}

/** KernelKind is the proxy mode whose kernel objects a view shows (config/proxy-mode.ts's PROXY_MODES). */
export type KernelKind = ProxyMode;

export interface StreamStats {
  readonly clients: number;
  /** slowClientsDropped: connections closed because they could not keep up. */
  readonly slowClientsDropped: number;
  /** lastSnapshotBytes/Ms: size of the last snapshot sent, and the time to build and queue it. */
  readonly lastSnapshotBytes: number;
  readonly lastSnapshotMs: number;
  /** refusedSignIns: credentials refused (wrong, revoked, not allowed, throttled; kproxy_dashboard_auth_failures_total). */
  readonly refusedSignIns: number;
  /** refusedRequests: messages, heavy reads and connections turned away by the dashboard's budgets (kproxy_dashboard_refused_total). */
  readonly refusedRequests: number;
}

export interface Health {
  readonly healthy: boolean;
  readonly lastUpdated: number | null;
  readonly nodeEligible: boolean;
  /** ready: what /readyz answers (has synced, then as /healthz); readyReason says why not, in the detail /readyz keeps off the open health port. */
  readonly ready: boolean;
  readonly readyReason: string | null;
}

/** Overview is the Overview page; it is resent whole with every sync (about 1 KB). */
export interface Overview {
  readonly node: string;
  readonly mode: KernelKind;
  readonly backend: string;
  readonly version: string;
  readonly startedAt: number;
  readonly now: number;
  readonly source: SourceInfo;
  readonly health: Health | null;
  readonly paused: boolean;
  readonly counts: Counts;
  readonly conntrack: ConntrackInfo | null;
  readonly kernel: KernelStatus;
  readonly stream: StreamStats;
  /** syncPeriodMs: the mode's sync period (the age of the last sync is judged against it). */
  readonly syncPeriodMs: number;
  /** relay: the userspace mode's open connections and limits (absent in the kernel modes). */
  readonly relay?: RelayTotals;
  /** nodeIPs: the Node's addresses (InternalIP first, per family), for the Trace page's node port destinations. */
  readonly nodeIPs: readonly string[];
  /** memory: the daemon's own memory now (the Overview shows it beside the cluster's size). */
  readonly memory: ProcessMemory;
}

/**
 * ProcessMemory is the daemon's memory as its /metrics reports it
 * (process_resident_memory_bytes, nodejs_heap_size_used_bytes,
 * nodejs_heap_size_total_bytes): resident memory is what a DaemonSet's memory
 * limit is judged on, the heap what kproxy's objects take of it.
 */
export interface ProcessMemory {
  readonly rssBytes: number;
  readonly heapUsedBytes: number;
  readonly heapTotalBytes: number;
}

/** RelayTotals are the userspace relay's node-wide figures and limits (0: no limit). */
export interface RelayTotals {
  readonly tcpConnections: number;
  readonly udpSessions: number;
  readonly proxySockets: number;
  readonly maxConnections: number;
  readonly maxConnectionsPerService: number;
  readonly maxUDPSessions: number;
  /** refused: connections and UDP clients not relayed since start, by reason. */
  readonly refused: Readonly<Record<string, number>>;
}

/** RelayRate is a per-second rate between two samples of the relay's counters; null after the first. */
export interface RelayRate {
  readonly conns: number;
  /** bytes: both directions. */
  readonly bytes: number;
}

/** RelayEndpointFacts are one endpoint's live figures behind a userspace proxy socket. */
export interface RelayEndpointFacts {
  /** key: "ip:port". */
  readonly key: string;
  /** serving: in a rotation now (false: it left; its open connections drain). */
  readonly serving: boolean;
  readonly active: number;
  readonly total: number;
  readonly bytesToEndpoint: number;
  readonly bytesToClient: number;
  readonly connectFailures: number;
  /** share: its part of the service port's relayed connections so far (0..1): the balancing distribution. */
  readonly share: number;
  readonly rate: RelayRate | null;
}

/** RelaySocketFacts is one proxy socket of a service port (a second one serves Local-policy traffic). */
export interface RelaySocketFacts {
  readonly pool: 'cluster' | 'local';
  readonly port: number;
  /** rotation: its endpoints in the order new connections get them. */
  readonly rotation: readonly string[];
  /** affinityClients: clients pinned by ClientIP affinity now. */
  readonly affinityClients: number;
}

/** RelayPortFacts are a service port's proxy sockets and live figures (userspace mode). */
export interface RelayPortFacts {
  readonly sockets: readonly RelaySocketFacts[];
  readonly active: number;
  readonly total: number;
  readonly bytesToEndpoint: number;
  readonly bytesToClient: number;
  readonly retries: number;
  readonly refused: Readonly<Record<string, number>>;
  readonly rate: RelayRate | null;
  readonly endpoints: readonly RelayEndpointFacts[];
  /** claims: node ports and local external IPs' ports held open for it ("10.0.0.10:30080/TCP"). */
  readonly claims: readonly string[];
  /** problems: ports that could not be claimed (their portals are left out). */
  readonly problems: readonly string[];
}

/** ConnectionRow is one open connection (or UDP session) the relay carries. */
export interface ConnectionRow {
  readonly id: number;
  readonly protocol: 'TCP' | 'UDP';
  readonly service: string;
  readonly servicePort: string;
  readonly pool: 'cluster' | 'local';
  readonly client: string;
  readonly endpoint: string;
  readonly startedAt: number;
  readonly bytesToEndpoint: number;
  readonly bytesToClient: number;
  readonly halfClosed: boolean;
  /** drainingSince: its endpoint left the rotation at this time; null while it serves. */
  readonly drainingSince: number | null;
}

/** ConnectionsPage answers GET /api/v1/connections: the open connections matching a search, one page of them. */
export interface ConnectionsPage {
  readonly at: number;
  /** open: every open connection; total: those matching the search. */
  readonly open: number;
  readonly total: number;
  readonly offset: number;
  readonly rows: readonly ConnectionRow[];
}

/** SyncEntry is one row of the sync history. */
export interface SyncEntry {
  readonly seq: number;
  /** family: the IP family whose proxier synced (a dual-stack node has one sync loop per family). */
  readonly family: 'IPv4' | 'IPv6';
  readonly trigger: string;
  readonly startedAt: number;
  readonly finishedAt: number;
  readonly full: boolean;
  readonly ok: boolean;
  readonly durationMs: number;
  readonly buildMs: number;
  readonly applyMs: number;
  readonly linesWritten: number;
  readonly bytesWritten: number;
  readonly servicesChanged: number;
  /** changed: the first changed services' "ns/name" (up to 10). */
  readonly changed: readonly string[];
  readonly servicePorts: number;
  readonly endpoints: number;
  /** programmingMs: max network programming latency of this sync's endpoint changes, null if none. */
  readonly programmingMs: number | null;
  readonly error?: { readonly code: string; readonly message: string };
  /** input: this sync's restore input can still be downloaded ("last" or "failed"). */
  readonly input?: 'last' | 'failed';
  /** verify: after a full sync, whether the kernel held what it wrote (absent for partial syncs). */
  readonly verify?: SyncVerifyEntry;
}

/** SyncVerifyEntry: a full sync's check that the kernel holds what it wrote (server/proxy/sync-verify.ts). */
export interface SyncVerifyEntry {
  readonly ms: number;
  /** objects: kernel objects checked (chains, sets, virtual servers...). */
  readonly objects: number;
  /** mismatchCount: objects that differ; mismatches names the first of them. */
  readonly mismatchCount: number;
  readonly mismatches: readonly VerifyMismatchEntry[];
  /** skipped: why the kernel could not be read (the sync stands). */
  readonly skipped?: string;
}

/** VerifyMismatchEntry: one object that did not hold what the sync wrote; got null: missing from the kernel. */
export interface VerifyMismatchEntry {
  readonly object: string;
  readonly servicePort?: string;
  readonly what: string;
  readonly want: number;
  readonly got: number | null;
}

export interface EventEntry {
  readonly seq: number;
  readonly time: number;
  readonly type: 'Normal' | 'Warning';
  readonly reason: string;
  readonly action: string;
  readonly object: string;
  readonly note: string;
}

export type ServiceWarning = 'no-endpoints' | 'no-local-endpoints' | 'invalid' | 'not-programmed';

export interface EndpointCounts {
  readonly total: number;
  readonly ready: number;
  readonly serving: number;
  readonly terminating: number;
  readonly local: number;
}

/** ServiceSummary is one row of the Services list (kept small: 10,000 of them travel in a snapshot). */
export interface ServiceSummary {
  /** key: "ns/name". */
  readonly key: string;
  readonly namespace: string;
  readonly name: string;
  readonly type: string;
  /** clusterIP: the primary family's cluster IP (the first of clusterIPs). */
  readonly clusterIP: string;
  /** clusterIPs: one per family this node proxies the Service in (a dual-stack Service has two). */
  readonly clusterIPs: readonly string[];
  /** families: the IP families of clusterIPs, in the same order. */
  readonly families: readonly ('IPv4' | 'IPv6')[];
  /** ports: "80/TCP", "443/TCP:30443" (with the node port), once each whatever the families. */
  readonly ports: readonly string[];
  /** ips: external and load balancer IPs. */
  readonly ips: readonly string[];
  /** endpoints: distinct endpoint addresses over all ports. */
  readonly endpoints: EndpointCounts;
  readonly warnings: readonly ServiceWarning[];
}

/** EndpointRow is one endpoint of one service port on the Service page. */
export interface EndpointRow {
  readonly key: string;
  readonly ip: string;
  readonly port: number;
  readonly ready: boolean;
  readonly serving: boolean;
  readonly terminating: boolean;
  readonly local: boolean;
  readonly node: string;
  readonly zone: string;
  /** clusterShare/localShare: share of new connections it gets for Cluster/Local policy traffic (0..1), null if not used. */
  readonly clusterShare: number | null;
  readonly localShare: number | null;
  /** object: the kernel object for this endpoint (KUBE-SEP-… chain, real server...). */
  readonly object: string | null;
}

export type EntryKind = 'clusterIP' | 'nodePort' | 'externalIP' | 'loadBalancerIP';

/** FlowEntry is one way into a service port: where a packet arrives and what it meets. */
export interface FlowEntry {
  readonly kind: EntryKind;
  /** address: "10.96.0.10:80/TCP", "node:30080/TCP". */
  readonly address: string;
  /** path: kernel objects in the order a new connection meets them (entry chain first). */
  readonly path: readonly string[];
  readonly policy: 'Cluster' | 'Local';
  /** outcome: to endpoints, or refused (REJECT: no endpoints; DROP: no local endpoints / source range). */
  readonly outcome: 'endpoints' | 'reject' | 'drop';
  readonly note?: string;
}

/** IpvsRates are per-second rates between the last two kernel reads; null after the first read or a counter reset. */
export interface IpvsRates {
  readonly conns: number;
  /** packets/bytes: both directions (client to server and back). */
  readonly packets: number;
  readonly bytes: number;
}

/** IpvsTraffic are the counters of `ipvsadm -Ln --stats --exact` (since the object was created). */
export interface IpvsTraffic {
  readonly conns: number;
  readonly inPackets: number;
  readonly outPackets: number;
  readonly inBytes: number;
  readonly outBytes: number;
  readonly rate: IpvsRates | null;
}

/** VirtualServerFacts describe an IPVS virtual server (a chain of table "ipvs"). */
export interface VirtualServerFacts extends IpvsTraffic {
  readonly protocol: string;
  readonly address: string;
  readonly port: number;
  readonly scheduler: string;
  /** persistence: ClientIP affinity timeout in seconds; 0 = none. */
  readonly persistence: number;
  readonly flags: readonly string[];
  /** active/inactive: connections of all its real servers. */
  readonly active: number;
  readonly inactive: number;
}

/** RealServerFacts describe an IPVS real server (a rule of table "ipvs"). */
export interface RealServerFacts extends IpvsTraffic {
  readonly address: string;
  readonly port: number;
  /** forward: "Masq" (kube-proxy's only method), "Route", "Tunnel". */
  readonly forward: string;
  readonly weight: number;
  readonly active: number;
  readonly inactive: number;
  /** draining: kproxy set weight 0 when its endpoint went away; it leaves once its connections end. */
  readonly draining: boolean;
  /** drainingSince: when it got weight 0 (epoch ms). */
  readonly drainingSince?: number;
}

export interface RuleView {
  readonly text: string;
  readonly target: string | null;
  readonly packets: number;
  readonly bytes: number;
  /** ipvs: a real server's figures (table "ipvs" only). */
  readonly ipvs?: RealServerFacts;
}

/** ChainView is a kernel object a service owns (an iptables chain, an IPVS virtual server...). */
export interface ChainView {
  readonly table: string;
  readonly name: string;
  /**
   * role: what the chain does for the service: "service", "local", "external", "firewall", "endpoint", "entry"
   * (iptables); "cluster-ip", "node-port", "external-ip", "load-balancer-ip" (IPVS virtual servers).
   */
  readonly role: string;
  /** from: "kernel" (last read, live counters) or "intended" (what kproxy wrote; not read yet). */
  readonly from: 'kernel' | 'intended';
  readonly packets: number;
  readonly bytes: number;
  readonly rules: readonly RuleView[];
  /** missing: kproxy wrote the chain but the kernel does not hold it. */
  readonly missing?: boolean;
  /** ipvs: a virtual server's figures (table "ipvs" only). */
  readonly ipvs?: VirtualServerFacts;
}

export interface PortDetail {
  readonly id: string;
  readonly portName: string;
  readonly protocol: string;
  readonly port: number;
  readonly nodePort: number;
  readonly clusterIP: string;
  readonly externalIPs: readonly string[];
  readonly loadBalancerIPs: readonly string[];
  readonly sourceRanges: readonly string[];
  readonly affinitySeconds: number;
  readonly externalPolicy: 'Cluster' | 'Local';
  readonly internalPolicy: 'Cluster' | 'Local';
  readonly healthCheckNodePort: number;
  readonly topologyMode: string;
  readonly endpoints: readonly EndpointRow[];
  readonly flows: readonly FlowEntry[];
  readonly chains: readonly ChainView[];
  /** skipped: why kproxy could not write this port's rules, if so. */
  readonly skipped?: string;
  /** relay: the userspace mode's proxy sockets and live figures for this port. */
  readonly relay?: RelayPortFacts;
}

/** HealthCheckInfo is a Service's health check node port (LoadBalancer with externalTrafficPolicy Local). */
export interface HealthCheckInfo {
  readonly port: number;
  /** open: listening (or, simulated, kept as if listening); false: not opened (a port error, retried after the next sync). */
  readonly open: boolean;
  /** simulated: --dry-run binds nothing on the host; status is what the listener would answer. */
  readonly simulated: boolean;
  readonly addresses: readonly string[];
  readonly localEndpoints: number;
  /** status: what a load balancer's probe gets (200 with local endpoints and a healthy proxy); null when not open. */
  readonly status: 200 | 503 | null;
}

export interface ServiceDetail {
  readonly summary: ServiceSummary;
  readonly ports: readonly PortDetail[];
  readonly invalid?: string;
  readonly kernelReadAt: number | null;
  /** healthCheck: the Service's health check node port, if it has one. */
  readonly healthCheck?: HealthCheckInfo;
}

/** DriftKind: "settings" is a chain whose own settings differ (an IPVS virtual server's scheduler or persistence, a set's type). */
export type DriftKind = 'missing-chain' | 'unexpected-chain' | 'missing-rule' | 'unexpected-rule' | 'order' | 'missing-jump' | 'settings';

/** DriftFinding is a difference between what kproxy wrote and what the kernel holds. */
export interface DriftFinding {
  readonly table: string;
  readonly chain: string;
  readonly kind: DriftKind;
  readonly detail: string;
  /** since: the first kernel read that showed it. */
  readonly since: number;
}

export interface DriftReport {
  readonly checkedAt: number | null;
  readonly total: number;
  /** findings: the first ones (the full list: /api/v1/drift). */
  readonly findings: readonly DriftFinding[];
}

/** TraceVerdict is what happens to a traced packet: DNAT to endpoints, refused, dropped, accepted as it is, or not a Service packet. */
export type TraceVerdict = 'dnat' | 'reject' | 'drop' | 'accept' | 'none';

/** TraceFrom is where a traced packet enters: a pod on this node, another node or outside (both PREROUTING), the node itself (OUTPUT). */
export type TraceFrom = 'pod' | 'external' | 'node';

/** TraceQuery is the packet asked about, as the tracer read it (addresses canonical). */
export interface TraceQuery {
  readonly proto: 'tcp' | 'udp' | 'sctp';
  readonly src: string;
  /** srcPort: null when not given (no rule kproxy writes looks at it). */
  readonly srcPort: number | null;
  readonly dst: string;
  readonly dstPort: number;
  readonly from: TraceFrom;
}

/** TraceStep is one rule (or chain end) a traced packet meets, in order. */
export interface TraceStep {
  /** table and chain as the Rules page names them ("nat" / "ip6-nat", "kube-proxy", "ipvs"). */
  readonly table: string;
  readonly chain: string;
  /** hook: the netfilter hook this happens in ("prerouting", "input", "forward", "output", "postrouting"; "ipvs" for the virtual server). */
  readonly hook: string;
  /** rule: the rule text as the kernel lists it; null for a chain's end (policy or return). */
  readonly rule: string | null;
  /** index: the rule's position in its chain (0-based); null for a chain's end. */
  readonly index: number | null;
  readonly packets: number;
  readonly bytes: number;
  /** verdict: what the step does ("jump KUBE-SVC-…", "DNAT to 10.244.0.11:8080", "MARK", "policy ACCEPT", "return"). */
  readonly verdict: string;
  /** note: why, where the rule alone does not say (a probability, an affinity entry, an assumption). */
  readonly note?: string;
  /** drift: this chain differs from what kproxy wrote (the first finding's kind). */
  readonly drift?: DriftKind;
}

/** TraceEndpoint is one place the packet may go, with its chance and the rest of its way. */
export interface TraceEndpoint {
  /** address: "10.244.0.11:8080" ("[fd00::11]:8080"). */
  readonly address: string;
  /** probability: of a new connection from this client landing here (0..1). */
  readonly probability: number;
  readonly masquerade: boolean;
  /** path: the steps after the shared path (the choice of this endpoint, its DNAT, filter and postrouting). */
  readonly path: readonly TraceStep[];
  /** sticky: affinity: a client the kernel remembers goes here whatever the probability says. */
  readonly sticky?: string;
}

/** TraceDrift is a difference between what kproxy wrote and what the kernel holds, on the traced path. */
export interface TraceDrift {
  readonly table: string;
  readonly chain: string;
  readonly kind: DriftKind;
  readonly detail: string;
}

/** TraceResult answers "where does this packet go, and why" from the rules the kernel holds (GET /api/v1/trace, kproxy trace --json). */
export interface TraceResult {
  readonly query: TraceQuery;
  readonly mode: KernelKind;
  readonly family: 'IPv4' | 'IPv6';
  readonly verdict: TraceVerdict;
  /** reason: one sentence in Service terms. */
  readonly reason: string;
  /** service: the service port the packet was for ("ns/name:port"), when the rules say. */
  readonly service: string | null;
  /** endpoints: where a dnat verdict sends it, most likely first. */
  readonly endpoints: readonly TraceEndpoint[];
  /** masquerade: the packet leaves with the node's address as source (for every endpoint). */
  readonly masquerade: boolean;
  /** path: the steps every outcome shares, in order. */
  readonly path: readonly TraceStep[];
  /** drift: findings on the chains traced; null when not checked (the CLI on a live node has no record of what kproxy wrote). */
  readonly drift: readonly TraceDrift[] | null;
  /** notes: what the tracer assumed (rules it cannot evaluate, other outcomes and their chances). */
  readonly notes: readonly string[];
  /** readAt: when the kernel was read. */
  readonly readAt: number | null;
  /** simulated: the rules are --dry-run's simulated kernel. */
  readonly simulated: boolean;
}

export interface TableInfo {
  readonly name: string;
  readonly chains: number;
  readonly rules: number;
}

/** Row is one line of the Rules page: a chain header or a rule. */
export type Row =
  | {
      readonly t: 'c';
      readonly chain: string;
      readonly policy: string | null;
      readonly packets: number;
      readonly bytes: number;
      readonly rules: number;
      readonly drift?: DriftKind;
      readonly ipvs?: VirtualServerFacts;
    }
  | {
      readonly t: 'r';
      readonly chain: string;
      readonly i: number;
      readonly spec: string;
      readonly target: string | null;
      readonly packets: number;
      readonly bytes: number;
      readonly drift?: DriftKind;
      readonly ipvs?: RealServerFacts;
    };

export interface RowsPage {
  readonly table: string;
  readonly readAt: number | null;
  readonly total: number;
  readonly offset: number;
  readonly rows: readonly Row[];
}

export interface ActionResult {
  readonly action: 'resync' | 'cleanup' | 'pause' | 'resume';
  readonly ok: boolean;
  readonly at: number;
  readonly user: string;
  readonly message: string;
  readonly paused: boolean;
}

/** WatchedCounters are the live counters of the service a client watches. */
export interface WatchedCounters {
  readonly service: string;
  /** chains: per port id, the chains shown on the page with their counters and each rule's [packets, bytes]. */
  readonly chains: readonly {
    readonly port: string;
    readonly table: string;
    readonly name: string;
    readonly packets: number;
    readonly bytes: number;
    readonly rules: readonly (readonly [number, number])[];
    /** ipvs/reals: a virtual server's figures and its real servers' (in rule order), for table "ipvs". */
    readonly ipvs?: VirtualServerFacts;
    readonly reals?: readonly (RealServerFacts | null)[];
  }[];
  /** relay: per port id, the userspace relay's live figures (userspace mode). */
  readonly relay?: readonly { readonly port: string; readonly facts: RelayPortFacts }[];
}

/** Server → client messages. Every one carries seq: 1, 2, 3… per connection, without holes unless one was skipped. */
export type ServerMessage =
  | {
      readonly type: 'snapshot';
      readonly seq: number;
      readonly viewer: Viewer;
      readonly overview: Overview;
      readonly services: readonly ServiceSummary[];
      readonly syncs: readonly SyncEntry[];
      readonly events: readonly EventEntry[];
      readonly drift: DriftReport;
      readonly lastAction: ActionResult | null;
    }
  | {
      readonly type: 'sync';
      readonly seq: number;
      readonly sync: SyncEntry;
      readonly overview: Overview;
      /** services: summaries of the services this sync changed; removed: keys of services gone. */
      readonly services: readonly ServiceSummary[];
      readonly removed: readonly string[];
    }
  | {
      readonly type: 'counters';
      readonly seq: number;
      readonly overview: Overview;
      readonly drift: DriftReport;
      readonly watched?: WatchedCounters;
    }
  | { readonly type: 'event'; readonly seq: number; readonly event: EventEntry }
  | { readonly type: 'action'; readonly seq: number; readonly result: ActionResult }
  | { readonly type: 'service'; readonly seq: number; readonly key: string; readonly detail: ServiceDetail | null };

/** Client → server messages. */
export type ClientMessage =
  /** snapshot: the client saw a gap in seq (or just wants everything again). */
  | { readonly type: 'snapshot' }
  /** watch: send this service's detail now and after each sync that changes it, and its live counters. */
  | { readonly type: 'watch'; readonly service: string | null };

/** WS_SUBPROTOCOL is the dashboard protocol's WebSocket subprotocol name. */
export const WS_SUBPROTOCOL = 'kproxy.dashboard.v1';
/**
 * WS_TOKEN_PREFIX carries the bearer token in a second subprotocol, as the
 * Kubernetes API server accepts it ("base64url.bearer.authorization.k8s.io.<token>"):
 * browsers cannot set an Authorization header on a WebSocket, and a query
 * parameter would end up in logs and browser history.
 */
export const WS_TOKEN_PREFIX = 'base64url.bearer.authorization.k8s.io.';
/**
 * CLOSE_UNAUTHORIZED closes a stream whose credential no longer grants
 * viewing (re-checked as review answers expire: a revoked token, a removed
 * RoleBinding); the browser then asks who it is again instead of reconnecting.
 */
export const CLOSE_UNAUTHORIZED = 4401;

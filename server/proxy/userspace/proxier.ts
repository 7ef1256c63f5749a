import type { Clock } from '../../clock.ts';
import type { ProxyConfig } from '../../config/types.ts';
import { errorMessage, ProxyPortBindError, RestoreFailedError, SyncFailedError } from '../../errors.ts';
import type { EventRecorder } from '../../events/event-recorder.ts';
import type { IptablesRunner } from '../../kernel/iptables.ts';
import { parseIptablesSave, type IptablesDump } from '../../kernel/iptables-save-parser.ts';
import type { NetInterfaces } from '../../kernel/netif.ts';
import type { Sockets } from '../../kernel/sockets.ts';
import type { Logger } from '../../log.ts';
import { isLoopbackIP, type IPFamily } from '../../net/ip.ts';
import type { Backend, BackendSyncInput, BackendSyncResult, CleanupResult } from '../backend.ts';
import { skippedVerification, type SyncVerification } from '../sync-verify.ts';
import type { Endpoint } from '../endpoint.ts';
import { startCanaryMonitor } from '../xtables/canary-monitor.ts';
import { describeRestoreFailure } from '../xtables/restore-failure.ts';
import { verifyChains, writtenChains } from '../xtables/verify.ts';
import { localDetectorFor } from '../local-detector.ts';
import { NodePortAddresses } from '../node-port-addresses.ts';
import type { StateCheckout } from '../proxy-state.ts';
import { usesClusterEndpoints, usesLocalEndpoints, type ServicePort } from '../service-port.ts';
import { SkippedServicePorts } from '../skipped-service-ports.ts';
import { SyncEnvelope, type FailedInput, type SyncRun, type SyncWritten } from '../sync-envelope.ts';
import { categorizeEndpoints } from '../topology.ts';
import type { Random } from './balancer.ts';
import { PortClaims } from './claims.ts';
import { FirstSyncHousekeeping } from '../first-sync-housekeeping.ts';
import { missingJumps, staleChains } from './cleanup.ts';
import { PortAllocator } from './port-allocator.ts';
import { buildPortals, PORTAL_JUMPS, portalsRestoreText, type PortalContext, type PortalEntry, type PortalRule, type Portals } from './portals.ts';
import { ProxySocket, type RelayContext, type RelayLimits } from './proxy-socket.ts';
import { REFUSED_REASONS, RelayStats, type Pool, type PortStats, type RefusedReason } from './relay-stats.ts';

export interface UserspaceBackendOptions {
  config: ProxyConfig;
  nodeName: string;
  family: IPFamily;
  iptables: IptablesRunner;
  sockets: Sockets;
  netif: NetInterfaces;
  clock: Clock;
  logger: Logger;
  /** events: Warning Events about ports that cannot be bound (on the Service). */
  events?: EventRecorder;
  /** cleanup removes the portal chains (the dashboard's cleanup action); see cleanup.ts. */
  cleanup: () => Promise<CleanupResult>;
  /**
   * afterFirstSync runs once, after the first successful sync (host.ts: the
   * nftables and IPVS modes' leftovers are removed then, when the portals serve).
   */
  afterFirstSync?: () => Promise<unknown>;
  random?: Random;
  canaryIntervalMs?: number;
  /** refusedLogIntervalMs: refused connections of one service port and reason are logged at most this often (default 10 s). */
  refusedLogIntervalMs?: number;
}

/** BindFailureKind says which socket could not be bound. */
export type BindFailureKind = 'proxy_port' | 'node_port' | 'external_ip';

/** UserspaceMetrics are the mode's counters outside the relay's own figures. */
export interface UserspaceMetrics {
  bindFailures: Record<BindFailureKind, number>;
  restoreFailures: number;
}

/** PortalPort is one service port's proxy sockets and rules, as the dashboard shows them. */
export interface PortalPort {
  readonly sp: ServicePort;
  readonly sockets: readonly { readonly pool: Pool; readonly port: number; readonly endpoints: readonly string[]; readonly affinityClients: number }[];
  readonly rules: readonly PortalRule[];
  readonly claims: readonly string[];
  /** problems: what could not be opened (claims), in words. */
  readonly problems: readonly string[];
}

/** UserspaceIntent is what the last successful sync programmed. */
export interface UserspaceIntent {
  readonly version: number;
  /** text: the portal chains as that sync wrote them (restore input, jumps included when they were written). */
  readonly text: string;
  port(id: string): PortalPort | null;
  /** ids: the programmed service ports, sorted. */
  ids(): readonly string[];
}

/** UserspaceBackend is the userspace Backend plus what the metrics and the dashboard read. */
export interface UserspaceBackend extends Backend {
  readonly stats: RelayStats;
  readonly metrics: UserspaceMetrics;
  readonly limits: RelayLimits;
  readonly runner: IptablesRunner;
  readonly sockets: Sockets;
  /** intended: what the last successful sync programmed (null before one). */
  intended(): UserspaceIntent | null;
  /** lastFailedInput: the portal chains' restore input of the last sync that failed. */
  lastFailedInput(): FailedInput | null;
  /** proxySockets: open proxy sockets now. */
  proxySockets(): number;
  /** claims: node ports and external IP ports held now. */
  claims(): number;
}

interface Entry {
  sp: ServicePort;
  readonly sockets: Partial<Record<Pool, ProxySocket>>;
  /** nodePort / skipIPs: the claims of the last sync (false / listed: their rules are left out). */
  nodePort: boolean;
  skipIPs: Set<string>;
  problems: string[];
}

const POOLS: readonly Pool[] = ['cluster', 'local'];

/** createUserspaceBackend returns the userspace (relay) mode as a kproxy Backend. */
export function createUserspaceBackend(opts: UserspaceBackendOptions): UserspaceBackend {
  return new UserspaceProxier(opts);
}

/**
 * UserspaceProxier is kube-proxy's userspace proxier: a proxy socket per
 * service port (two when a traffic policy is Local), the relay behind it, and
 * the portal rules that send service traffic there. A sync opens the sockets
 * new service ports need, hands every socket its endpoints, claims node ports,
 * writes the portal chains in one iptables-restore (only when they changed,
 * or on a full sync, which also checks the jumps into them and removes other
 * modes' chains), and only then closes the sockets and claims of what went
 * away: portals first, then sockets.
 */
class UserspaceProxier implements UserspaceBackend {
  readonly mode = 'userspace' as const;
  readonly family: IPFamily;
  readonly stats = new RelayStats();
  readonly metrics: UserspaceMetrics = { bindFailures: { proxy_port: 0, node_port: 0, external_ip: 0 }, restoreFailures: 0 };
  readonly limits: RelayLimits;
  readonly runner: IptablesRunner;
  readonly sockets: Sockets;
  readonly #o: UserspaceBackendOptions;
  readonly #log: Logger;
  readonly #ctx: RelayContext;
  readonly #ports: PortAllocator;
  readonly #claims: PortClaims;
  readonly #entries = new Map<string, Entry>();
  /** #retired: sockets the kernel's rules may still lead to; closed after the next successful restore. */
  #retired: ProxySocket[] = [];
  /** #skipped: service ports that could not be programmed, with why. */
  readonly #skipped: SkippedServicePorts;
  readonly #envelope: SyncEnvelope;
  /** #failedBinds: ports whose bind failure was already reported (reported again only after a success). */
  readonly #failedBinds = new Set<string>();
  readonly #refusedLog = new Map<string, { at: number; since: number }>();
  #lastText = '';
  #intent: UserspaceIntent | null = null;
  #version = 0;
  /** #toVerify: the last full sync's restore input (the portal chains, missing jumps, other modes' chains removed), until verify() reads it. */
  #toVerify: string | null = null;
  #stopped = false;
  readonly #housekeeping: FirstSyncHousekeeping;

  constructor(opts: UserspaceBackendOptions) {
    this.#o = opts;
    this.family = opts.family;
    this.#log = opts.logger.child('userspace');
    this.#housekeeping = new FirstSyncHousekeeping(opts.afterFirstSync, this.#log, opts.clock);
    this.#skipped = new SkippedServicePorts(this.#log);
    this.#envelope = new SyncEnvelope({
      name: 'userspace',
      clock: opts.clock,
      logger: this.#log,
      skipped: this.#skipped,
      describe: (err, run) => describeRestoreFailure(err, run.input, 'the userspace portal chains'),
      failed: (error) => {
        if (error.code === RestoreFailedError.code) this.metrics.restoreFailures++;
      },
    });
    this.runner = opts.iptables;
    this.sockets = opts.sockets;
    const u = opts.config.userspace;
    this.limits = {
      maxConnections: u.maxConnections,
      maxConnectionsPerService: u.maxConnectionsPerService,
      maxUDPSessions: u.maxUDPSessions,
      udpIdleTimeoutMs: u.udpIdleTimeoutMs,
      drainTimeoutMs: u.drainTimeoutMs,
    };
    this.#ports = new PortAllocator(u.portRange, opts.random);
    this.#claims = new PortClaims(opts.sockets, this.#log);
    this.#ctx = {
      sockets: opts.sockets,
      clock: opts.clock,
      log: this.#log,
      stats: this.stats,
      limits: this.limits,
      random: opts.random,
      refused: (port, reason, detail) => this.#refused(port, reason, detail),
    };
  }

  intended(): UserspaceIntent | null {
    return this.#intent;
  }

  lastFailedInput(): FailedInput | null {
    return this.#envelope.lastFailedInput();
  }

  requireFullSync(): void {
    this.#envelope.requireFullSync();
  }

  proxySockets(): number {
    let n = 0;
    for (const e of this.#entries.values()) for (const p of POOLS) if (e.sockets[p]) n++;
    return n;
  }

  claims(): number {
    return this.#claims.size;
  }

  watchTampering(onTampered: (reason: string) => void): () => void {
    return startCanaryMonitor({ runner: this.#o.iptables, clock: this.#o.clock, logger: this.#log, intervalMs: this.#o.canaryIntervalMs, onTampered });
  }

  /**
   * #refused counts a connection (or UDP client) that was not relayed and
   * logs it: the first of its service port and reason at once, then at most
   * one line per interval with how many followed.
   */
  #refused(port: PortStats, reason: RefusedReason, detail: Record<string, unknown>): void {
    port.refused[reason]++;
    const key = `${port.id}|${reason}`;
    const now = this.#o.clock.monotonic();
    const every = this.#o.refusedLogIntervalMs ?? 10_000;
    const last = this.#refusedLog.get(key);
    if (last && now - last.at < every) return;
    const count = port.refused[reason] - (last?.since ?? 0);
    this.#refusedLog.set(key, { at: now, since: port.refused[reason] });
    const what: Record<RefusedReason, string> = {
      no_endpoints: 'connection refused: the service port has no endpoint for it',
      connect_failed: 'connection refused: no endpoint could be connected',
      limit_total: 'connection refused: the limit of open connections (all services) is reached',
      limit_service: "connection refused: the service's limit of open connections is reached",
      limit_udp_sessions: 'UDP client dropped: the limit of UDP sessions is reached',
    };
    this.#log.warn(what[reason], { servicePort: port.id, reason, sinceLastLine: count, ...detail });
  }

  async cleanup(): Promise<CleanupResult> {
    // The sockets stay: the next sync writes the portals back to them.
    this.#envelope.requireFullSync();
    this.#toVerify = null;
    this.#lastText = '';
    this.#intent = { version: ++this.#version, text: '', port: () => null, ids: () => [] };
    return this.#o.cleanup();
  }

  /** stop closes every proxy socket and claim (the portals stay, as with every mode's rules). */
  async stop(): Promise<void> {
    this.#stopped = true;
    for (const e of this.#entries.values()) for (const p of POOLS) e.sockets[p]?.close();
    for (const s of this.#retired) s.close();
    this.#retired = [];
    this.#claims.closeAll();
  }

  /**
   * verify checks the last full sync's portal chains against the kernel
   * (xtables/verify.ts): each holds the rules the sync wrote, the chains of
   * other modes it removed are gone, and every jump of PORTAL_JUMPS leads
   * from its built-in chain.
   */
  async verify(): Promise<SyncVerification> {
    const clock = this.#o.clock;
    const t0 = clock.monotonic();
    const text = this.#toVerify;
    this.#toVerify = null;
    if (text === null) return skippedVerification(0, 'no full sync to verify since the last verification');
    return verifyChains(this.runner, clock, t0, { written: writtenChains(text), jumps: PORTAL_JUMPS });
  }

  /** afterSync: after a successful sync was recorded, the first one's removal of the other modes' leftovers. */
  async afterSync(): Promise<void> {
    await this.#housekeeping.afterSuccessfulSync();
  }

  sync(input: BackendSyncInput): Promise<BackendSyncResult> {
    // Whatever this sync does, the kernel no longer holds exactly what an earlier full sync wrote.
    this.#toVerify = null;
    return this.#envelope.run(input, (run) => this.#write(input.state, run));
  }

  async #write(state: StateCheckout, run: SyncRun): Promise<SyncWritten> {
    const full = run.decideFull();
    run.step = 'addresses';
    if (this.#stopped) throw new SyncFailedError('the userspace proxy is stopped');
    const hostAddresses = (await run.io(() => this.#o.netif.addresses())).filter((a) => a.family === this.#o.family).map((a) => a.address);
    const ctx = this.#portalContext(state, hostAddresses);
    run.step = 'sockets';
    const { order, wantedClaims } = await run.io(() => this.#reconcile(state, new Set(hostAddresses), ctx));
    const entries: PortalEntry[] = order.map((id) => {
      const e = this.#entries.get(id)!;
      return { sp: e.sp, ports: { cluster: e.sockets.cluster?.port ?? null, local: e.sockets.local?.port ?? null }, nodePort: e.nodePort, skipIPs: e.skipIPs };
    });
    run.step = 'build';
    const portals = buildPortals(ctx, entries);
    let jumps: ReturnType<typeof missingJumps> = [];
    let staleLines: string[] = [];
    if (full) {
      run.step = 'iptables-save';
      const dump: IptablesDump = parseIptablesSave(await run.io(() => this.#o.iptables.save()));
      jumps = missingJumps(dump);
      const stale = staleChains(dump);
      staleLines = stale.lines;
      if (jumps.length) this.#log.info('creating the jumps into the portal chains', { jumps: jumps.map((j) => `${j.table}/${j.from} -> ${j.to}`).join('; ') });
      if (stale.chains.length) this.#log.info("removing other modes' chains", { count: stale.chains.length, chains: stale.chains.join(', ') });
    }
    run.step = 'build';
    // text: what the portal chains hold (compared between syncs, the dashboard's intent); the input adds the missing jumps and other modes' removal.
    const { text } = portalsRestoreText(portals, order);
    const withJumps = portalsRestoreText(portals, order, jumps);
    const restoreInput = staleLines.length ? withJumps.text + staleLines.join('\n') + '\n' : withJumps.text;
    const write = full || text !== this.#lastText;
    if (write) {
      run.step = 'iptables-restore';
      run.sending(restoreInput);
      await run.io(() => this.#o.iptables.restore(restoreInput));
    }
    // The kernel's rules lead only to the current sockets now: close the rest.
    run.step = 'close';
    for (const s of this.#retired) s.close();
    this.#retired = [];
    for (const owner of this.#claims.owners()) this.#claims.releaseExcept(owner, wantedClaims.get(owner) ?? new Set());
    this.stats.prune(new Set(order));
    for (const e of this.#entries.values()) for (const p of POOLS) e.sockets[p]?.balancer.sweep();
    this.#lastText = text;
    if (full) this.#toVerify = restoreInput;
    this.#intend(text, portals);
    return {
      linesWritten: write ? withJumps.lines + staleLines.length : 0,
      servicesWritten: write ? (full ? new Set(order.map((id) => this.#entries.get(id)!.sp.service)).size : state.changedServices.size) : 0,
      rulesByTable: { ...portals.rulesByTable, 'proxy-sockets': this.proxySockets() },
    };
  }

  #portalContext(state: StateCheckout, hostAddresses: readonly string[]): PortalContext {
    const { config, family } = this.#o;
    const local = hostAddresses.filter((a) => !isLoopbackIP(a));
    // The Node's own address when this host has it (the primary IP), else the host's first.
    const hostIP = state.node.addresses.find((a) => local.includes(a)) ?? local[0];
    if (!hostIP) throw new SyncFailedError(`the host has no ${family} address to send the node's own service traffic to (DNAT target of ${'KUBE-PORTALS-HOST'})`);
    const npa = new NodePortAddresses(family, config.nodePortAddresses, state.node.addresses);
    return {
      family,
      listenIP: this.#listenIP(),
      hostIP,
      nodePortIPs: npa.matchAll ? null : npa.nodeIPs([...hostAddresses]),
      localDetector: localDetectorFor(config, state.node, family),
    };
  }

  /** #listenIP: bindAddress when it is of this family (kube-proxy's listenIP), else the family's wildcard. */
  #listenIP(): string {
    const b = this.#o.config.bindAddress;
    const v6 = b.includes(':');
    if ((this.#o.family === 'IPv6') === v6) return b;
    return this.#o.family === 'IPv6' ? '::' : '0.0.0.0';
  }

  /**
   * #reconcile makes the sockets and claims match the wanted service ports:
   * opens missing sockets, replaces those whose protocol changed, gives each
   * its endpoints, and retires what is no longer wanted (closed after the
   * restore). Returns the programmed service ports in order and the claims
   * each holds.
   */
  async #reconcile(state: StateCheckout, hostAddresses: ReadonlySet<string>, ctx: PortalContext): Promise<{ order: string[]; wantedClaims: Map<string, Set<string>> }> {
    const order: string[] = [];
    const wantedClaims = new Map<string, Set<string>>();
    const seen = new Set<string>();
    for (const id of [...state.services.keys()].sort()) {
      const sp = state.services.get(id)!;
      seen.add(id);
      if (sp.protocol === 'SCTP') {
        this.#skipped.skip(id, 'SCTP is not relayed by the userspace mode (TCP and UDP only)', 'service port not relayed');
        this.#retire(id);
        continue;
      }
      let e = this.#entries.get(id);
      if (e && e.sp.protocol !== sp.protocol) {
        this.#retire(id);
        e = undefined;
      }
      if (!e) {
        e = { sp, sockets: {}, nodePort: false, skipIPs: new Set(), problems: [] };
        this.#entries.set(id, e);
      }
      e.sp = sp;
      const cat = categorizeEndpoints(state.endpoints.get(id), sp, this.#o.nodeName, state.node.zone);
      const want: Record<Pool, boolean> = { cluster: usesClusterEndpoints(sp), local: usesLocalEndpoints(sp) };
      let bindError: string | null = null;
      for (const pool of POOLS) {
        const have = e.sockets[pool];
        if (!want[pool]) {
          if (have) {
            this.#retired.push(have);
            delete e.sockets[pool];
          }
          continue;
        }
        if (!have) {
          const opened = await this.#open(sp, pool, ctx.listenIP);
          if (typeof opened === 'string') {
            bindError = opened;
            break;
          }
          e.sockets[pool] = opened;
        }
      }
      if (bindError !== null) {
        this.#skipped.skip(id, bindError, 'service port not relayed');
        this.#retire(id);
        continue;
      }
      e.sockets.cluster?.update(sp, cat.cluster);
      e.sockets.local?.update(sp, cat.local);
      this.#markServing(sp, e);
      wantedClaims.set(id, await this.#claimFor(e, ctx, hostAddresses));
      if (this.#skipped.programmed(id)) this.#log.info('service port programmed again', { servicePort: id });
      order.push(id);
    }
    for (const id of [...this.#entries.keys()]) if (!seen.has(id)) this.#retire(id);
    this.#skipped.forgetGone(state.services);
    return { order, wantedClaims };
  }

  /** #retire takes a service port's sockets out (closed after the restore that removes their portals). */
  #retire(id: string): void {
    const e = this.#entries.get(id);
    if (!e) return;
    for (const p of POOLS) {
      const s = e.sockets[p];
      if (s) this.#retired.push(s);
    }
    this.#entries.delete(id);
    const port = this.stats.ports.get(id);
    if (port) for (const ep of port.endpoints.values()) ep.serving = false;
  }

  #markServing(sp: ServicePort, e: Entry): void {
    const port = this.stats.port(sp.id, sp.service, sp.protocol);
    const serving = new Set<string>();
    for (const p of POOLS) for (const k of e.sockets[p]?.serving() ?? []) serving.add(k);
    for (const k of serving) this.stats.endpoint(port, k).serving = true;
    for (const ep of port.endpoints.values()) if (!serving.has(ep.key)) ep.serving = false;
  }

  /** #open binds a proxy socket on a port of the range (or one the kernel picks), trying a few taken ones. */
  async #open(sp: ServicePort, pool: Pool, host: string): Promise<ProxySocket | string> {
    let last = '';
    for (let attempt = 0; attempt < 8; attempt++) {
      const port = this.#ports.allocate();
      if (port === null) {
        last = `the proxy port range ${this.#ports.range!.base}-${this.#ports.range!.base + this.#ports.range!.size - 1} is exhausted`;
        break;
      }
      try {
        const s = await ProxySocket.open(this.#ctx, sp, pool, host, port);
        this.#failedBinds.delete(`${sp.id}|${pool}`);
        this.#log.info('proxying service port', { servicePort: sp.id, pool, listen: `${host}:${s.port}`, protocol: sp.protocol });
        const release = this.#ports;
        const close = s.close.bind(s);
        s.close = () => {
          close();
          release.release(s.port);
        };
        return s;
      } catch (err) {
        last = errorMessage(err);
        // A port another program holds stays marked taken; without a range, retrying picks another anyway.
        if ((err as { code?: string }).code !== 'EADDRINUSE') break;
      }
    }
    const why = `cannot open its ${pool === 'local' ? 'Local-policy ' : ''}proxy socket on ${host}: ${last}`;
    this.#bindFailed(sp, 'proxy_port', `${sp.id}|${pool}`, why);
    return why;
  }

  #bindFailed(sp: ServicePort, kind: BindFailureKind, key: string, why: string): void {
    this.metrics.bindFailures[kind]++;
    if (this.#failedBinds.has(key)) return;
    this.#failedBinds.add(key);
    const err = new ProxyPortBindError(`service port ${sp.id}: ${why}`);
    this.#log.error(err.message, { code: err.code, kind });
    this.#o.events?.record({ kind: 'Service', namespace: sp.namespace, name: sp.serviceName }, 'Warning', 'FailedToBindProxyPort', 'Listen', `${err.message} (${err.code})`);
  }

  /** #claimFor holds the node port and the ports of external and LB IPs that are this node's addresses. */
  async #claimFor(e: Entry, ctx: PortalContext, hostAddresses: ReadonlySet<string>): Promise<Set<string>> {
    const sp = e.sp;
    const keep = new Set<string>();
    e.problems = [];
    e.skipIPs = new Set();
    e.nodePort = sp.nodePort !== 0;
    if (sp.nodePort !== 0) {
      for (const host of ctx.nodePortIPs ?? [ctx.listenIP]) {
        const r = await this.#claims.claim(host, sp.nodePort, sp.protocol, sp.id);
        const key = PortClaims.key(host, sp.nodePort, sp.protocol);
        if (r.ok) {
          keep.add(key);
          this.#failedBinds.delete(key);
          continue;
        }
        e.nodePort = false;
        e.problems.push(`node port ${sp.nodePort}: ${r.error}`);
        this.#bindFailed(sp, 'node_port', key, `node port ${sp.nodePort} not proxied: ${r.error}`);
      }
    }
    for (const ip of [...sp.externalIPs, ...sp.loadBalancerVIPs]) {
      if (!hostAddresses.has(ip)) continue;
      const r = await this.#claims.claim(ip, sp.port, sp.protocol, sp.id);
      const key = PortClaims.key(ip, sp.port, sp.protocol);
      if (r.ok) {
        keep.add(key);
        this.#failedBinds.delete(key);
        continue;
      }
      e.skipIPs.add(ip);
      e.problems.push(`${ip}:${sp.port}: ${r.error}`);
      this.#bindFailed(sp, 'external_ip', key, `${ip}:${sp.port} not proxied: ${r.error}`);
    }
    return keep;
  }

  /** #intend records what this sync programmed (intended()). */
  #intend(text: string, portals: Portals): void {
    const snapshot = new Map<string, PortalPort>();
    for (const [id, e] of this.#entries) {
      snapshot.set(id, {
        sp: e.sp,
        sockets: POOLS.flatMap((pool) => {
          const s = e.sockets[pool];
          return s ? [{ pool, port: s.port, endpoints: s.balancer.endpoints, affinityClients: s.balancer.affinityClients }] : [];
        }),
        rules: portals.rules.get(id) ?? [],
        claims: this.#claims.keys(id),
        problems: [...e.problems],
      });
    }
    const ids = [...snapshot.keys()].sort();
    this.#intent = { version: ++this.#version, text, port: (id) => snapshot.get(id) ?? null, ids: () => ids };
  }
}

export { REFUSED_REASONS };
export type { Endpoint };

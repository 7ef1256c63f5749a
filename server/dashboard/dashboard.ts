import type { Clock, TimerHandle } from '../clock.ts';
import { modeSettings } from '../config/modes.ts';
import type { ProxyConfig } from '../config/types.ts';
import { ConntrackError, errorMessage } from '../errors.ts';
import { describeRef, type RecordedEvent } from '../events/event-recorder.ts';
import type { Logger } from '../log.ts';
import type { BackendSyncResult, CleanupResult } from '../proxy/backend.ts';
import type { ProxyState } from '../proxy/proxy-state.ts';
import { v8Collect, type Collect } from '../proxy/memory-release.ts';
import type { ServiceHealthEntry } from '../proxy/healthcheck/service-health-server.ts';
import type { SyncObserver, SyncRecord, SyncTrigger } from '../proxy/sync-loop.ts';
import type { SourceStatus } from '../proxy/source.ts';
import { KPROXY_VERSION } from '../version.ts';
import type { DashboardAuth } from './auth/auth.ts';
import { HeavyReads } from './heavy-reads.ts';
import { KernelReader } from './kernel-reader.ts';
import { LiveStream } from './live-stream.ts';
import type { KernelViewProvider } from './kernel-view.ts';
import type {
  ActionResult,
  ConntrackInfo,
  Counts,
  EventEntry,
  Health,
  Overview,
  ProcessMemory,
  ServerMessage,
  ServiceConntrack,
  ServiceDetail,
  ServiceSummary,
  SyncEntry,
  Viewer,
} from './protocol.ts';
import { ServiceCatalog, type ServiceModel } from './service-catalog.ts';
import { conntrackInfo, countServiceConntrack, type DashboardConntrack } from './service-conntrack.ts';
import { serviceDetail } from './service-detail.ts';
import type { StreamHubOptions } from './stream-hub.ts';
import { SyncHistory } from './sync-history.ts';
import { familyTable } from './family-view.ts';
import { joinFamilies, splitPortId } from './family-model.ts';
import type { IPFamily } from '../net/ip.ts';
import { yieldToEventLoop, type Yield } from './yield.ts';
import { noPacketTracer, type PacketTracer, type PacketTracerFactory } from './packet-tracer.ts';

/** DashboardDaemon is what the dashboard needs of a Daemon (server/daemon.ts satisfies it). */
export interface DashboardDaemon {
  readonly config: ProxyConfig;
  readonly nodeName: string;
  readonly clock: Clock;
  readonly logger: Logger;
  /** states: each proxied family's state, the primary first. */
  readonly states: readonly ProxyState[];
  /** invalid: refused objects ("Service ns/name" -> why), counted once whatever family refused them. */
  readonly invalid: ReadonlyMap<string, string>;
  /** proxy: the sync controls of every family (the daemon's meta proxier). */
  readonly proxy: {
    addObserver(o: SyncObserver): void;
    requestFullSync(trigger?: SyncTrigger): void;
    pause(): void;
    resume(): void;
    readonly paused: boolean;
    readonly lastRecord: SyncRecord | null;
  };
  /** cleanup removes what every family's backend programmed. */
  cleanup(): Promise<CleanupResult>;
  readonly source: { status(): SourceStatus };
}

/** RecentEvents is the memory event recorder as the dashboard reads it. */
export interface RecentEvents {
  recent(opts?: { limit?: number }): RecordedEvent[];
  onEvent(fn: (e: RecordedEvent) => void): () => void;
}

export interface DashboardOptions {
  daemon: DashboardDaemon;
  provider: KernelViewProvider;
  /** conntrack: the daemon's conntrack counts (ConntrackSetup.counts); null when the run has none. */
  conntrack: DashboardConntrack | null;
  /** conntrackSimulated: --dry-run's in-memory conntrack table and /proc. */
  conntrackSimulated?: boolean;
  backendDescription: string;
  events?: RecentEvents;
  /** health: the node's health (the sync observers' ProxyHealth); null where the daemon has none. */
  health?: () => Health | null;
  /** healthChecks: the service health check node ports (simulated with --dry-run), for the Service page. */
  healthChecks?: () => readonly ServiceHealthEntry[];
  pause?: Yield;
  /** countersIntervalMs: how often connected dashboards get counters (default 5 s). */
  countersIntervalMs?: number;
  /** kernelMinIntervalMs: at most one kernel read this often (default 5 s). */
  kernelMinIntervalMs?: number;
  /** idleReleaseMs: with no client and no request for this long, the parsed tables are dropped (default 60 s). */
  idleReleaseMs?: number;
  hub?: Omit<StreamHubOptions, 'logger'>;
  /** auth: whose refusals the dashboard counts (kproxy_dashboard_auth_failures_total). */
  auth?: DashboardAuth;
  /** heavy: the limit on expensive API reads (default 2 running, 8 waiting). */
  heavy?: HeavyReads;
  /** tlsReloadErrors: certificate pairs that changed and did not load (TlsFiles). */
  tlsReloadErrors?: () => number;
  /** tracer builds the packet tracer over this dashboard's kernel read (server/trace/dashboard-trace.ts); without one GET /api/v1/trace answers 503. */
  tracer?: PacketTracerFactory;
  /** memory: the daemon's memory for the Overview (default: this process's, process.memoryUsage). */
  memory?: () => ProcessMemory;
  /**
   * collect: a collection that gives memory back, run once the parsed tables
   * are dropped (default V8's last-resort one, when the runtime exposes it;
   * null: none). Parsing 330,000 rules leaves hundreds of MB of free heap
   * pages the process keeps otherwise.
   */
  collect?: Collect | null;
}

/** processMemory reads this process's resident memory and V8 heap. */
export function processMemory(): ProcessMemory {
  const m = process.memoryUsage();
  return { rssBytes: m.rss, heapUsedBytes: m.heapUsed, heapTotalBytes: m.heapTotal };
}

/** DashboardCounters are what the dashboard refused, for kproxy_dashboard_* metrics and the Overview. */
export interface DashboardCounters {
  /** authFailures: refused credentials by reason (missing, invalid, forbidden, unavailable, throttled). */
  readonly authFailures: Readonly<Record<string, number>>;
  /** refused: work turned away by reason: messages over a client's budget, heavy reads over the limit, connections over the caps, slow clients dropped. */
  readonly refused: Readonly<Record<'messages' | 'reads' | 'connections' | 'slow-clients', number>>;
  readonly tlsReloadErrors: number;
}

export function eventEntry(e: RecordedEvent): EventEntry {
  return { seq: e.seq, time: e.time, type: e.type, reason: e.reason, action: e.action, object: describeRef(e.regarding), note: e.note };
}

interface PendingSync {
  entry: SyncEntry;
  changed: ReadonlySet<string> | 'all';
}

/**
 * Dashboard is the state behind the dashboard and the queries on it (overview,
 * counts, snapshot, a Service's page, conntrack); its live stream (the
 * WebSocket sessions) is the LiveStream it owns. It hears every sync as an
 * observer but does only bookkeeping there (a history row, references to the
 * restore input); summaries, deltas and messages are made on the next turn of
 * the event loop, off the sync's path. Counters and the kernel are read only
 * while someone is watching.
 */
export class Dashboard {
  readonly daemon: DashboardDaemon;
  readonly provider: KernelViewProvider;
  readonly reader: KernelReader;
  readonly catalog = new ServiceCatalog();
  readonly history = new SyncHistory();
  /** stream: the live WebSocket sessions (connect, receive, pacing, counters while watched). */
  readonly stream: LiveStream;
  readonly heavy: HeavyReads;
  /** tracer: the packet tracer over this dashboard's kernel read (GET /api/v1/trace). */
  readonly tracer: PacketTracer;
  readonly startedAt: number;
  readonly #o: DashboardOptions;
  readonly #log: Logger;
  readonly #pause: Yield;
  readonly #model: ServiceModel;
  #catalogReady = false;
  #pending: PendingSync[] = [];
  #flushing = false;
  #idleTimer: TimerHandle | null = null;
  #lastUse = 0;
  #stopped = false;
  #unsubscribe: (() => void)[] = [];
  #lastAction: ActionResult | null = null;
  #conntrack: ConntrackInfo | null = null;
  /** #skipped: per family, the service ports its last successful sync could not program, with why. */
  readonly #skipped = new Map<IPFamily, ReadonlyMap<string, string>>();
  /** #lastRules: per family, the objects per table after its last sync that counted them. */
  readonly #lastRules = new Map<IPFamily, Readonly<Record<string, number>>>();

  constructor(opts: DashboardOptions) {
    this.#o = opts;
    this.daemon = opts.daemon;
    this.provider = opts.provider;
    this.#log = opts.daemon.logger.child('dashboard');
    this.#pause = opts.pause ?? yieldToEventLoop;
    this.startedAt = opts.daemon.clock.now();
    this.heavy = opts.heavy ?? new HeavyReads();
    this.reader = new KernelReader({ provider: opts.provider, clock: opts.daemon.clock, logger: this.#log, pause: this.#pause, minIntervalMs: opts.kernelMinIntervalMs });
    this.tracer = opts.tracer ? opts.tracer({ reader: this.reader, provider: opts.provider, states: () => opts.daemon.states, clock: opts.daemon.clock, touch: () => this.touch() }) : noPacketTracer;
    this.stream = new LiveStream({
      queries: this,
      clock: opts.daemon.clock,
      logger: this.#log,
      hub: opts.hub,
      countersIntervalMs: opts.countersIntervalMs ?? this.provider.liveIntervalMs,
      pause: this.#pause,
    });
    const states = opts.daemon.states;
    // Every family's service ports in one model (IPv6 ones keyed "…@IPv6", family-model.ts).
    const joined = joinFamilies(() => states);
    this.#model = {
      services: joined.services,
      endpoints: joined.endpoints,
      nodeName: opts.daemon.nodeName,
      get zone() {
        return states[0].node.zone;
      },
      invalid: opts.daemon.invalid,
      skipped: (id) => {
        const p = splitPortId(id);
        return this.#skipped.get(p.family)?.get(p.id);
      },
    };
    opts.daemon.proxy.addObserver(this.observer);
    if (opts.events) {
      this.#unsubscribe.push(
        opts.events.onEvent((e) => {
          this.stream.changed();
          this.stream.broadcast({ type: 'event', event: eventEntry(e) }, 'droppable');
        }),
      );
    }
    this.#unsubscribe.push(
      this.reader.onRead(() => {
        this.stream.changed();
        this.stream.sendCounters();
      }),
    );
  }

  /** observer hears every sync; it only records and defers (it runs on the sync's path). */
  readonly observer: SyncObserver = {
    onSync: (record: SyncRecord, checkout, result: BackendSyncResult) => {
      this.provider.noteSync(record, result);
      if (result.skippedServicePorts) this.#skipped.set(record.family, result.skippedServicePorts);
      if (Object.keys(record.rulesByTable).length > 0) this.#lastRules.set(record.family, record.rulesByTable);
      const entry = this.history.add(record, result.batch !== undefined);
      this.#pending.push({ entry, changed: checkout.topologyChanged ? 'all' : checkout.changedServices });
      this.#scheduleFlush();
    },
  };

  /** #scheduleFlush runs #flush after a turn, unless one is running or due (it takes what is pending when it starts). */
  #scheduleFlush(): void {
    if (this.#flushing) return;
    this.#flushing = true;
    void this.#pause()
      .then(() => this.#flush())
      .catch((err) => {
        // The Services list misses this sync's changes until the next one; syncs are not affected.
        this.#log.error("updating the dashboard's Services list failed", { err: errorMessage(err) });
      })
      .finally(() => {
        this.#flushing = false;
        if (this.#pending.length > 0) this.#scheduleFlush();
      });
  }

  /** #flush brings the Services list up to the syncs pending and tells the dashboards; one runs at a time. */
  async #flush(): Promise<void> {
    const pending = this.#pending;
    this.#pending = [];
    if (this.#stopped || pending.length === 0) return;
    this.stream.changed();
    let upserts: ReturnType<ServiceCatalog['refresh']>['upserts'] = [];
    let removed: readonly string[] = [];
    const changedKeys = new Set<string>();
    if (!this.#catalogReady || pending.some((p) => p.changed === 'all')) {
      const r = await this.catalog.refreshAll(this.#model, this.#pause);
      if (this.#stopped) return;
      this.#catalogReady = true;
      upserts = r.upserts;
      removed = r.removed;
      for (const s of r.upserts) changedKeys.add(s.key);
    } else {
      for (const p of pending) for (const k of p.changed as ReadonlySet<string>) changedKeys.add(k);
      const r = this.catalog.refresh(this.#model, changedKeys);
      upserts = r.upserts;
      removed = r.removed;
    }
    if (this.stream.hub.size === 0) return;
    const overview = this.overview();
    pending.forEach((p, i) => {
      const last = i === pending.length - 1;
      this.stream.broadcast({ type: 'sync', sync: p.entry, overview, services: last ? upserts : [], removed: last ? removed : [] }, 'droppable');
    });
    for (const c of this.stream.watchers()) if (c.watch && (changedKeys.has(c.watch) || removed.includes(c.watch))) void this.stream.sendDetail(c);
  }

  /** services makes sure the catalog holds every service (the first time someone asks). */
  #ensureCatalog(): ServiceCatalog {
    if (!this.#catalogReady) {
      this.catalog.refresh(this.#model, 'all');
      this.#catalogReady = true;
    }
    return this.catalog;
  }

  /** services lists every service's summary, sorted by "ns/name". */
  services(): readonly ServiceSummary[] {
    return this.#ensureCatalog().list();
  }

  get model(): ServiceModel {
    return this.#model;
  }

  /** yieldTurn lets other work (a sync, /livez) run in the middle of a long job. */
  get yieldTurn(): Yield {
    return this.#pause;
  }

  get lastAction(): ActionResult | null {
    return this.#lastAction;
  }

  counts(): Counts {
    let endpoints = 0;
    let localEndpoints = 0;
    let servicePorts = 0;
    for (const state of this.daemon.states) {
      servicePorts += state.services.size;
      for (const eps of state.endpoints.values()) {
        endpoints += eps.length;
        for (const ep of eps) if (ep.isLocal) localEndpoints++;
      }
    }
    const catalog = this.#ensureCatalog();
    return {
      services: catalog.size,
      servicePorts,
      endpoints,
      localEndpoints,
      rulesByTable: this.#rulesByTable(),
      ...catalog.warningCounts(),
      invalid: this.daemon.invalid.size,
    };
  }

  /**
   * #rulesByTable: each family's objects per table after its last sync, the
   * IPv6 family's tables named "ip6-…" as on the Rules page (ip6-nat, ip6-filter).
   */
  #rulesByTable(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [family, byTable] of this.#lastRules) {
      for (const [t, n] of Object.entries(byTable)) out[familyTable(t, family)] = n;
    }
    return out;
  }

  overview(): Overview {
    const d = this.daemon;
    const src = d.source.status();
    const config = d.config;
    return {
      node: d.nodeName,
      mode: this.provider.kind,
      backend: this.#o.backendDescription,
      version: KPROXY_VERSION,
      startedAt: this.startedAt,
      now: d.clock.now(),
      source: {
        kind: src.kind,
        description: src.description,
        synced: src.synced,
        ...(src.waitingFor ? { waitingFor: src.waitingFor } : {}),
        objects: src.objects,
        ...(src.lastError ? { lastError: src.lastError, lastErrorAt: src.lastErrorAt } : {}),
      },
      health: this.#o.health?.() ?? null,
      paused: d.proxy.paused,
      counts: this.counts(),
      conntrack: this.#conntrack,
      kernel: this.reader.status(),
      stream: { ...this.stream.stats(), ...this.#accessStats() },
      syncPeriodMs: modeSettings(config).syncPeriodMs,
      ...(this.provider.relayTotals ? { relay: this.provider.relayTotals() } : {}),
      nodeIPs: [...new Set(d.states.flatMap((s) => s.node.addresses))],
      memory: (this.#o.memory ?? processMemory)(),
    };
  }

  /** #accessStats: refused sign-ins (a missing token is only the login page) and refused work, for the Overview. */
  #accessStats(): { refusedSignIns: number; refusedRequests: number } {
    const c = this.counters();
    const signIns = Object.entries(c.authFailures).reduce((n, [reason, v]) => (reason === 'missing' ? n : n + v), 0);
    return { refusedSignIns: signIns, refusedRequests: c.refused.messages + c.refused.reads + c.refused.connections };
  }

  recentEvents(limit = 100): EventEntry[] {
    return (this.#o.events?.recent({ limit }) ?? []).map(eventEntry);
  }

  snapshot(viewer: Viewer): Omit<Extract<ServerMessage, { type: 'snapshot' }>, 'seq'> {
    const catalog = this.#ensureCatalog();
    return {
      type: 'snapshot',
      viewer,
      overview: this.overview(),
      services: catalog.list(),
      syncs: this.history.entries(120),
      events: this.recentEvents(100),
      drift: this.reader.drift.report(),
      lastAction: this.#lastAction,
    };
  }

  /** detail builds a Service page from the last kernel read (or, before one, from what kproxy wrote). */
  async detail(key: string): Promise<ServiceDetail | null> {
    const catalog = this.#ensureCatalog();
    if (!catalog.ports(key)) return null;
    this.touch();
    const intended = await this.provider.intended();
    const missing = new Set(
      this.reader.drift
        .report(Infinity)
        .findings.filter((f) => f.kind === 'missing-chain')
        .map((f) => `${f.table}/${f.chain}`),
    );
    return serviceDetail(
      key,
      catalog,
      this.#model,
      this.provider,
      {
        kernel: this.reader.tables,
        // Released tables (an idle dashboard) leave the read's time behind: the page comes from what kproxy wrote.
        kernelReadAt: this.reader.tables ? this.reader.readAt : null,
        intended,
        missing: (t, c) => missing.has(`${t}/${c}`),
      },
      this.#o.healthChecks?.() ?? [],
    );
  }

  /**
   * serviceConntrack counts the tracked flows to each frontend of a service
   * (see service-conntrack.ts); null for a service this node does not have.
   * It throws RateLimitedError when the counter's queue is full, and
   * ConntrackError when this run has no conntrack counts.
   */
  async serviceConntrack(key: string): Promise<ServiceConntrack | null> {
    const ports = this.#ensureCatalog().ports(key);
    if (!ports) return null;
    if (!this.#o.conntrack) throw new ConntrackError(`conntrack counts are not available in this run (service ${key})`);
    return countServiceConntrack({ counter: this.#o.conntrack, service: key, ports, simulated: this.#o.conntrackSimulated ?? false, logger: this.#log });
  }

  /** readConntrack refreshes the Overview's node counts (two /proc files, cached by the counter) and returns them. */
  async readConntrack(): Promise<ConntrackInfo | null> {
    if (!this.#o.conntrack) return null;
    try {
      this.#conntrack = conntrackInfo(await this.#o.conntrack.node());
    } catch (err) {
      // node() reports unreadable files in its result; a throw here is a bug. The Overview keeps the last counts.
      this.#log.error('reading the conntrack counts failed', { err: errorMessage(err) });
    }
    return this.#conntrack;
  }

  /**
   * touch notes a look at the kernel's tables or kproxy's (a client, a Service
   * page, a REST read). Parsed, they are the dashboard's biggest holding (at
   * 10,000 services × 10 endpoints about 140 MB each for the kernel's read and
   * for what kproxy wrote): once no client is connected and nothing asked for
   * idleReleaseMs, both are dropped and built again on the next look.
   */
  touch(): void {
    const clock = this.daemon.clock;
    const limit = this.#o.idleReleaseMs ?? 60_000;
    this.#lastUse = clock.monotonic();
    if (this.#idleTimer || this.#stopped) return;
    const check = () => {
      this.#idleTimer = null;
      if (this.#stopped) return;
      const idle = clock.monotonic() - this.#lastUse;
      const held = this.reader.holdsTables;
      // Clients watching, a recent look, or a read in progress (its result would come right back): later.
      if (this.stream.hub.size > 0 || idle < limit || !this.reader.release()) {
        this.#idleTimer = clock.setTimeout(check, idle < limit ? limit - idle : limit);
        return;
      }
      this.#log.debug('dashboard idle: dropped the parsed tables until the next look', { idleMs: Math.round(idle) });
      const collect = this.#o.collect === undefined ? v8Collect() : this.#o.collect;
      if (held && collect) {
        const t0 = clock.monotonic();
        collect();
        this.#log.info('gave memory back after dropping the parsed tables', { ms: Math.round(clock.monotonic() - t0) });
      }
    };
    this.#idleTimer = clock.setTimeout(check, limit);
  }

  /** counters: what the dashboard refused so far (metrics read them at scrape time). */
  counters(): DashboardCounters {
    return {
      authFailures: { ...(this.#o.auth?.failures ?? {}) },
      refused: { messages: this.stream.messagesDropped, reads: this.heavy.refused, connections: this.stream.connectionsRefused, 'slow-clients': this.stream.hub.slowDropped },
      tlsReloadErrors: this.#o.tlsReloadErrors?.() ?? 0,
    };
  }

  /** noteAction records an action's result and tells every dashboard. */
  noteAction(result: ActionResult): void {
    this.#lastAction = result;
    this.stream.changed();
    this.stream.broadcast({ type: 'action', result }, 'essential');
  }

  stop(): void {
    this.#stopped = true;
    if (this.#idleTimer) this.daemon.clock.clearTimeout(this.#idleTimer);
    this.#idleTimer = null;
    for (const u of this.#unsubscribe) u();
    this.stream.stop();
  }
}

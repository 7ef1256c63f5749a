import type { Clock, TimerHandle } from '../clock.ts';
import { modeSettings } from '../config/modes.ts';
import type { ProxyConfig } from '../config/types.ts';
import { ConntrackError, errorMessage } from '../errors.ts';
import { describeRef, type RecordedEvent } from '../events/event-recorder.ts';
import type { Logger } from '../log.ts';
import type { BackendSyncResult, CleanupResult } from '../proxy/backend.ts';
import type { ProxyState } from '../proxy/proxy-state.ts';
import type { ServiceHealthEntry } from '../proxy/healthcheck/service-health-server.ts';
import type { SyncObserver, SyncRecord, SyncTrigger } from '../proxy/sync-loop.ts';
import type { SourceStatus } from '../sources/source.ts';
import { KPROXY_VERSION } from '../version.ts';
import type { DashboardAuth } from './auth/auth.ts';
import { HeavyReads } from './heavy-reads.ts';
import { KernelReader } from './kernel-reader.ts';
import { MessageBudget } from './message-budget.ts';
import type { KernelViewProvider } from './kernel-view.ts';
import type { ActionResult, ConntrackInfo, Counts, EventEntry, Health, Overview, ServerMessage, ServiceConntrack, ServiceDetail, ServiceSummary, SyncEntry, Viewer } from './protocol.ts';
import { ServiceCatalog, type ServiceModel } from './service-catalog.ts';
import { conntrackInfo, countServiceConntrack, type DashboardConntrack } from './service-conntrack.ts';
import { detailShape, serviceDetail, watchedCounters } from './service-detail.ts';
import { CLOSE_POLICY, StreamHub, type HubSocket, type StreamClient, type StreamHubOptions } from './stream-hub.ts';
import { SyncHistory } from './sync-history.ts';
import { familyTable } from './family-view.ts';
import { joinFamilies, splitPortId } from './family-model.ts';
import type { IPFamily } from '../net/ip.ts';
import { yieldToEventLoop, type Yield } from './yield.ts';

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
  readonly loop: {
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

/** SNAPSHOT_INTERVAL_MS: a client gets at most one snapshot this often; requests meanwhile become one, sent when it is due. */
export const SNAPSHOT_INTERVAL_MS = 1000;
/** MAX_DROPPED_MESSAGES: a client whose messages were dropped this often (MessageBudget) is disconnected. */
export const MAX_DROPPED_MESSAGES = 100;

/** Pacing is what one client may still ask (its message budget) and its pending snapshot. */
interface Pacing {
  readonly budget: MessageBudget;
  lastSnapshotAt: number;
  /** timer: a snapshot is owed and will be sent when it fires. */
  timer: TimerHandle | null;
}

interface PendingSync {
  entry: SyncEntry;
  changed: ReadonlySet<string> | 'all';
}

/**
 * Dashboard is the state behind the dashboard and its live stream. It hears
 * every sync as an observer but does only bookkeeping there (a history row,
 * references to the restore input); summaries, deltas and messages are made
 * on the next turn of the event loop, off the sync's path. Counters and the
 * kernel are read only while someone is watching.
 */
export class Dashboard {
  readonly daemon: DashboardDaemon;
  readonly provider: KernelViewProvider;
  readonly reader: KernelReader;
  readonly catalog = new ServiceCatalog();
  readonly history = new SyncHistory();
  readonly hub: StreamHub;
  readonly heavy: HeavyReads;
  readonly startedAt: number;
  /** messagesDropped / connectionsRefused: client messages over their budget, stream connections over the caps. */
  messagesDropped = 0;
  connectionsRefused = 0;
  readonly #o: DashboardOptions;
  readonly #log: Logger;
  readonly #pause: Yield;
  readonly #model: ServiceModel;
  #catalogReady = false;
  #pending: PendingSync[] = [];
  #flushing = false;
  #timer: TimerHandle | null = null;
  #idleTimer: TimerHandle | null = null;
  #lastUse = 0;
  #stopped = false;
  #unsubscribe: (() => void)[] = [];
  #lastAction: ActionResult | null = null;
  #lastSnapshot = { bytes: 0, ms: 0 };
  #conntrack: ConntrackInfo | null = null;
  /** #skipped: per family, the service ports its last successful sync could not program, with why. */
  readonly #skipped = new Map<IPFamily, ReadonlyMap<string, string>>();
  /** #lastRules: per family, the objects per table after its last sync that counted them. */
  readonly #lastRules = new Map<IPFamily, Readonly<Record<string, number>>>();
  /** #shapes: per watching client, the shape of the page it was last sent (see detailShape). */
  readonly #shapes = new WeakMap<StreamClient, string>();
  readonly #pacing = new WeakMap<StreamClient, Pacing>();
  /** #snapshotBody: the viewer-independent part of the last snapshot, shared by clients asking within the interval. */
  #snapshotBody: { json: string; version: number; at: number } | null = null;
  /** #version changes whenever a snapshot would say something new (a sync, an Event, an action, a kernel read). */
  #version = 0;

  constructor(opts: DashboardOptions) {
    this.#o = opts;
    this.daemon = opts.daemon;
    this.provider = opts.provider;
    this.#log = opts.daemon.logger.child('dashboard');
    this.#pause = opts.pause ?? yieldToEventLoop;
    this.startedAt = opts.daemon.clock.now();
    this.hub = new StreamHub({ logger: this.#log, ...opts.hub });
    this.heavy = opts.heavy ?? new HeavyReads();
    this.reader = new KernelReader({ provider: opts.provider, clock: opts.daemon.clock, logger: this.#log, pause: this.#pause, minIntervalMs: opts.kernelMinIntervalMs });
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
    opts.daemon.loop.addObserver(this.observer);
    if (opts.events) {
      this.#unsubscribe.push(
        opts.events.onEvent((e) => {
          this.#version++;
          this.hub.broadcast({ type: 'event', event: eventEntry(e) }, 'droppable');
        }),
      );
    }
    this.#unsubscribe.push(
      this.reader.onRead(() => {
        this.#version++;
        this.#sendCounters();
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
      if (!this.#flushing) {
        this.#flushing = true;
        void this.#pause().then(() => this.#flush());
      }
    },
  };

  #flush(): void {
    this.#flushing = false;
    const pending = this.#pending;
    this.#pending = [];
    if (this.#stopped || pending.length === 0) return;
    this.#version++;
    let upserts: ReturnType<ServiceCatalog['refresh']>['upserts'] = [];
    let removed: readonly string[] = [];
    const changedKeys = new Set<string>();
    if (!this.#catalogReady || pending.some((p) => p.changed === 'all')) {
      const r = this.catalog.refresh(this.#model, 'all');
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
    if (this.hub.size === 0) return;
    const overview = this.overview();
    pending.forEach((p, i) => {
      const last = i === pending.length - 1;
      this.hub.broadcast({ type: 'sync', sync: p.entry, overview, services: last ? upserts : [], removed: last ? removed : [] }, 'droppable');
    });
    for (const c of this.hub.clients()) if (c.watch && (changedKeys.has(c.watch) || removed.includes(c.watch))) void this.sendDetail(c);
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
      paused: d.loop.paused,
      counts: this.counts(),
      conntrack: this.#conntrack,
      kernel: this.reader.status(),
      stream: {
        clients: this.hub.size,
        slowClientsDropped: this.hub.slowDropped,
        lastSnapshotBytes: this.#lastSnapshot.bytes,
        lastSnapshotMs: this.#lastSnapshot.ms,
        ...this.#accessStats(),
      },
      syncPeriodMs: modeSettings(config).syncPeriodMs,
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

  // ------------------------------------------------------------ live stream

  /** connect registers a WebSocket and sends it the snapshot; null when the hub is full. */
  connect(socket: HubSocket, viewer: Viewer, remote: string): StreamClient | null {
    const c = this.hub.add(socket, viewer, remote);
    if (!c) return null;
    this.#pacing.set(c, { budget: new MessageBudget(this.daemon.clock.monotonic()), lastSnapshotAt: -Infinity, timer: null });
    this.touch();
    this.#sendSnapshot(c);
    this.#startTimer();
    // Conntrack's two files read in microseconds; then the kernel, whose counters message carries both.
    void this.readConntrack().then(() => this.#refreshKernel());
    return c;
  }

  /**
   * #sendSnapshot sends a full snapshot and notes its size and cost (the
   * Overview shows them). Everything but the viewer is serialised once and
   * shared by the clients that ask within SNAPSHOT_INTERVAL_MS while nothing
   * changed: at 10,000 Services that is ~2 MB of JSON and tens of ms each.
   */
  #sendSnapshot(c: StreamClient): void {
    const clock = this.daemon.clock;
    const now = clock.monotonic();
    const pacing = this.#pacing.get(c);
    if (pacing) pacing.lastSnapshotAt = now;
    let body = this.#snapshotBody;
    if (!body || body.version !== this.#version || now - body.at >= SNAPSHOT_INTERVAL_MS) {
      const { type: _type, viewer: _viewer, ...rest } = this.snapshot(c.viewer);
      body = { json: JSON.stringify(rest), version: this.#version, at: now };
      this.#snapshotBody = body;
    }
    const json = `{"type":"snapshot","viewer":${JSON.stringify(c.viewer)},${body.json.slice(1)}`;
    this.hub.sendText(c, json, 'essential');
    this.#lastSnapshot = { bytes: Buffer.byteLength(json), ms: clock.monotonic() - now };
  }

  /**
   * #requestSnapshot answers a client's snapshot request: now, if its last
   * snapshot was at least SNAPSHOT_INTERVAL_MS ago and has left the server's
   * buffers; otherwise once, when that is so. However often a client asks,
   * it has one snapshot in flight and one owed at most.
   */
  #requestSnapshot(c: StreamClient): void {
    const pacing = this.#pacing.get(c);
    if (!pacing) return;
    if (pacing.timer) return; // one is owed already: this request joins it
    const clock = this.daemon.clock;
    const wait = pacing.lastSnapshotAt + SNAPSHOT_INTERVAL_MS - clock.monotonic();
    if (wait <= 0 && c.socket.bufferedAmount === 0) {
      this.#sendSnapshot(c);
      return;
    }
    pacing.timer = clock.setTimeout(
      () => {
        pacing.timer = null;
        if (!c.closed && !this.#stopped) this.#requestSnapshot(c);
      },
      Math.max(wait, SNAPSHOT_INTERVAL_MS / 10),
    );
  }

  disconnect(c: StreamClient): void {
    this.hub.remove(c);
    const timer = this.#pacing.get(c)?.timer;
    if (timer) this.daemon.clock.clearTimeout(timer);
    this.touch();
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
      // Clients watching, a recent look, or a read in progress (its result would come right back): later.
      if (this.hub.size > 0 || idle < limit || !this.reader.release()) {
        this.#idleTimer = clock.setTimeout(check, idle < limit ? limit - idle : limit);
        return;
      }
      this.#log.debug('dashboard idle: dropped the parsed tables until the next look', { idleMs: Math.round(idle) });
    };
    this.#idleTimer = clock.setTimeout(check, limit);
  }

  /**
   * receive handles one client message (ClientMessage); anything else is
   * ignored. Messages past the client's MessageBudget are dropped, and a client
   * that keeps sending them is disconnected (CLOSE_POLICY).
   */
  receive(c: StreamClient, text: string): void {
    const pacing = this.#pacing.get(c);
    if (pacing && !pacing.budget.take(this.daemon.clock.monotonic())) {
      this.messagesDropped++;
      const dropped = pacing.budget.dropped;
      if (dropped === 1) this.#log.warn('dashboard client sends messages faster than its budget; dropping them', { client: c.remote, user: c.viewer.user });
      if (dropped >= MAX_DROPPED_MESSAGES) {
        this.#log.warn('dashboard client disconnected: too many messages', { client: c.remote, user: c.viewer.user, dropped });
        this.disconnect(c);
        c.socket.close(CLOSE_POLICY, 'KPROXY_ERR_RATE_LIMITED: too many messages');
      }
      return;
    }
    let msg: { type?: unknown; service?: unknown };
    try {
      msg = JSON.parse(text);
    } catch {
      this.#log.debug('ignoring a dashboard message that is not JSON', { client: c.remote });
      return;
    }
    if (msg?.type === 'snapshot') {
      this.#requestSnapshot(c);
    } else if (msg?.type === 'watch') {
      c.watch = typeof msg.service === 'string' && msg.service.length <= 320 ? msg.service : null;
      if (c.watch) {
        void this.sendDetail(c);
        void this.#refreshKernel();
      }
    }
  }

  /** sendDetail sends a watching client its service's page. */
  async sendDetail(c: StreamClient): Promise<void> {
    const key = c.watch;
    if (!key) return;
    try {
      const detail = await this.detail(key);
      if (c.watch !== key) return;
      if (detail) this.#shapes.set(c, detailShape(detail));
      this.hub.send(c, { type: 'service', key, detail }, 'essential');
    } catch (err) {
      this.#log.error('building a service page failed', { service: key, err: errorMessage(err) });
    }
  }

  async #refreshKernel(): Promise<void> {
    try {
      await this.reader.refresh();
    } catch (err) {
      // refresh() records read failures itself; this only catches bugs, which must not crash the daemon.
      this.#log.error('kernel refresh failed', { err: errorMessage(err) });
    }
  }

  #startTimer(): void {
    if (this.#timer || this.#stopped) return;
    const clock = this.daemon.clock;
    const every = this.#o.countersIntervalMs ?? 5000;
    const tick = () => {
      this.#timer = null;
      if (this.#stopped || this.hub.size === 0) return;
      this.#timer = clock.setTimeout(tick, every);
      void this.#tick();
    };
    this.#timer = clock.setTimeout(tick, every);
  }

  async #tick(): Promise<void> {
    await this.readConntrack();
    // A read sends counters when it finishes (onRead); when the rate limit skips it, send them now.
    if (this.reader.due) await this.#refreshKernel();
    else this.#sendCounters();
  }

  #sendCounters(): void {
    if (this.hub.size === 0) return;
    const overview = this.overview();
    const drift = this.reader.drift.report();
    for (const c of [...this.hub.clients()]) {
      if (!c.watch) {
        this.hub.send(c, { type: 'counters', overview, drift }, 'droppable');
        continue;
      }
      const key = c.watch;
      void this.detail(key).then(
        (d) => {
          if (c.closed) return;
          // The read changed the page's objects, not only its numbers: send the page first.
          if (d && c.watch === key && this.#shapes.get(c) !== detailShape(d)) {
            this.#shapes.set(c, detailShape(d));
            this.hub.send(c, { type: 'service', key, detail: d }, 'essential');
          }
          this.hub.send(c, { type: 'counters', overview, drift, ...(d ? { watched: watchedCounters(d) } : {}) }, 'droppable');
        },
        (err) => this.#log.error('building live counters failed', { service: key, err: errorMessage(err) }),
      );
    }
  }

  /** counters: what the dashboard refused so far (metrics read them at scrape time). */
  counters(): DashboardCounters {
    return {
      authFailures: { ...(this.#o.auth?.failures ?? {}) },
      refused: { messages: this.messagesDropped, reads: this.heavy.refused, connections: this.connectionsRefused, 'slow-clients': this.hub.slowDropped },
      tlsReloadErrors: this.#o.tlsReloadErrors?.() ?? 0,
    };
  }

  /** noteAction records an action's result and tells every dashboard. */
  noteAction(result: ActionResult): void {
    this.#lastAction = result;
    this.#version++;
    this.hub.broadcast({ type: 'action', result }, 'essential');
  }

  stop(): void {
    this.#stopped = true;
    if (this.#timer) this.daemon.clock.clearTimeout(this.#timer);
    this.#timer = null;
    if (this.#idleTimer) this.daemon.clock.clearTimeout(this.#idleTimer);
    this.#idleTimer = null;
    for (const u of this.#unsubscribe) u();
    this.hub.closeAll();
  }
}

import type { Clock, TimerHandle } from '../clock.ts';
import { errorMessage } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { KernelReader } from './kernel-reader.ts';
import { MessageBudget } from './message-budget.ts';
import type { Overview, ServerMessage, ServiceDetail, Viewer } from './protocol.ts';
import { detailShape, watchedCounters } from './service-detail.ts';
import { CLOSE_POLICY, StreamHub, type HubSocket, type StreamClient, type StreamHubOptions } from './stream-hub.ts';
import { yieldToEventLoop, type Yield } from './yield.ts';

/** SNAPSHOT_INTERVAL_MS: a client gets at most one snapshot this often; requests meanwhile become one, sent when it is due. */
export const SNAPSHOT_INTERVAL_MS = 1000;
/** MAX_DROPPED_MESSAGES: a client whose messages were dropped this often (MessageBudget) is disconnected. */
export const MAX_DROPPED_MESSAGES = 100;
/** SNAPSHOT_SERVICES_PER_TURN: services serialised into a snapshot's body between two turns of the event loop. */
export const SNAPSHOT_SERVICES_PER_TURN = 2000;

/**
 * snapshotBodyJson writes a snapshot's shared body, "services" first: its
 * services as JSON pieces (each a comma-separated run of objects, as sliced
 * out of a serialised array), then the rest of the snapshot. Built in slices
 * (#buildBody) or at once (#sendSnapshotNow), a body reads the same.
 */
function snapshotBodyJson(services: readonly string[], rest: object): string {
  const others = JSON.stringify(rest);
  const list = services.filter((p) => p !== '').join(',');
  return `{"services":[${list}]${others === '{}' ? '' : ',' + others.slice(1, -1)}}`;
}

/** StreamQueries is what the live stream asks of the dashboard's state (Dashboard satisfies it). */
export interface StreamQueries {
  readonly reader: KernelReader;
  snapshot(viewer: Viewer): Omit<Extract<ServerMessage, { type: 'snapshot' }>, 'seq'>;
  overview(): Overview;
  detail(key: string): Promise<ServiceDetail | null>;
  readConntrack(): Promise<unknown>;
  /** touch notes a look at the tables (they are released after a while without one). */
  touch(): void;
}

export interface LiveStreamOptions {
  queries: StreamQueries;
  clock: Clock;
  logger: Logger;
  hub?: Omit<StreamHubOptions, 'logger'>;
  /** countersIntervalMs: how often connected dashboards get counters (default 5 s). */
  countersIntervalMs?: number;
  /** pause: a turn of the event loop between two clients' snapshots (default yieldToEventLoop). */
  pause?: Yield;
}

/** StreamStats: what the Overview shows of the stream. */
export interface StreamStats {
  clients: number;
  slowClientsDropped: number;
  lastSnapshotBytes: number;
  lastSnapshotMs: number;
}

/** Pacing is what one client may still ask (its message budget) and its pending snapshot. */
interface Pacing {
  readonly budget: MessageBudget;
  lastSnapshotAt: number;
  /** timer: a snapshot is owed and will be sent when it fires. */
  timer: TimerHandle | null;
}

/**
 * LiveStream is the dashboard's WebSocket session side: it registers clients
 * (StreamHub), answers their messages within a budget, paces snapshots (one in
 * flight per client, the viewer-independent body shared), sends a watching
 * client its Service page, and pushes counters while anyone is connected. What
 * it sends comes from the dashboard's queries (StreamQueries); it holds no
 * state of the node itself.
 */
export class LiveStream {
  readonly hub: StreamHub;
  /** messagesDropped / connectionsRefused: client messages over their budget, stream connections over the caps. */
  messagesDropped = 0;
  connectionsRefused = 0;
  readonly #o: LiveStreamOptions;
  readonly #log: Logger;
  #timer: TimerHandle | null = null;
  #stopped = false;
  #lastSnapshot = { bytes: 0, ms: 0 };
  /** #snapshotQueue: clients owed a snapshot now, sent one per turn (#drainSnapshots). */
  readonly #snapshotQueue: StreamClient[] = [];
  #sendingSnapshots = false;
  readonly #pause: Yield;
  /** #shapes: per watching client, the shape of the page it was last sent (see detailShape). */
  readonly #shapes = new WeakMap<StreamClient, string>();
  readonly #pacing = new WeakMap<StreamClient, Pacing>();
  /** #snapshotBody: the viewer-independent part of the last snapshot, shared by clients asking within the interval. */
  #snapshotBody: { json: string; bytes: number; version: number; at: number } | null = null;
  /** #version changes whenever a snapshot would say something new (a sync, an Event, an action, a kernel read). */
  #version = 0;

  constructor(opts: LiveStreamOptions) {
    this.#o = opts;
    this.#pause = opts.pause ?? yieldToEventLoop;
    this.#log = opts.logger;
    this.hub = new StreamHub({ logger: opts.logger, ...opts.hub });
  }

  /** changed notes that a snapshot would now say something new (shared snapshot bodies are rebuilt). */
  changed(): void {
    this.#version++;
  }

  stats(): StreamStats {
    return { clients: this.hub.size, slowClientsDropped: this.hub.slowDropped, lastSnapshotBytes: this.#lastSnapshot.bytes, lastSnapshotMs: this.#lastSnapshot.ms };
  }

  /** broadcast sends every client a message (StreamHub's priorities). */
  broadcast(msg: Parameters<StreamHub['broadcast']>[0], priority: Parameters<StreamHub['broadcast']>[1]): void {
    this.hub.broadcast(msg, priority);
  }

  /** watchers: the clients on a Service page (to be sent it again when it changed). */
  watchers(): StreamClient[] {
    return [...this.hub.clients()].filter((c) => c.watch !== null && c.watch !== undefined);
  }

  /** connect registers a WebSocket and sends it the snapshot; null when the hub is full. */
  connect(socket: HubSocket, viewer: Viewer, remote: string): StreamClient | null {
    const c = this.hub.add(socket, viewer, remote);
    if (!c) return null;
    this.#pacing.set(c, { budget: new MessageBudget(this.#o.clock.monotonic()), lastSnapshotAt: -Infinity, timer: null });
    this.#o.queries.touch();
    this.#sendSnapshot(c);
    this.#startTimer();
    // Conntrack's two files read in microseconds; then the kernel, whose counters message carries both.
    void this.#o.queries.readConntrack().then(() => this.#refreshKernel());
    return c;
  }

  /**
   * #sendSnapshot sends a full snapshot and notes its size and cost (the
   * Overview shows them). Everything but the viewer is serialised once and
   * shared by the clients that ask within SNAPSHOT_INTERVAL_MS while nothing
   * changed: at 10,000 Services that is ~2 MB of JSON and tens of ms each.
   */
  #sendSnapshot(c: StreamClient): void {
    if (this.#snapshotQueue.includes(c)) return;
    this.#snapshotQueue.push(c);
    if (!this.#sendingSnapshots) void this.#drainSnapshots();
  }

  /**
   * #drainSnapshots sends the queued snapshots, one per turn of the event loop:
   * eight dashboards connecting at once (at 10,000 Services, a few MB of JSON
   * to encode and write for each) held the loop 100 ms and more in one piece.
   * The first goes once the shared body is built (#buildBody: a few turns when
   * it is not fresh); after each, the next (queued already, or by a client
   * connecting meanwhile) waits a turn.
   */
  async #drainSnapshots(): Promise<void> {
    this.#sendingSnapshots = true;
    try {
      while (this.#snapshotQueue.length > 0) {
        const c = this.#snapshotQueue[0]!;
        if (!c.closed && !this.#stopped && !this.#bodyFresh()) await this.#buildBody(c);
        this.#snapshotQueue.shift();
        if (!c.closed && !this.#stopped) this.#sendSnapshotNow(c);
        await this.#pause();
      }
    } catch (err) {
      // A snapshot that cannot be built or sent leaves its client without one; the next request builds it again.
      this.#log.error('sending a dashboard snapshot failed', { err: errorMessage(err) });
      this.#snapshotQueue.length = 0;
    } finally {
      this.#sendingSnapshots = false;
    }
  }

  /** #bodyFresh: the shared snapshot body says what a snapshot would say now (same version, within the interval). */
  #bodyFresh(): boolean {
    const body = this.#snapshotBody;
    return body !== null && body.version === this.#version && this.#o.clock.monotonic() - body.at < SNAPSHOT_INTERVAL_MS;
  }

  /**
   * #buildBody serialises a snapshot's shared body with turns of the event
   * loop between slices of the services: at 10,000 Services the list is ~2 MB
   * of JSON, and the first snapshot of a flood of connections held the loop
   * about 50 ms in one piece. A body that went stale meanwhile (a sync, an
   * Event) is left unset, and #sendSnapshotNow builds it at once, so what is
   * sent is never older than the deltas sent before it.
   */
  async #buildBody(c: StreamClient): Promise<void> {
    const version = this.#version;
    const at = this.#o.clock.monotonic();
    const { type: _type, viewer: _viewer, services, ...rest } = this.#o.queries.snapshot(c.viewer);
    const pieces: string[] = [];
    for (let i = 0; i < services.length; i += SNAPSHOT_SERVICES_PER_TURN) {
      await this.#pause();
      if (this.#version !== version || this.#stopped) return;
      pieces.push(JSON.stringify(services.slice(i, i + SNAPSHOT_SERVICES_PER_TURN)).slice(1, -1));
    }
    const json = snapshotBodyJson(pieces, rest);
    this.#snapshotBody = { json, bytes: Buffer.byteLength(json), version, at };
  }

  #sendSnapshotNow(c: StreamClient): void {
    const clock = this.#o.clock;
    const now = clock.monotonic();
    const pacing = this.#pacing.get(c);
    if (pacing) pacing.lastSnapshotAt = now;
    let body = this.#snapshotBody;
    if (!body || !this.#bodyFresh()) {
      const { type: _type, viewer: _viewer, services, ...rest } = this.#o.queries.snapshot(c.viewer);
      const json = snapshotBodyJson([JSON.stringify(services).slice(1, -1)], rest);
      body = { json, bytes: Buffer.byteLength(json), version: this.#version, at: now };
      this.#snapshotBody = body;
    }
    const head = `{"type":"snapshot","viewer":${JSON.stringify(c.viewer)},`;
    this.hub.sendText(c, head + body.json.slice(1), 'essential');
    this.#lastSnapshot = { bytes: Buffer.byteLength(head) + body.bytes - 1, ms: clock.monotonic() - now };
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
    const clock = this.#o.clock;
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
    if (timer) this.#o.clock.clearTimeout(timer);
    this.#o.queries.touch();
  }

  /**
   * receive handles one client message (ClientMessage); anything else is
   * ignored. Messages past the client's MessageBudget are dropped, and a client
   * that keeps sending them is disconnected (CLOSE_POLICY). What a client
   * disconnected (or gone) had still sent is ignored: a flood of 400 messages
   * would otherwise log, count and close once for each of them.
   */
  receive(c: StreamClient, text: string): void {
    if (c.closed) return;
    const pacing = this.#pacing.get(c);
    if (pacing && !pacing.budget.take(this.#o.clock.monotonic())) {
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
      const detail = await this.#o.queries.detail(key);
      if (c.watch !== key) return;
      if (detail) this.#shapes.set(c, detailShape(detail));
      this.hub.send(c, { type: 'service', key, detail }, 'essential');
    } catch (err) {
      this.#log.error('building a service page failed', { service: key, err: errorMessage(err) });
    }
  }

  async #refreshKernel(): Promise<void> {
    try {
      await this.#o.queries.reader.refresh();
    } catch (err) {
      // refresh() records read failures itself; this only catches bugs, which must not crash the daemon.
      this.#log.error('kernel refresh failed', { err: errorMessage(err) });
    }
  }

  #startTimer(): void {
    if (this.#timer || this.#stopped) return;
    const clock = this.#o.clock;
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
    await this.#o.queries.readConntrack();
    // A read sends counters when it finishes (onRead); when the rate limit skips it, send them now.
    if (this.#o.queries.reader.due) await this.#refreshKernel();
    else this.sendCounters();
  }

  sendCounters(): void {
    if (this.hub.size === 0) return;
    const overview = this.#o.queries.overview();
    const drift = this.#o.queries.reader.drift.report();
    for (const c of [...this.hub.clients()]) {
      if (!c.watch) {
        this.hub.send(c, { type: 'counters', overview, drift }, 'droppable');
        continue;
      }
      const key = c.watch;
      void this.#o.queries.detail(key).then(
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

  stop(): void {
    this.#stopped = true;
    if (this.#timer) this.#o.clock.clearTimeout(this.#timer);
    this.#timer = null;
    this.hub.closeAll();
  }
}

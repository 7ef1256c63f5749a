import type { KubernetesListObject, KubernetesObject, ListWatch, Watch } from '@kubernetes/client-node';
import type { Clock, TimerHandle } from '../../clock.ts';
import { errorMessage, ListFailedError, WatchFailedError } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import { objectKey } from '../../proxy/kube-objects.ts';
import { Backoff } from './backoff.ts';
import { DEFAULT_TUNING, type InformerCounters, type InformerKind, type InformerState, type InformerStatus, type InformerTuning, type WatchClient } from './informer-types.ts';

export interface ResilientInformerOptions<T extends KubernetesObject> {
  kind: InformerKind;
  /** path: the watch path ("/api/v1/services"). */
  path: string;
  /**
   * list: one list call with the same selectors as the watch, each item
   * through keep as soon as it is decoded (KubeApi.list).
   */
  list: (keep: (item: unknown) => unknown) => Promise<KubernetesListObject<T>>;
  watch: WatchClient;
  /** ListWatch: client-node's class (loaded with the client, client-node.ts). */
  ListWatch: typeof ListWatch;
  /**
   * keep: what of an object the informer holds (keptFields), applied to listed
   * and watched objects before anything caches them: client-node's ListWatch
   * cache, the informer's own, the handlers. Default: the whole object.
   */
  keep?: (obj: unknown) => T;
  labelSelector?: string;
  fieldSelector?: string;
  /** server: where the API is, for log lines. */
  server: string;
  clock: Clock;
  logger: Logger;
  tuning?: Partial<InformerTuning>;
  random?: () => number;
  /** onChange: add (null, cur), update (prev, cur), delete (last known, null). */
  onChange(prev: T | null, cur: T | null): void;
  /** onSynced: the first complete list has been delivered. */
  onSynced(): void;
}

const PLURAL: Record<InformerKind, string> = { Service: 'Services', EndpointSlice: 'EndpointSlices', Node: 'Nodes', ServiceCIDR: 'ServiceCIDRs' };

/**
 * ResilientInformer wraps client-node's ListWatch, which on its own stops at the
 * first error, gives no old object on update, and cannot be told to relist. Per
 * object key it keeps what it delivered, so handlers get (prev, cur) on update
 * and the last known object on delete, and a relist delivers only the
 * differences. It restarts after errors with jittered exponential backoff
 * (resuming from the last resourceVersion; client-node relists on 410 Gone),
 * and relists when the watch has been quiet longer than quietRelistMs. All its
 * timers run on the injected clock.
 */
export class ResilientInformer<T extends KubernetesObject> {
  readonly #o: ResilientInformerOptions<T>;
  readonly #tuning: InformerTuning;
  readonly #random: () => number;
  readonly #backoff: Backoff;
  readonly #what: string;
  readonly #keep: (obj: unknown) => T;
  #lw: ListWatch<T> | null = null;
  #state: InformerState = 'idle';
  readonly #delivered = new Map<string, T>();
  #synced = false;
  #listedOnce = false;
  /** #listedKeys: keys of a list whose processing has not been reconciled yet. */
  #listedKeys: Set<string> | null = null;
  #lastActivity = 0;
  #retryTimer: TimerHandle | null = null;
  #quietTimer: TimerHandle | null = null;
  readonly #delayTimers = new Set<TimerHandle>();
  readonly #open = new Set<AbortController>();
  #lastError: string | undefined;
  #lastErrorAt: number | undefined;
  /** #failedAttempts: failures since a watch was last open (for the recovery log line). */
  #failedAttempts = 0;
  readonly counters: InformerCounters = {
    lists: 0,
    relists: 0,
    quietRelists: 0,
    expired: 0,
    connects: 0,
    disconnects: 0,
    errors: 0,
    restarts: 0,
    events: 0,
    bookmarks: 0,
    adds: 0,
    updates: 0,
    deletes: 0,
    malformed: 0,
    handlerErrors: 0,
  };

  constructor(opts: ResilientInformerOptions<T>) {
    this.#o = opts;
    this.#tuning = { ...DEFAULT_TUNING, ...opts.tuning };
    this.#random = opts.random ?? Math.random;
    this.#backoff = new Backoff(this.#tuning.backoff, this.#random);
    this.#what = PLURAL[opts.kind];
    this.#keep = opts.keep ?? ((o) => o as T);
  }

  /** start lists and watches in the background; it never throws and never waits for the API. */
  start(): void {
    if (this.#state !== 'idle') return;
    this.#run(this.#newListWatch());
  }

  stop(): void {
    this.#state = 'stopped';
    const lw = this.#lw;
    this.#lw = null;
    void lw?.stop();
    for (const c of this.#open) c.abort();
    this.#open.clear();
    for (const t of [this.#retryTimer, this.#quietTimer, ...this.#delayTimers]) if (t) this.#o.clock.clearTimeout(t);
    this.#delayTimers.clear();
    this.#retryTimer = this.#quietTimer = null;
  }

  /** relist drops the watch and lists from scratch, delivering only what differs. */
  relist(): void {
    if (this.#state === 'stopped' || this.#state === 'idle') return;
    const old = this.#lw;
    this.#lw = null;
    void old?.stop();
    for (const c of this.#open) c.abort();
    this.#open.clear();
    for (const t of [this.#retryTimer, ...this.#delayTimers]) if (t) this.#o.clock.clearTimeout(t);
    this.#delayTimers.clear();
    this.#retryTimer = null;
    this.#run(this.#newListWatch());
  }

  status(): InformerStatus {
    return {
      kind: this.#o.kind,
      state: this.#state,
      synced: this.#synced,
      objects: this.#delivered.size,
      lastError: this.#lastError,
      lastErrorAt: this.#lastErrorAt,
      counters: { ...this.counters },
    };
  }

  #run(lw: ListWatch<T>): void {
    this.#lw = lw;
    this.#state = 'starting';
    // start() resolves once the watch is open (or the attempt failed); failures reach the ERROR callback.
    lw.start().catch((err: unknown) => this.#onError(lw, err));
  }

  #newListWatch(): ListWatch<T> {
    // The ListWatch calls our list and watch wrappers; `self` lets them tell a current instance from a replaced one.
    const self: { lw: ListWatch<T> | null } = { lw: null };
    const current = () => self.lw !== null && self.lw === this.#lw && this.#state !== 'stopped';
    const watch: WatchClient = { watch: (path, query, cb, done) => this.#watch(current, path, query, cb, done) };
    const lw = new this.#o.ListWatch<T>(this.#o.path, watch as unknown as Watch, () => this.#list(current), false, this.#o.labelSelector, this.#o.fieldSelector, {
      delayFn: (ms) => this.#delay(current, ms),
    });
    self.lw = lw;
    lw.on('add', (o) => current() && this.#upsert(o));
    lw.on('update', (o) => current() && this.#upsert(o));
    lw.on('delete', (o) => current() && this.#remove(o));
    lw.on('error', (err) => current() && this.#onError(lw, err));
    return lw;
  }

  async #list(current: () => boolean): Promise<KubernetesListObject<T>> {
    let list: KubernetesListObject<T>;
    try {
      list = await this.#o.list(this.#keep);
    } catch (err) {
      throw new ListFailedError(`listing ${this.#what} from ${this.#o.server} failed`, { cause: err });
    }
    if (!current()) return list;
    this.counters.lists++;
    if (this.#listedOnce) this.counters.relists++;
    this.#listedOnce = true;
    const items = (list.items ?? []).filter((o) => this.#wellFormed(o));
    this.#listedKeys = new Set(items.map((o) => objectKey(o)));
    this.#touch();
    return { ...list, items };
  }

  /** #reconcile runs once the ListWatch has processed a list: whatever we delivered that the list lacks is gone. */
  #reconcile(): void {
    const listed = this.#listedKeys;
    if (!listed) return;
    this.#listedKeys = null;
    for (const [key, prev] of this.#delivered) {
      if (listed.has(key)) continue;
      this.#delivered.delete(key);
      this.counters.deletes++;
      this.#emit(prev, null);
    }
    if (!this.#synced) {
      this.#synced = true;
      this.#o.logger.info(`${this.#what} listed`, { objects: this.#delivered.size, server: this.#o.server });
      try {
        this.#o.onSynced();
      } catch (err) {
        this.#handlerFailed(err);
      }
    }
  }

  async #watch(
    current: () => boolean,
    path: string,
    query: Record<string, string | number | boolean | undefined>,
    cb: (phase: string, obj: any, raw?: any) => void,
    done: (err: any) => void,
  ): Promise<AbortController> {
    if (!current()) return aborted();
    this.#reconcile();
    const [lo, hi] = this.#tuning.watchTimeoutSeconds;
    const params = { ...query, allowWatchBookmarks: true, timeoutSeconds: Math.floor(lo + this.#random() * (hi - lo)) };
    let ended = false;
    let connected = false;
    let controller: AbortController | null = null;
    const onEvent = (phase: string, obj: any, raw?: any) => {
      if (!current()) return;
      const kept = phase === 'ADDED' || phase === 'MODIFIED' || phase === 'DELETED' ? this.#keep(obj) : obj;
      if (this.#watchEvent(phase, kept)) cb(phase, kept, raw);
    };
    const onDone = (err: unknown) => {
      ended = true;
      if (controller) this.#open.delete(controller);
      if (current()) this.#watchEnded(err, connected);
      done(err);
    };
    try {
      controller = await this.#o.watch.watch(path, params, onEvent, onDone);
    } catch (err) {
      // client-node's Watch throws before connecting (no cluster, credential plugin failure):
      // report it like any watch failure instead of letting ListWatch reject unhandled.
      if (!ended) onDone(err);
      return aborted();
    }
    if (ended) return controller;
    if (!current()) {
      controller.abort();
      return controller;
    }
    this.#open.add(controller);
    connected = true;
    this.counters.connects++;
    if (this.#state !== 'watching') {
      if (this.#failedAttempts > 0) {
        this.#o.logger.info(`${this.#what} watch connected again`, { server: this.#o.server, failedAttempts: this.#failedAttempts, lastError: this.#lastError });
        // lastError is what the informer is recovering from: once it watches again there is none.
        this.#lastError = this.#lastErrorAt = undefined;
        this.#failedAttempts = 0;
      }
      this.#state = 'watching';
      this.#armQuietTimer();
    }
    return controller;
  }

  /** #watchEvent counts one watch line and says whether ListWatch should see it. */
  #watchEvent(phase: string, obj: any): boolean {
    this.#touch();
    switch (phase) {
      case 'ADDED':
      case 'MODIFIED':
      case 'DELETED':
        this.counters.events++;
        return this.#wellFormed(obj);
      case 'BOOKMARK':
        this.counters.bookmarks++;
        return true;
      case 'ERROR':
        if (obj?.code === 410) {
          this.counters.expired++;
          this.#o.logger.info(`${this.#what} watch expired (410 Gone), relisting`, { message: obj?.message });
        } else {
          // The stream ends after an ERROR; ListWatch then resumes from its resourceVersion.
          const err = new WatchFailedError(`${this.#what} watch returned an error: ${obj?.message ?? JSON.stringify(obj)}`);
          this.#fail(err);
          this.#o.logger.warn(err.message, { server: this.#o.server, code: obj?.code });
        }
        return true;
      default:
        return false;
    }
  }

  #watchEnded(err: unknown, connected: boolean): void {
    if (connected) this.counters.disconnects++;
    const e = err as { statusCode?: number; code?: number; name?: string } | null;
    if (e && (e.statusCode === 410 || e.code === 410)) {
      this.counters.expired++;
      this.#o.logger.info(`${this.#what} watch expired (410 Gone), relisting`);
    }
    // Other errors arrive through ListWatch's error callback; a clean end or a
    // client-side inactivity timeout makes ListWatch resume from its resourceVersion.
  }

  #upsert(obj: T): void {
    const key = objectKey(obj);
    const prev = this.#delivered.get(key);
    if (prev && sameVersion(prev, obj)) return;
    this.#delivered.set(key, obj);
    if (prev) this.counters.updates++;
    else this.counters.adds++;
    this.#emit(prev ?? null, obj);
  }

  #remove(obj: T): void {
    const key = objectKey(obj);
    const prev = this.#delivered.get(key);
    if (!prev) return;
    this.#delivered.delete(key);
    this.counters.deletes++;
    this.#emit(prev, null);
  }

  #emit(prev: T | null, cur: T | null): void {
    try {
      this.#o.onChange(prev, cur);
    } catch (err) {
      this.#handlerFailed(err);
    }
  }

  #handlerFailed(err: unknown): void {
    // A throwing handler is a kproxy bug; catching it keeps the informer (and every other object) alive.
    this.counters.handlerErrors++;
    this.#o.logger.error(`${this.#what} change handler failed`, { error: errorMessage(err) });
  }

  #wellFormed(obj: any): boolean {
    if (typeof obj?.metadata?.name === 'string' && obj.metadata.name !== '') return true;
    this.counters.malformed++;
    this.#o.logger.warn(`${this.#what}: object without metadata.name ignored`, { object: JSON.stringify(obj)?.slice(0, 200) });
    return false;
  }

  #onError(lw: ListWatch<T>, err: unknown): void {
    if (lw !== this.#lw || this.#state === 'stopped') return;
    this.#fail(err);
    this.#failedAttempts++;
    this.#state = 'backoff';
    if (this.#quietTimer) this.#o.clock.clearTimeout(this.#quietTimer);
    this.#quietTimer = null;
    const delay = this.#backoff.next();
    this.#o.logger.warn(`${this.#what}: ${this.#synced ? 'watch failed' : 'cannot list yet'}, retrying in ${(delay / 1000).toFixed(1)}s`, {
      server: this.#o.server,
      attempt: this.#backoff.attempts,
      error: errorMessage(err),
    });
    if (this.#retryTimer) this.#o.clock.clearTimeout(this.#retryTimer);
    this.#retryTimer = this.#o.clock.setTimeout(() => {
      this.#retryTimer = null;
      if (this.#lw !== lw || this.#state === 'stopped') return;
      this.counters.restarts++;
      // Same ListWatch: it resumes from its last resourceVersion (a 410 makes it relist).
      this.#run(lw);
    }, delay);
  }

  #fail(err: unknown): void {
    this.counters.errors++;
    this.#lastError = errorMessage(err);
    this.#lastErrorAt = this.#o.clock.now();
  }

  #touch(): void {
    this.#lastActivity = this.#o.clock.monotonic();
    this.#backoff.reset();
  }

  #armQuietTimer(): void {
    if (this.#quietTimer) return;
    const due = this.#lastActivity + this.#tuning.quietRelistMs - this.#o.clock.monotonic();
    this.#quietTimer = this.#o.clock.setTimeout(
      () => {
        this.#quietTimer = null;
        if (this.#state !== 'watching') return; // re-armed when a watch connects again
        const quietMs = this.#o.clock.monotonic() - this.#lastActivity;
        if (quietMs < this.#tuning.quietRelistMs) return this.#armQuietTimer();
        this.counters.quietRelists++;
        this.#o.logger.warn(`${this.#what} watch delivered nothing (no events, no bookmarks) for ${Math.round(quietMs / 1000)}s, relisting`, { server: this.#o.server });
        this.relist();
      },
      Math.max(0, due),
    );
  }

  /** #delay is ListWatch's pause between reconnects, on our clock and jittered. */
  #delay(current: () => boolean, ms: number): Promise<void> {
    if (!current()) return new Promise(() => {}); // a replaced ListWatch never continues
    this.#reconcile();
    return new Promise((resolve) => {
      const t = this.#o.clock.setTimeout(
        () => {
          this.#delayTimers.delete(t);
          resolve();
        },
        Math.round(ms * (1 - this.#tuning.backoff.jitter * this.#random())),
      );
      this.#delayTimers.add(t);
    });
  }
}

function aborted(): AbortController {
  const c = new AbortController();
  c.abort();
  return c;
}

/** sameVersion: the API server changes resourceVersion on every write, so equal versions mean equal objects. */
function sameVersion(a: KubernetesObject, b: KubernetesObject): boolean {
  const va = a.metadata?.resourceVersion;
  const vb = b.metadata?.resourceVersion;
  if (va && vb) return va === vb;
  return JSON.stringify(a) === JSON.stringify(b);
}

import type { Clock } from '../clock.ts';
import { errorMessage, KproxyError, SyncFailedError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { IPFamily } from '../net/ip.ts';
import type { Backend, BackendSyncResult } from './backend.ts';
import type { ProxyState, StateCheckout } from './proxy-state.ts';
import { SyncRunner } from './sync-runner.ts';
import { describeMismatch, skippedVerification, verifyError, type SyncVerification } from './sync-verify.ts';

/** SYNC_TRIGGERS: why a sync runs (the trigger label of kproxy_syncs_total). */
export const SYNC_TRIGGERS = ['startup', 'change', 'periodic', 'retry', 'resync', 'tampering', 'once', 'resume'] as const;

/** Why a sync ran. */
export type SyncTrigger = (typeof SYNC_TRIGGERS)[number];

/**
 * FULL_TRIGGERS: the triggers whose sync the loop asks to be full (forceFull).
 * A retry is not among them: the loop tells the backend, which owns "the next
 * sync is full", that a sync failed (Backend.requireFullSync).
 */
const FULL_TRIGGERS: ReadonlySet<SyncTrigger> = new Set<SyncTrigger>(['startup', 'resync', 'tampering', 'once', 'resume']);

/** SyncRecord is the account of one sync: the dashboard, metrics, health and events all read it. */
export interface SyncRecord {
  /** family: the IP family whose proxier synced (each family has its own loop, as kube-proxy's). */
  readonly family: IPFamily;
  readonly seq: number;
  readonly trigger: SyncTrigger;
  /** startedAt/finishedAt: epoch ms. */
  readonly startedAt: number;
  readonly finishedAt: number;
  readonly full: boolean;
  readonly ok: boolean;
  readonly durationMs: number;
  readonly buildMs: number;
  readonly applyMs: number;
  readonly linesWritten: number;
  readonly bytesWritten: number;
  readonly servicesWritten: number;
  /** servicesChanged: services changed since the previous sync (first 50; servicesChangedCount has the total). */
  readonly servicesChanged: readonly string[];
  readonly servicesChangedCount: number;
  readonly servicePorts: number;
  readonly endpoints: number;
  readonly rulesByTable: Readonly<Record<string, number>>;
  /** networkProgrammingMs: for each endpoint change programmed, ms from its trigger time to now. */
  readonly networkProgrammingMs: readonly number[];
  readonly consecutiveFailures: number;
  readonly error?: { readonly code: string; readonly message: string };
  /** verify: after a full sync, whether the kernel held what it wrote (sync-verify.ts); absent for partial syncs. */
  readonly verify?: SyncVerification;
}

/** SyncObserver is told about the loop's start, queued changes and finished syncs. */
export interface SyncObserver {
  /**
   * onStart: the loop started at `at` (epoch ms). kube-proxy's SyncLoop marks
   * the proxier updated and a sync queued when it starts, so health and the
   * queued timestamp are measured from start-up rather than from the epoch.
   */
  onStart?(at: number, family: IPFamily): void;
  /** onQueued: a change was queued at `at` (epoch ms) for a family; health uses it to detect a stuck proxier. */
  onQueued?(at: number, family: IPFamily): void;
  /** onSourcesSynced: the sources listed everything; the family's first sync is about to be built. */
  onSourcesSynced?(family: IPFamily): void;
  onSync?(record: SyncRecord, checkout: StateCheckout, result: BackendSyncResult): void;
}

export interface SyncLoopOptions {
  state: ProxyState;
  backend: Backend;
  clock: Clock;
  logger: Logger;
  minSyncPeriodMs: number;
  syncPeriodMs: number;
  /** fullSyncPeriodMs: a full rewrite at least this often (kube-proxy: 1 hour). */
  fullSyncPeriodMs?: number;
  /** retryMs: wait after a failed sync (kube-proxy retries after syncPeriod). */
  retryMs?: number;
  observers?: SyncObserver[];
  /**
   * nextSeq numbers the loop's syncs; the loops of a dual-stack node share one
   * counter (the meta proxier's), so a sync's seq names it whatever its family.
   */
  nextSeq?: () => number;
  /**
   * beforeAfterSync is awaited between a successful sync's record and the
   * backend's afterSync: on a dual-stack node the meta proxier holds the first
   * sync's housekeeping of one family until the other family's sync in flight
   * has programmed its rules, so the housekeeping's processes do not compete
   * with that restore for the node's cores.
   */
  beforeAfterSync?: () => Promise<void>;
}

const MAX_CHANGED_LISTED = 50;

/**
 * SyncLoop decides when the backend syncs: not before the sources have listed,
 * then on changes (bounded by minSyncPeriod), every syncPeriod, fully every
 * fullSyncPeriod, after failures, and when asked.
 */
export class SyncLoop {
  readonly #o: Required<Omit<SyncLoopOptions, 'observers' | 'nextSeq' | 'beforeAfterSync'>> & { observers: SyncObserver[]; beforeAfterSync?: () => Promise<void> };
  readonly #nextSeq: () => number;
  readonly #runner: SyncRunner;
  #seq = 0;
  #lastFullAt = -Infinity;
  #nextTrigger: SyncTrigger = 'startup';
  #consecutiveFailures = 0;
  #carriedTriggerTimes: number[] = [];
  #stopTamperWatch: (() => void) | null = null;
  #lastRecord: SyncRecord | null = null;
  #started = false;
  #paused = false;
  /** #withoutNodeIP: service ports skipped at the last sync for want of a node IP of the family (logged on change). */
  #withoutNodeIP = 0;
  /** #programming: set while a sync builds and writes its rules (until its record and observers are done). */
  #programming: Promise<void> | null = null;

  constructor(opts: SyncLoopOptions) {
    this.#o = {
      fullSyncPeriodMs: 3_600_000,
      retryMs: opts.syncPeriodMs,
      observers: [],
      ...opts,
    };
    this.#nextSeq = opts.nextSeq ?? (() => ++this.#seq);
    this.#runner = new SyncRunner({
      clock: opts.clock,
      minIntervalMs: opts.minSyncPeriodMs,
      maxIntervalMs: opts.syncPeriodMs,
      run: () => this.#syncFromRunner(),
      onError: (err) => opts.logger.error('sync runner failed', { err: errorMessage(err) }),
    });
    opts.state.addChangeListener(() => this.changeQueued());
  }

  addObserver(o: SyncObserver): void {
    this.#o.observers.push(o);
  }

  get lastRecord(): SyncRecord | null {
    return this.#lastRecord;
  }

  /** paused: syncs are held by an operator (the dashboard's pause); changes keep queuing meanwhile. */
  get paused(): boolean {
    return this.#paused;
  }

  /**
   * pause holds every sync until resume(): the kernel keeps what it holds now
   * (nothing, after a cleanup). Health goes stale once a change waits longer
   * than its timeout, which is true: the node no longer follows the cluster.
   */
  pause(): void {
    this.#paused = true;
  }

  /** resume ends a pause with a full sync, which writes every rule again. */
  resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    this.requestFullSync('resume');
  }

  /** start runs the first (full) sync once the sources have listed, then keeps syncing. */
  start(): void {
    if (this.#started) return;
    this.#started = true;
    const at = this.#o.clock.now();
    for (const o of this.#o.observers) o.onStart?.(at, this.#o.state.family);
    this.#runner.start();
    void this.#o.state.whenReady().then(() => {
      this.#o.logger.info('sources synced, starting the first sync', {
        servicesPending: this.#o.state.servicesPending,
        endpointsPending: this.#o.state.endpointsPending,
      });
      for (const o of this.#o.observers) o.onSourcesSynced?.(this.#o.state.family);
      this.#runner.request();
    });
    this.#stopTamperWatch =
      this.#o.backend.watchTampering?.((reason) => {
        this.#o.logger.warn('kernel rules were changed behind kproxy, forcing a full sync', { reason });
        this.requestFullSync('tampering');
      }) ?? null;
  }

  /** changeQueued: the state queued a change (the loop listens to its state from construction). */
  changeQueued(): void {
    const at = this.#o.clock.now();
    for (const o of this.#o.observers) o.onQueued?.(at, this.#o.state.family);
    if (this.#nextTrigger === 'periodic' || this.#nextTrigger === 'retry') this.#nextTrigger = 'change';
    if (this.#o.state.ready) this.#runner.request();
  }

  /** requestFullSync forces the next sync to rewrite everything (operator resync, tampering): its trigger asks for it. */
  requestFullSync(trigger: SyncTrigger = 'resync'): void {
    this.#nextTrigger = trigger;
    for (const o of this.#o.observers) o.onQueued?.(this.#o.clock.now(), this.#o.state.family);
    if (this.#o.state.ready) this.#runner.request();
  }

  /** syncOnce runs one full sync now, outside the runner (for --once). */
  async syncOnce(): Promise<SyncRecord> {
    this.#nextTrigger = 'once';
    return this.#sync();
  }

  async stop(): Promise<void> {
    this.#stopTamperWatch?.();
    await this.#runner.stop();
  }

  /** idle resolves when no sync is running (tests). */
  idle(): Promise<void> {
    return this.#runner.idle();
  }

  /**
   * programmed resolves when no sync of this loop is building or writing its
   * rules: at once between syncs, and once the sync in flight is recorded
   * (before its backend's afterSync work).
   */
  async programmed(): Promise<void> {
    while (this.#programming) await this.#programming;
  }

  async #syncFromRunner(): Promise<void> {
    // While paused the runner keeps ticking; resume() asks for the full sync that catches up.
    if (this.#paused) return;
    const rec = await this.#sync();
    if (!rec.ok) this.#runner.retryAfter(this.#o.retryMs);
  }

  async #sync(): Promise<SyncRecord> {
    let programmed = () => {};
    this.#programming = new Promise<void>((r) => (programmed = r));
    let record: SyncRecord;
    try {
      record = await this.#program();
    } finally {
      this.#programming = null;
      programmed();
    }
    const backend = this.#o.backend;
    // After the record and its observers: the rules are in, so the sync's duration, the network programming
    // latency and readiness do not wait for the first sync's removal of other modes' leftovers.
    if (record.ok && backend.afterSync) {
      await this.#o.beforeAfterSync?.();
      await backend.afterSync().catch((err: unknown) => this.#o.logger.error('after-sync work failed', { err: errorMessage(err) }));
    }
    return record;
  }

  /**
   * #verify checks after a successful full sync that the kernel holds what it
   * wrote (sync-verify.ts); a mismatch makes the sync a failed one, so the
   * next sync is full and comes after the retry delay.
   */
  async #verify(result: BackendSyncResult): Promise<BackendSyncResult> {
    const { backend, clock, logger, state } = this.#o;
    const t0 = clock.monotonic();
    let v: SyncVerification;
    try {
      v = await backend.verify!();
    } catch (err) {
      // Backends report a failed read as skipped; a throw is a bug, and still never fails the sync.
      v = skippedVerification(clock.monotonic() - t0, errorMessage(err));
    }
    if (v.skipped !== undefined) {
      logger.warn('could not verify what the sync wrote', { family: state.family, why: v.skipped });
      return { ...result, verify: v };
    }
    if (v.mismatchCount === 0) return { ...result, verify: v };
    logger.error('the kernel does not hold what the sync wrote; the next sync is full', {
      family: state.family,
      mismatches: v.mismatchCount,
      objects: v.objects,
      first: v.mismatches.slice(0, 3).map(describeMismatch).join('; '),
    });
    return { ...result, verify: v, error: verifyError(state.family, v) };
  }

  /** #program runs one sync up to its record and observers. */
  async #program(): Promise<SyncRecord> {
    const { state, backend, clock, logger } = this.#o;
    const startedAt = clock.now();
    const t0 = clock.monotonic();
    const trigger = this.#nextTrigger;
    this.#nextTrigger = 'periodic';
    const checkout = state.checkout();
    if (checkout.withoutNodeIP !== this.#withoutNodeIP) {
      if (checkout.withoutNodeIP > 0) {
        logger.warn(`the Node lists no ${state.family} address: ${checkout.withoutNodeIP} ${state.family} service ports are skipped (not programmed) until it has one`, {
          node: checkout.node.name,
          addresses: checkout.node.addresses.join(','),
        });
      } else if (this.#withoutNodeIP > 0) {
        logger.info(`the Node has a ${state.family} address again: ${state.family} services are programmed`, { node: checkout.node.name });
      }
      this.#withoutNodeIP = checkout.withoutNodeIP;
    }
    // Until a full sync has succeeded the period has run out (#lastFullAt is -Infinity).
    const forceFull = FULL_TRIGGERS.has(trigger) || checkout.topologyChanged || startedAt - this.#lastFullAt >= this.#o.fullSyncPeriodMs;
    let result: BackendSyncResult;
    try {
      result = await backend.sync({ state: checkout, forceFull });
    } catch (err) {
      // Backends report failures in result.error; a throw is a bug, still handled as a failed sync.
      const error = err instanceof KproxyError ? err : new SyncFailedError(`sync failed unexpectedly: ${errorMessage(err)}`, { cause: err });
      result = { full: forceFull, buildMs: 0, applyMs: 0, linesWritten: 0, bytesWritten: 0, servicesWritten: 0, rulesByTable: {}, error };
    }
    // A full sync that wrote nothing has just read the kernel and found it as wanted: there is no write to check.
    if (!result.error && result.full && result.linesWritten > 0 && backend.verify) result = await this.#verify(result);
    const finishedAt = clock.now();
    const ok = !result.error;
    const triggerTimes = [...this.#carriedTriggerTimes, ...checkout.triggerTimes];
    if (ok) {
      this.#consecutiveFailures = 0;
      this.#carriedTriggerTimes = [];
      if (result.full) this.#lastFullAt = startedAt;
    } else {
      this.#consecutiveFailures++;
      // The next sync must rewrite everything: the changes checked out now were not programmed. The backend
      // knows when its own sync failed, not when the verification failed it or it threw: tell it either way.
      backend.requireFullSync();
      this.#nextTrigger = 'retry';
      this.#carriedTriggerTimes = triggerTimes;
    }
    let endpoints = 0;
    for (const eps of checkout.endpoints.values()) endpoints += eps.length;
    const record: SyncRecord = {
      family: state.family,
      seq: this.#nextSeq(),
      trigger,
      startedAt,
      finishedAt,
      full: result.full,
      ok,
      durationMs: clock.monotonic() - t0,
      buildMs: result.buildMs,
      applyMs: result.applyMs,
      linesWritten: result.linesWritten,
      bytesWritten: result.bytesWritten,
      servicesWritten: result.servicesWritten,
      servicesChanged: [...checkout.changedServices].slice(0, MAX_CHANGED_LISTED),
      servicesChangedCount: checkout.changedServices.size,
      servicePorts: checkout.services.size,
      endpoints,
      rulesByTable: result.rulesByTable,
      networkProgrammingMs: ok ? triggerTimes.map((t) => Math.max(0, finishedAt - t)) : [],
      consecutiveFailures: this.#consecutiveFailures,
      ...(result.error ? { error: { code: result.error.code, message: result.error.message } } : {}),
      ...(result.verify ? { verify: result.verify } : {}),
    };
    this.#lastRecord = record;
    if (ok) {
      logger.info(`synced ${record.full ? 'fully' : 'partially'}`, {
        family: record.family,
        seq: record.seq,
        trigger,
        ms: Math.round(record.durationMs),
        // kproxy's own time vs the kernel's (restore processes), to a tenth of a ms: partial syncs take a few.
        buildMs: Math.round(record.buildMs * 10) / 10,
        applyMs: Math.round(record.applyMs * 10) / 10,
        lines: record.linesWritten,
        servicesChanged: record.servicesChangedCount,
        ...(record.verify && record.verify.skipped === undefined ? { verifiedObjects: record.verify.objects, verifyMs: Math.round(record.verify.ms * 10) / 10 } : {}),
      });
    } else {
      logger.error('sync failed, the kernel keeps its previous rules; retrying with a full sync', {
        family: record.family,
        seq: record.seq,
        failures: record.consecutiveFailures,
        code: record.error!.code,
        err: record.error!.message,
        retryInMs: this.#o.retryMs,
      });
    }
    for (const o of this.#o.observers) {
      try {
        o.onSync?.(record, checkout, result);
      } catch (err) {
        logger.error('sync observer failed', { err: errorMessage(err) });
      }
    }
    return record;
  }
}

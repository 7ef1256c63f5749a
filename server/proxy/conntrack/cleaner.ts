import type { Clock, TimerHandle } from '../../clock.ts';
import { CommandNotFoundError, errorMessage } from '../../errors.ts';
import { describeFilter, filterKey, type Conntrack, type ConntrackFilter } from '../../kernel/conntrack.ts';
import type { Logger } from '../../log.ts';
import type { BackendSyncResult } from '../backend.ts';
import type { Endpoint } from '../endpoint.ts';
import type { IPFamily } from '../../net/ip.ts';
import type { StateCheckout } from '../proxy-state.ts';
import type { ServicePort } from '../service-port.ts';
import type { SyncObserver, SyncRecord } from '../sync-loop.ts';
import { connectionlessProtocol, FilterMatcher, ReconcileIndex, staleFlowFilters } from './filters.ts';

/** CleanupRun is one pass of the cleaner (a kube-proxy "reconcile"). */
export interface CleanupRun {
  /** startedAt: epoch ms. */
  readonly startedAt: number;
  readonly seconds: number;
  /** deleted: flows the kernel deleted in this pass. */
  readonly deleted: number;
  /** processes: conntrack -D commands started. */
  readonly processes: number;
  /** listings: conntrack -L commands (one per protocol when a pass had several deletions to check or a scan due). */
  readonly listings: number;
  /** skipped: queued deletions dropped because the listing showed no flow they would delete. */
  readonly skipped: number;
  readonly errors: number;
  /** remaining: deletions still queued after this pass (a later pass takes them). */
  readonly remaining: number;
  /** scanned: flows read by this pass's listings. */
  readonly scanned: number;
  /** reconciled: this pass ran the full reconcile. */
  readonly reconciled: boolean;
}

export interface ConntrackCleanerStatus {
  readonly enabled: boolean;
  /** disabledReason: why the cleaner stopped for good (the conntrack binary is missing). */
  readonly disabledReason: string | null;
  readonly pending: number;
  readonly running: boolean;
  readonly runsTotal: number;
  readonly deletedTotal: number;
  readonly errorsTotal: number;
  /** droppedTotal: deletions not queued because the queue was full (a full reconcile covers UDP ones). */
  readonly droppedTotal: number;
  readonly lastRun: CleanupRun | null;
}

export interface ConntrackCleanerOptions {
  conntrack: Conntrack;
  family: IPFamily;
  clock: Clock;
  logger: Logger;
  /** maxProcessesPerRun: conntrack processes one pass may start (default 32); each walks the table in the kernel. */
  maxProcessesPerRun?: number;
  /** runBudgetMs: a pass starts no new process after this long (default 5 s). */
  runBudgetMs?: number;
  /** pauseMs: wait between passes while work remains (default 1 s), so conntrack never hogs a core. */
  pauseMs?: number;
  /** maxPending: distinct queued deletions (default 4096); beyond it a full reconcile is asked for instead. */
  maxPending?: number;
  /** maxAttempts: tries per deletion before it is given up (default 3). */
  maxAttempts?: number;
  /**
   * reconcileIntervalMs: a full reconcile (streamed listing of UDP flows)
   * runs after the first successful sync and then at most this often
   * (default 1 h); 0 turns the full reconcile off.
   */
  reconcileIntervalMs?: number;
  /** reconcileTimeoutMs: how long one listing may take (default 2 min). */
  reconcileTimeoutMs?: number;
  /** scanRetryMs: wait after a failed listing (default 30 s). */
  scanRetryMs?: number;
  /**
   * listAtLeast: with this many unchecked deletions queued (default 4), a
   * pass lists the table first and runs only the deletions that have flows.
   * A listing costs about two deletions (each walks the whole table), so
   * below this it does not pay; when a scan is due it is free.
   */
  listAtLeast?: number;
  /** onRun hears every pass that did something (metrics: kube-proxy's reconciler histogram and counter). */
  onRun?: (run: CleanupRun) => void;
}

interface Queued {
  readonly filter: ConntrackFilter;
  attempts: number;
  /** probed: a listing saw flows it matches (or none could be made): delete without looking again. */
  probed: boolean;
}

type Tally = { -readonly [K in keyof Omit<CleanupRun, 'startedAt' | 'seconds' | 'remaining'>]: CleanupRun[K] };

/**
 * ConntrackCleaner deletes stale UDP/SCTP conntrack entries after syncs, off
 * the sync's critical path: onSync only turns the checkout into deletions
 * (targeted filters, see filters.ts) and queues them; passes run later on the
 * clock, one conntrack process at a time, a bounded number per pass, within a
 * time budget, coalescing whatever syncs queue meanwhile. Deletions wait for a
 * successful sync: removed before the new rules are in place, an entry would
 * be made again by the old rules to the same dead endpoint. Nothing here ever
 * holds the conntrack table: the full reconcile streams it and keeps only
 * distinct deletions, at most maxPending of them.
 */
export class ConntrackCleaner implements SyncObserver {
  readonly #o: Required<Omit<ConntrackCleanerOptions, 'onRun'>> & Pick<ConntrackCleanerOptions, 'onRun'>;
  readonly #pending = new Map<string, Queued>();
  /** #known: connectionless service ports as of the last sync, for ports a later sync removes. */
  #known: ReadonlyMap<string, ServicePort> = new Map();
  #knownSet = false;
  /** #holding: the last sync failed, so the kernel may still hold the old rules; deletions wait for a good one. */
  #holding = false;
  /** #programmed: services and endpoints of the last successful sync (what the rules hold). */
  #programmed: { services: ReadonlyMap<string, ServicePort>; endpoints: ReadonlyMap<string, readonly Endpoint[]> } | null = null;
  #timer: TimerHandle | null = null;
  #current: Promise<void> | null = null;
  #reconcileDue: boolean;
  /** #unnatedNodePorts: newly active UDP node ports whose unNATed entries the next listing removes. */
  #unnatedNodePorts = new Set<number>();
  #lastReconcileAt = -Infinity;
  #scanNotBefore = -Infinity;
  #disabledReason: string | null = null;
  #stopped = false;
  #runs = 0;
  #deleted = 0;
  #errors = 0;
  #dropped = 0;
  #lastRun: CleanupRun | null = null;

  constructor(opts: ConntrackCleanerOptions) {
    this.#o = {
      maxProcessesPerRun: 32,
      runBudgetMs: 5_000,
      pauseMs: 1_000,
      maxPending: 4_096,
      maxAttempts: 3,
      reconcileIntervalMs: 3_600_000,
      reconcileTimeoutMs: 120_000,
      scanRetryMs: 30_000,
      listAtLeast: 4,
      ...opts,
    };
    // A restarted daemon does not know which endpoints went away while it was down.
    this.#reconcileDue = this.#o.reconcileIntervalMs > 0;
  }

  status(): ConntrackCleanerStatus {
    return {
      enabled: this.#disabledReason === null,
      disabledReason: this.#disabledReason,
      pending: this.#pending.size,
      running: this.#current !== null,
      runsTotal: this.#runs,
      deletedTotal: this.#deleted,
      errorsTotal: this.#errors,
      droppedTotal: this.#dropped,
      lastRun: this.#lastRun,
    };
  }

  /** onSync queues this sync's deletions and, after a successful sync, schedules a pass. */
  onSync(record: SyncRecord, checkout: StateCheckout, _result?: BackendSyncResult): void {
    if (this.#disabledReason !== null || this.#stopped) return;
    const stale = staleFlowFilters(this.#o.family, { ...checkout, previous: this.#known });
    for (const f of stale.filters) this.#enqueue(f);
    for (const p of stale.unnatedNodePorts) this.#unnatedNodePorts.add(p);
    if (checkout.changedServices.size > 0 || !this.#knownSet) this.#remember(checkout.services);
    this.#holding = !record.ok;
    if (!record.ok) return;
    this.#programmed = { services: checkout.services, endpoints: checkout.endpoints };
    if (this.#o.reconcileIntervalMs > 0 && this.#o.clock.monotonic() - this.#lastReconcileAt >= this.#o.reconcileIntervalMs) this.#reconcileDue = true;
    if (this.#hasWork()) this.#schedule(0);
  }

  #hasWork(): boolean {
    return this.#pending.size > 0 || this.#scanDue();
  }

  #scanDue(): boolean {
    return this.#reconcileDue || this.#unnatedNodePorts.size > 0;
  }

  /** #nextDelay: when the next pass should run, or null when nothing waits. A failed listing waits scanRetryMs. */
  #nextDelay(): number | null {
    if (this.#pending.size > 0) return this.#o.pauseMs;
    if (!this.#scanDue()) return null;
    return Math.max(this.#o.pauseMs, this.#scanNotBefore - this.#o.clock.monotonic());
  }

  /**
   * stop ends the cleanup: no new pass, no new process. It does not wait for
   * a conntrack process already running (shutdown must not hang on a walk of
   * a huge table); that one finishes on its own.
   */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) this.#o.clock.clearTimeout(this.#timer);
    this.#timer = null;
  }

  #remember(services: ReadonlyMap<string, ServicePort>): void {
    const known = new Map<string, ServicePort>();
    for (const [id, sp] of services) if (connectionlessProtocol(sp)) known.set(id, sp);
    this.#known = known;
    this.#knownSet = true;
  }

  #enqueue(filter: ConntrackFilter, probed = false): boolean {
    const key = filterKey(filter);
    if (this.#pending.has(key)) return true;
    if (this.#pending.size >= this.#o.maxPending) {
      this.#dropped++;
      if (this.#o.reconcileIntervalMs > 0) this.#reconcileDue = true;
      return false;
    }
    this.#pending.set(key, { filter, attempts: 0, probed });
    return true;
  }

  #schedule(delayMs: number): void {
    if (this.#timer || this.#current || this.#stopped || this.#holding || this.#disabledReason !== null || !this.#programmed) return;
    this.#timer = this.#o.clock.setTimeout(() => {
      this.#timer = null;
      this.#current = this.#pass().finally(() => {
        this.#current = null;
        const delay = this.#nextDelay();
        if (delay !== null) this.#schedule(delay);
      });
    }, delayMs);
  }

  /**
   * #pass is one cleanup pass. First, when listAtLeast deletions wait to be
   * checked or a scan is due, one streamed listing per protocol finds which
   * queued deletions have flows at all (the others are dropped: after a good
   * sync nothing makes such flows again) and, for UDP, what the full
   * reconcile and the newly active node ports add. conntrack walks the whole
   * table for every -D whatever the filter, so a listing that spares more
   * than two deletions has paid for itself. Then the deletions, within the caps.
   */
  async #pass(): Promise<void> {
    const { clock, conntrack, logger } = this.#o;
    const startedAt = clock.now();
    const t0 = clock.monotonic();
    const tally = { deleted: 0, processes: 0, listings: 0, skipped: 0, errors: 0, scanned: 0, reconciled: false };
    try {
      const unprobed = [...this.#pending.values()].filter((q) => !q.probed);
      const scan = this.#scanDue() && clock.monotonic() >= this.#scanNotBefore;
      if (!this.#holding && !this.#stopped && (unprobed.length >= this.#o.listAtLeast || scan)) await this.#discover(unprobed, scan, tally);
      if (this.#disabledReason !== null) return;
      const more = () => !this.#holding && !this.#stopped && tally.processes < this.#o.maxProcessesPerRun && clock.monotonic() - t0 < this.#o.runBudgetMs;
      while (this.#pending.size > 0 && more()) {
        const [key, item] = this.#pending.entries().next().value!;
        this.#pending.delete(key);
        tally.processes++;
        try {
          const n = await conntrack.delete(item.filter);
          tally.deleted += n;
          if (n > 0) logger.debug('deleted stale conntrack flows', { flows: n, filter: describeFilter(item.filter) });
        } catch (err) {
          if (err instanceof CommandNotFoundError) return this.#disable(err);
          tally.errors++;
          item.attempts++;
          const retry = item.attempts < this.#o.maxAttempts && !this.#stopped;
          // A deletion that keeps failing leaves a client pinned to a gone endpoint until its entry times out.
          logger.error('deleting stale conntrack flows failed', { filter: describeFilter(item.filter), attempt: item.attempts, retry, err: errorMessage(err) });
          if (retry) this.#pending.set(key, item);
        }
      }
    } finally {
      this.#runs++;
      this.#deleted += tally.deleted;
      this.#errors += tally.errors;
      if (tally.processes > 0 || tally.listings > 0) {
        const run: CleanupRun = { startedAt, seconds: (clock.monotonic() - t0) / 1000, remaining: this.#pending.size, ...tally };
        this.#lastRun = run;
        if (run.deleted > 0 || run.errors > 0 || run.reconciled) logger.info('conntrack cleanup pass', { ...run, seconds: Number(run.seconds.toFixed(3)) });
        try {
          this.#o.onRun?.(run);
        } catch (err) {
          logger.error('conntrack cleanup listener failed', { err: errorMessage(err) });
        }
      }
    }
  }

  /**
   * #discover runs the listings of a pass. Memory: the matcher (one entry
   * per queued deletion), the reconcile index (one per UDP frontend) and at
   * most maxPending queued filters; flows pass through one line at a time.
   */
  async #discover(unprobed: readonly Queued[], scan: boolean, tally: Tally): Promise<void> {
    const { conntrack, family, logger, clock } = this.#o;
    const matcher = new FilterMatcher<Queued>();
    for (const q of unprobed) matcher.add(q.filter, q);
    const matched = new Set<Queued>();
    const reconcile = scan && this.#reconcileDue;
    const index = reconcile ? new ReconcileIndex(family, this.#programmed!.services, this.#programmed!.endpoints) : null;
    const nodePorts = scan ? this.#unnatedNodePorts : new Set<number>();
    if (scan) this.#unnatedNodePorts = new Set();
    if (reconcile) {
      this.#reconcileDue = false;
      this.#lastReconcileAt = clock.monotonic();
      tally.reconciled = true;
    }
    const protocols = new Set(unprobed.map((q) => q.filter.protocol));
    if (scan && ((index?.size ?? 0) > 0 || nodePorts.size > 0)) protocols.add('udp');
    let overflow = false;
    for (const protocol of protocols) {
      const scanning = protocol === 'udp' && scan;
      tally.listings++;
      try {
        const res = await conntrack.list(
          { family, protocol },
          (flow) => {
            tally.scanned++;
            matcher.match(flow, (q) => matched.add(q));
            if (!scanning) return;
            let f = index?.staleFilter(flow) ?? null;
            if (!f && nodePorts.has(flow.orig.dport) && flow.reply.src === flow.orig.dst) {
              f = { family, protocol: 'udp', origDst: flow.orig.dst, origDstPort: flow.orig.dport, replySrc: flow.orig.dst };
            }
            // Found in the table: no need to look again before deleting it.
            if (f && !this.#enqueue(f, true)) overflow = true;
          },
          { timeoutMs: this.#o.reconcileTimeoutMs },
        );
        if (res.unparsed > 0 || res.oversized > 0) logger.warn('conntrack listing had lines kproxy could not read', { unparsed: res.unparsed, oversized: res.oversized });
        for (const q of unprobed) {
          if (q.filter.protocol !== protocol) continue;
          if (matched.has(q)) q.probed = true;
          else if (this.#pending.get(filterKey(q.filter)) === q) {
            this.#pending.delete(filterKey(q.filter));
            tally.skipped++;
          }
        }
      } catch (err) {
        if (err instanceof CommandNotFoundError) return this.#disable(err);
        tally.errors++;
        // Without the listing, the queued deletions of this protocol run blind, as single ones would.
        for (const q of unprobed) if (q.filter.protocol === protocol) q.probed = true;
        if (scanning) {
          // Left as they are, stale UDP flows keep their clients on gone endpoints: list again later.
          this.#again(reconcile, nodePorts);
          this.#scanNotBefore = clock.monotonic() + this.#o.scanRetryMs;
        }
        logger.error('listing conntrack flows failed', { protocol, scanned: tally.scanned, retryInMs: scanning ? this.#o.scanRetryMs : undefined, err: errorMessage(err) });
      }
    }
    if (overflow) {
      this.#again(reconcile, nodePorts);
      logger.warn('conntrack listing found more stale flows than the queue holds; listing again after these are deleted', { queued: this.#pending.size });
    }
  }

  #again(reconcile: boolean, nodePorts: ReadonlySet<number>): void {
    if (reconcile) this.#reconcileDue = true;
    for (const p of nodePorts) this.#unnatedNodePorts.add(p);
  }

  #disable(err: Error): void {
    this.#disabledReason = `${errorMessage(err)}: stale UDP flows are not cleaned (install conntrack-tools)`;
    this.#dropped += this.#pending.size;
    this.#pending.clear();
    this.#unnatedNodePorts.clear();
    this.#reconcileDue = false;
    this.#o.logger.warn('conntrack cleanup disabled', { reason: this.#disabledReason, code: err instanceof CommandNotFoundError ? err.code : undefined });
  }
}

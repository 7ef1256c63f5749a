import type { Clock } from '../clock.ts';
import { errorMessage, KproxyError, SyncFailedError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { BackendSyncInput, BackendSyncResult } from './backend.ts';
import type { SkippedServicePorts } from './skipped-service-ports.ts';

/**
 * FailedInput is the input of the last sync that failed once it had built
 * what to send (the restore text, the batches, the transaction): what the
 * kernel refused, kept for the dashboard's download and the logs.
 */
export interface FailedInput {
  readonly input: string;
  readonly error: KproxyError;
  /** at: epoch ms. */
  readonly at: number;
}

/** SyncWritten is what a backend's build-and-write reports when it succeeded; the envelope adds the rest of the result. */
export interface SyncWritten {
  /** linesWritten: lines of restore input (or batch commands, transaction operations) sent to the kernel. */
  readonly linesWritten: number;
  readonly servicesWritten: number;
  /** rulesByTable: the backend's objects per table after the sync (a failed sync reports the last successful one's). */
  readonly rulesByTable: Readonly<Record<string, number>>;
}

export interface SyncEnvelopeOptions<X extends object> {
  /** name: the mode as log lines and errors name it ("iptables", "IPVS", "nftables", "userspace"). */
  readonly name: string;
  readonly clock: Clock;
  /** logger: the backend's own (its component named). */
  readonly logger: Logger;
  /** skipped: the backend's skipped service ports, reported in every successful sync's result. */
  readonly skipped: SkippedServicePorts;
  /**
   * describe gives the mode's account of a failure it recognises (a refused
   * restore, naming its lines), or null: a catalogue error then stands as it
   * is, anything else becomes KPROXY_ERR_SYNC_FAILED naming the mode and the
   * step.
   */
  readonly describe?: (err: unknown, run: SyncRun<X>) => KproxyError | null;
  /** failed is what the mode does after a failed sync, besides what the envelope does (count it in its own metric). */
  readonly failed?: (error: KproxyError, run: SyncRun<X>) => void;
}

/**
 * SyncRun is one sync inside the envelope: whether it is full, what it was
 * doing, the inputs it sent, and the time it spent in the kernel runners.
 * X: fields the mode adds to its result (RulesWrittenReport, NftablesSyncReport).
 */
export class SyncRun<X extends object = object> {
  /** step: what the sync is doing, for the failure's message ("ipset", "iptables-save"); empty where a mode has one step. */
  step = '';
  readonly #clock: Clock;
  readonly #asked: boolean;
  #full: boolean | null = null;
  #ioMs = 0;
  readonly #inputs: string[] = [];
  #report: Partial<X> = {};

  constructor(clock: Clock, asked: boolean) {
    this.#clock = clock;
    this.#asked = asked;
  }

  /** full: whether the sync rewrites everything; until the backend decided, it counts as full. */
  get full(): boolean {
    return this.#full ?? true;
  }

  /**
   * decideFull makes the sync full when the loop asked for it (forceFull),
   * when the backend needs one (before its first sync, after a failed one or
   * a cleanup: requireFullSync), or for the mode's own reason (a new build
   * context). Called again, it can only turn a partial sync into a full one.
   */
  decideFull(modeReason = false): boolean {
    this.#full = (this.#full ?? this.#asked) || modeReason;
    return this.#full;
  }

  /** io runs a kernel runner's call and counts its time as the kernel's (applyMs), not kproxy's (buildMs). */
  async io<T>(fn: () => Promise<T>): Promise<T> {
    const t = this.#clock.monotonic();
    try {
      return await fn();
    } finally {
      this.#ioMs += this.#clock.monotonic() - t;
    }
  }

  /** ioMs: the time spent in io() so far. */
  get ioMs(): number {
    return this.#ioMs;
  }

  /** sending records an input the sync is about to send (nothing for empty text): the result's batch, and the failed input if the sync fails. */
  sending(text: string): void {
    if (text !== '') this.#inputs.push(text);
  }

  /** input: every input this sync sent, in order; undefined when it sent nothing. */
  get input(): string | undefined {
    return this.#inputs.length ? this.#inputs.join('') : undefined;
  }

  /** lastInput: the input sent last (the one a failure is about). */
  get lastInput(): string | undefined {
    return this.#inputs.at(-1);
  }

  /** report adds fields to the sync's result, whether it succeeds or fails (nftables' refused stale-chain deletions). */
  report(fields: Partial<X>): void {
    this.#report = { ...this.#report, ...fields };
  }

  /** reported: the fields report() added. */
  get reported(): Partial<X> {
    return this.#report;
  }
}

/**
 * SyncEnvelope is what every backend's sync shares around its own work
 * (what to build, how to diff, what to write): the timing (buildMs is
 * kproxy's own time, applyMs the kernel runners'), the result, the failed
 * result with the same fields, the last failed input, the failure's
 * description and log line, and "the next sync is full".
 *
 * The backend owns "the next sync is full" here (backend.ts says why): it is
 * needed before the first sync, after a failed one and whenever someone
 * asks (requireFullSync: the backend's cleanup, the loop after a failure only
 * it saw); a successful sync ends the need, unless it was asked for again
 * while that sync ran.
 */
export class SyncEnvelope<X extends object = object> {
  readonly #o: SyncEnvelopeOptions<X>;
  #fullNeeded = true;
  /** #asks: requireFullSync calls so far; a sync that succeeds ends the need only if none came while it ran. */
  #asks = 0;
  #lastFailed: FailedInput | null = null;
  #rulesByTable: Readonly<Record<string, number>> = {};

  constructor(opts: SyncEnvelopeOptions<X>) {
    this.#o = opts;
  }

  /** fullNeeded: the next sync is full whatever the loop asks. */
  get fullNeeded(): boolean {
    return this.#fullNeeded;
  }

  /** requireFullSync makes the next sync full (and every one after it until one succeeds). */
  requireFullSync(): void {
    this.#fullNeeded = true;
    this.#asks++;
  }

  /** lastFailedInput: the input of the last sync that failed after building it; null if none has. */
  lastFailedInput(): FailedInput | null {
    return this.#lastFailed;
  }

  /**
   * run runs one sync's build-and-write and returns its result. It never
   * throws: a failure comes back in result.error, with the time spent, the
   * inputs sent and the last successful sync's counts, and the next sync is
   * full.
   */
  async run(input: BackendSyncInput, write: (run: SyncRun<X>) => Promise<SyncWritten & X>): Promise<BackendSyncResult & Partial<X>> {
    const { clock, skipped } = this.#o;
    const t0 = clock.monotonic();
    const asks = this.#asks;
    const run = new SyncRun<X>(clock, input.forceFull || this.#fullNeeded);
    const buildMs = () => Math.max(0, clock.monotonic() - t0 - run.ioMs);
    try {
      const written = await write(run);
      if (this.#asks === asks) this.#fullNeeded = false;
      this.#rulesByTable = written.rulesByTable;
      const sent = run.input;
      return {
        ...written,
        full: run.full,
        buildMs: buildMs(),
        applyMs: run.ioMs,
        bytesWritten: sent === undefined ? 0 : Buffer.byteLength(sent),
        skippedServicePorts: skipped.snapshot(),
        // Nothing sent, nothing to show: the last input stays the one the kernel last took.
        ...(sent !== undefined ? { batch: sent } : {}),
        ...run.reported,
      };
    } catch (err) {
      // What this sync checked out is consumed: only a full sync can bring the kernel back in line.
      this.#fullNeeded = true;
      const error = this.#describe(err, run);
      const sent = run.input;
      if (sent !== undefined) this.#lastFailed = { input: sent, error, at: clock.now() };
      this.#o.failed?.(error, run);
      this.#o.logger.error(`${this.#o.name} sync failed; the next sync rewrites everything`, {
        full: run.full,
        ...(run.step ? { step: run.step } : {}),
        code: error.code,
        err: error.message,
      });
      return {
        full: run.full,
        buildMs: buildMs(),
        applyMs: run.ioMs,
        linesWritten: 0,
        bytesWritten: 0,
        servicesWritten: 0,
        // The kernel keeps what the last successful sync left.
        rulesByTable: this.#rulesByTable,
        error,
        ...(sent !== undefined ? { batch: sent } : {}),
        ...run.reported,
      } as BackendSyncResult & Partial<X>;
    }
  }

  #describe(err: unknown, run: SyncRun<X>): KproxyError {
    const own = this.#o.describe?.(err, run);
    if (own) return own;
    if (err instanceof KproxyError) return err;
    return new SyncFailedError(`${this.#o.name} sync failed${run.step ? ` (${run.step})` : ''}: ${errorMessage(err)}`, { cause: err });
  }
}

import type { Clock, TimerHandle } from '../clock.ts';
import { errorMessage, EventRecordError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { describeRef, type EventRecorder, type EventType, type ObjectReference } from './event-recorder.ts';
import { httpStatus, type EventObject, type EventSink } from './event-sink.ts';

export interface KubeEventRecorderOptions {
  sink: EventSink;
  /** reportingInstance: this kproxy (the node name). */
  reportingInstance: string;
  /** reportingController: default "kproxy". */
  reportingController?: string;
  clock: Clock;
  logger: Logger;
  /** finishMs: an event not repeated for this long leaves the cache; a series gets its final count written (client-go: 6 min). */
  finishMs?: number;
  /** refreshMs: open series are rewritten this often, keeping their count current (client-go: 30 min). */
  refreshMs?: number;
  /** retryMs: pause before retrying a write the server did not answer (jittered; client-go: 10 s). */
  retryMs?: number;
  /** maxTries: attempts per write before giving up (client-go: 12). */
  maxTries?: number;
  /** maxQueued: writes waiting beyond this are dropped and counted (client-go: 1000). */
  maxQueued?: number;
  /** maxCached: distinct events remembered for aggregation. */
  maxCached?: number;
  random?: () => number;
}

export interface KubeEventRecorderCounters {
  recorded: number;
  /** aggregated: repeats folded into a series instead of a new Event. */
  aggregated: number;
  created: number;
  patched: number;
  retries: number;
  /** failed: writes the server refused or that still failed after maxTries. */
  failed: number;
  /** dropped: writes lost because the queue was full. */
  dropped: number;
}

interface CacheEntry {
  event: EventObject;
  lastSeen: number;
  /** dirty: the series count changed since it was last written. */
  dirty: boolean;
}

type Job = { op: 'create'; event: EventObject } | { op: 'series'; key: string; event: EventObject };

const NOTE_MAX_BYTES = 1024;
const FIELD_MAX = 128;

/** microTime renders epoch ms as the API server's MicroTime (RFC 3339, six fraction digits). */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/Z$/, '000Z');
}

function truncate(s: string, maxBytes: number): string {
  if (Buffer.byteLength(s) <= maxBytes) return s;
  let out = s.slice(0, maxBytes);
  while (Buffer.byteLength(out) > maxBytes - 3) out = out.slice(0, -1);
  return out + '...';
}

/**
 * KubeEventRecorder writes events.k8s.io/v1 Events the way client-go's events
 * recorder does: the first occurrence is created; a repeat (same type, reason,
 * action and regarding object) turns it into a series, written at once with
 * count 2, and later repeats only raise the count, written when the series is
 * refreshed or finishes. Writes go through one queue in the background with
 * jittered retries, so record() never blocks or throws; lost events are logged
 * and counted (what breaks: `kubectl get events` misses them, nothing else).
 */
export class KubeEventRecorder implements EventRecorder {
  readonly #o: Required<Omit<KubeEventRecorderOptions, 'random'>>;
  readonly #random: () => number;
  readonly #cache = new Map<string, CacheEntry>();
  readonly #queue: Job[] = [];
  #pumping: Promise<void> | null = null;
  #nameSeq = 0;
  #stopped = false;
  readonly #timers = new Set<TimerHandle>();
  #sleepWake: (() => void) | null = null;
  readonly counters: KubeEventRecorderCounters = { recorded: 0, aggregated: 0, created: 0, patched: 0, retries: 0, failed: 0, dropped: 0 };

  constructor(opts: KubeEventRecorderOptions) {
    this.#o = {
      reportingController: 'kproxy',
      finishMs: 6 * 60_000,
      refreshMs: 30 * 60_000,
      retryMs: 10_000,
      maxTries: 12,
      maxQueued: 1000,
      maxCached: 4096,
      ...opts,
    };
    this.#random = opts.random ?? Math.random;
    this.#every(this.#o.finishMs, () => this.#finishSeries());
    this.#every(this.#o.refreshMs, () => this.#refreshSeries());
  }

  record(regarding: ObjectReference, type: EventType, reason: string, action: string, note: string): void {
    if (this.#stopped) return;
    this.counters.recorded++;
    const now = this.#o.clock.now();
    const ref = { ...regarding, namespace: regarding.namespace ?? '' };
    const key = JSON.stringify([type, truncate(reason, FIELD_MAX), truncate(action, FIELD_MAX), ref.kind, ref.namespace, ref.name, ref.uid ?? '', ref.apiVersion ?? '']);
    const known = this.#cache.get(key);
    if (known) {
      this.counters.aggregated++;
      known.lastSeen = now;
      if (known.event.series) {
        known.event.series = { count: known.event.series.count + 1, lastObservedTime: microTime(now) };
        known.dirty = true;
        return;
      }
      known.event.series = { count: 2, lastObservedTime: microTime(now) };
      this.#enqueue({ op: 'series', key, event: structuredClone(known.event) });
      return;
    }
    const event: EventObject = {
      apiVersion: 'events.k8s.io/v1',
      kind: 'Event',
      // Named like client-go: the object's name and the time in hex nanoseconds (plus a counter: unique within one ms).
      metadata: { name: `${ref.name}.${(BigInt(now) * 1_000_000n + BigInt(this.#nameSeq++ % 1_000_000)).toString(16)}`, namespace: ref.namespace || 'default' },
      eventTime: microTime(now),
      reportingController: this.#o.reportingController,
      reportingInstance: this.#o.reportingInstance,
      action: truncate(action, FIELD_MAX),
      reason: truncate(reason, FIELD_MAX),
      note: truncate(note, NOTE_MAX_BYTES),
      type,
      regarding: ref,
    };
    this.#cache.set(key, { event, lastSeen: now, dirty: false });
    if (this.#cache.size > this.#o.maxCached) this.#cache.delete(this.#cache.keys().next().value!);
    this.#enqueue({ op: 'create', event: structuredClone(event) });
  }

  /** queued: writes waiting (including the one in flight). */
  get queued(): number {
    return this.#queue.length + (this.#pumping ? 1 : 0);
  }

  /** flush resolves once every queued write has been attempted (tests, shutdown). */
  async flush(): Promise<void> {
    while (this.#pumping) await this.#pumping;
  }

  /** stop drops pending writes and timers; later record() calls do nothing. */
  stop(): void {
    this.#stopped = true;
    for (const t of this.#timers) this.#o.clock.clearTimeout(t);
    this.#timers.clear();
    this.#queue.length = 0;
    this.#sleepWake?.();
  }

  #every(ms: number, fn: () => void): void {
    const arm = () => {
      const t = this.#o.clock.setTimeout(() => {
        this.#timers.delete(t);
        if (this.#stopped) return;
        fn();
        arm();
      }, ms);
      this.#timers.add(t);
    };
    arm();
  }

  #finishSeries(): void {
    const cutoff = this.#o.clock.now() - this.#o.finishMs;
    for (const [key, entry] of this.#cache) {
      if (entry.lastSeen > cutoff) continue;
      this.#cache.delete(key);
      if (entry.event.series && entry.dirty) this.#enqueue({ op: 'series', key, event: structuredClone(entry.event) });
    }
  }

  #refreshSeries(): void {
    for (const [key, entry] of this.#cache) {
      if (!entry.event.series || !entry.dirty) continue;
      entry.dirty = false;
      this.#enqueue({ op: 'series', key, event: structuredClone(entry.event) });
    }
  }

  #enqueue(job: Job): void {
    if (this.#queue.length >= this.#o.maxQueued) {
      this.counters.dropped++;
      this.#o.logger.warn('event queue full, dropping an event', { object: describeRef(job.event.regarding), reason: job.event.reason, queued: this.#queue.length });
      return;
    }
    if (job.op === 'series') {
      const entry = this.#cache.get(job.key);
      if (entry) entry.dirty = false;
      // One pending series write per event is enough: it reads the latest count when it runs.
      const pending = this.#queue.find((j) => j.op === 'series' && j.key === job.key);
      if (pending) {
        pending.event = job.event;
        return;
      }
    }
    this.#queue.push(job);
    this.#pumping ??= this.#pump().finally(() => (this.#pumping = null));
  }

  async #pump(): Promise<void> {
    for (let job = this.#queue.shift(); job && !this.#stopped; job = this.#queue.shift()) {
      try {
        await this.#deliver(job);
      } catch (err) {
        // #deliver handles sink failures; anything else is a bug that must not stop the queue.
        this.counters.failed++;
        this.#o.logger.error('event delivery failed unexpectedly', { error: errorMessage(err) });
      }
    }
  }

  async #deliver(job: Job): Promise<void> {
    const ev = job.event;
    for (let attempt = 1; ; attempt++) {
      let err: unknown;
      try {
        if (job.op === 'series') {
          const latest = this.#cache.get(job.key)?.event.series ?? ev.series!;
          try {
            await this.#o.sink.patch(ev.metadata.namespace, ev.metadata.name, { series: latest });
            this.counters.patched++;
            return;
          } catch (patchErr) {
            // The Event is gone (expired, or its create was lost): write it whole, series included.
            if (httpStatus(patchErr) !== 404) throw patchErr;
            await this.#o.sink.create(ev.metadata.namespace, { ...ev, series: latest });
          }
        } else {
          await this.#o.sink.create(ev.metadata.namespace, ev);
        }
        this.counters.created++;
        return;
      } catch (e) {
        err = e;
      }
      const status = httpStatus(err);
      // A 409 on a plain create means it is already there; on a series create, the create raced a patch: retry.
      if (status === 409 && job.op === 'create') return;
      const retriable = status === undefined || status >= 500 || status === 429 || status === 409;
      if (!retriable) {
        this.counters.failed++;
        const e = new EventRecordError(`Event ${ev.reason} on ${describeRef(ev.regarding)} refused by the API server (HTTP ${status})`, { cause: err });
        this.#o.logger.warn(errorMessage(e), { code: e.code });
        return;
      }
      if (attempt >= this.#o.maxTries) {
        this.counters.failed++;
        const e = new EventRecordError(`Event ${ev.reason} on ${describeRef(ev.regarding)} not written after ${attempt} attempts`, { cause: err });
        this.#o.logger.warn(errorMessage(e), { code: e.code });
        return;
      }
      this.counters.retries++;
      this.#o.logger.debug('event write failed, retrying', { object: describeRef(ev.regarding), reason: ev.reason, attempt, error: errorMessage(err) });
      await this.#sleep(this.#o.retryMs * (0.75 + 0.5 * this.#random()));
      if (this.#stopped) return;
    }
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = this.#o.clock.setTimeout(() => {
        this.#timers.delete(t);
        this.#sleepWake = null;
        resolve();
      }, ms);
      this.#timers.add(t);
      this.#sleepWake = resolve;
    });
  }
}

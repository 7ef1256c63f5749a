import type { Clock } from '../clock.ts';
import { errorMessage } from '../errors.ts';
import type { Logger } from '../log.ts';
import { describeRef, type EventRecorder, type EventType, type ObjectReference, type RecordedEvent } from './event-recorder.ts';

export interface MemoryEventRecorderOptions {
  clock: Clock;
  logger: Logger;
  /** capacity: how many recent events are kept (older ones fall off). */
  capacity?: number;
}

export type EventListener = (event: RecordedEvent) => void;

/**
 * MemoryEventRecorder keeps the most recent events in a ring buffer for the
 * dashboard, streams each new one to its listeners, and logs it (Normal at
 * info, Warning at warn), so events are visible even without an API server.
 */
export class MemoryEventRecorder implements EventRecorder {
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #capacity: number;
  readonly #ring: RecordedEvent[] = [];
  /** #head: index of the oldest event once the ring is full. */
  #head = 0;
  #seq = 0;
  readonly #listeners = new Set<EventListener>();
  /** listenerErrors: listeners that threw (a dashboard bug; logged, never reaches the recorder's caller). */
  listenerErrors = 0;

  constructor(opts: MemoryEventRecorderOptions) {
    this.#clock = opts.clock;
    this.#log = opts.logger;
    this.#capacity = Math.max(1, opts.capacity ?? 500);
  }

  record(regarding: ObjectReference, type: EventType, reason: string, action: string, note: string): void {
    const event: RecordedEvent = { seq: ++this.#seq, time: this.#clock.now(), regarding: { ...regarding }, type, reason, action, note };
    if (this.#ring.length < this.#capacity) this.#ring.push(event);
    else {
      this.#ring[this.#head] = event;
      this.#head = (this.#head + 1) % this.#capacity;
    }
    const fields = { object: describeRef(regarding), reason, action, note: note || undefined };
    if (type === 'Warning') this.#log.warn('event', fields);
    else this.#log.info('event', fields);
    for (const fn of this.#listeners) {
      try {
        fn(event);
      } catch (err) {
        this.listenerErrors++;
        this.#log.error('event listener failed', { error: errorMessage(err) });
      }
    }
  }

  /** total: events recorded since start (including those that fell off the ring). */
  get total(): number {
    return this.#seq;
  }

  /** recent returns up to `limit` newest events, oldest first; `afterSeq` keeps only newer ones. */
  recent(opts: { limit?: number; afterSeq?: number } = {}): RecordedEvent[] {
    const ordered = [...this.#ring.slice(this.#head), ...this.#ring.slice(0, this.#head)];
    const newer = opts.afterSeq === undefined ? ordered : ordered.filter((e) => e.seq > opts.afterSeq!);
    return opts.limit === undefined ? newer : newer.slice(Math.max(0, newer.length - opts.limit));
  }

  /** onEvent subscribes to new events; the returned function unsubscribes. */
  onEvent(fn: EventListener): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }
}

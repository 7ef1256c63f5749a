import type { EventObject, EventSink, SeriesPatch } from './event-sink.ts';

/** SinkFailure is what the fake answers instead of succeeding: an HTTP status, or unreachable. */
export type SinkFailure = { status: number } | 'unreachable';

/**
 * FakeEventSink is an in-memory EventSink: it stores events by namespace/name,
 * applies series patches, answers 409 for a duplicate create and 404 for a patch
 * of an unknown event like the API server, and fails on demand.
 */
export class FakeEventSink implements EventSink {
  readonly events = new Map<string, EventObject>();
  readonly calls: { op: 'create' | 'patch'; namespace: string; name: string; body: unknown }[] = [];
  readonly #failures: SinkFailure[] = [];

  /** failNext makes the next calls fail, one failure per call, in order. */
  failNext(...failures: SinkFailure[]): void {
    this.#failures.push(...failures);
  }

  async create(namespace: string, event: EventObject): Promise<void> {
    this.calls.push({ op: 'create', namespace, name: event.metadata.name, body: structuredClone(event) });
    this.#maybeFail();
    const key = `${namespace}/${event.metadata.name}`;
    if (this.events.has(key)) throw Object.assign(new Error(`events "${event.metadata.name}" already exists`), { code: 409 });
    this.events.set(key, structuredClone(event));
  }

  async patch(namespace: string, name: string, patch: SeriesPatch): Promise<void> {
    this.calls.push({ op: 'patch', namespace, name, body: structuredClone(patch) });
    this.#maybeFail();
    const stored = this.events.get(`${namespace}/${name}`);
    if (!stored) throw Object.assign(new Error(`events "${name}" not found`), { code: 404 });
    stored.series = { ...patch.series };
  }

  #maybeFail(): void {
    const f = this.#failures.shift();
    if (!f) return;
    if (f === 'unreachable') throw new TypeError('fetch failed', { cause: new Error('connect ECONNREFUSED 127.0.0.1:6443') });
    throw Object.assign(new Error(`injected HTTP ${f.status}`), { code: f.status });
  }
}

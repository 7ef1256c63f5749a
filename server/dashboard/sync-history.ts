import type { SyncRecord } from '../proxy/sync-loop.ts';
import type { SyncEntry } from './protocol.ts';

/** CHANGED_LISTED: changed services named per history row. */
const CHANGED_LISTED = 10;

/** syncEntry turns a SyncRecord into a history row. */
export function syncEntry(r: SyncRecord, input?: SyncEntry['input']): SyncEntry {
  return {
    seq: r.seq,
    family: r.family,
    trigger: r.trigger,
    startedAt: r.startedAt,
    finishedAt: r.finishedAt,
    full: r.full,
    ok: r.ok,
    durationMs: r.durationMs,
    buildMs: r.buildMs,
    applyMs: r.applyMs,
    linesWritten: r.linesWritten,
    bytesWritten: r.bytesWritten,
    servicesChanged: r.servicesChangedCount,
    changed: r.servicesChanged.slice(0, CHANGED_LISTED),
    servicePorts: r.servicePorts,
    endpoints: r.endpoints,
    programmingMs: r.networkProgrammingMs.length ? Math.max(...r.networkProgrammingMs) : null,
    ...(r.error ? { error: { code: r.error.code, message: r.error.message } } : {}),
    ...(input ? { input } : {}),
    ...(r.verify ? { verify: r.verify } : {}),
  };
}

/**
 * SyncHistory is a ring buffer of the most recent syncs, oldest first. Only
 * the newest successful and the newest failed sync keep a downloadable input
 * (the kernel inputs are big: tens of MB on a large node).
 */
export class SyncHistory {
  readonly #capacity: number;
  #rows: SyncEntry[] = [];
  #failures = 0;

  constructor(capacity = 300) {
    this.#capacity = Math.max(1, capacity);
  }

  /** add records a sync; hasInput: its restore input is kept for download. */
  add(record: SyncRecord, hasInput: boolean): SyncEntry {
    const input = hasInput ? (record.ok ? 'last' : 'failed') : undefined;
    // The previous holder of this download slot loses it.
    if (input) this.#rows = this.#rows.map((r) => (r.input === input ? withoutInput(r) : r));
    const entry = syncEntry(record, input);
    this.#rows.push(entry);
    if (this.#rows.length > this.#capacity) this.#rows.splice(0, this.#rows.length - this.#capacity);
    if (!record.ok) this.#failures++;
    return entry;
  }

  entries(limit?: number): readonly SyncEntry[] {
    return limit === undefined ? this.#rows : this.#rows.slice(Math.max(0, this.#rows.length - limit));
  }

  get last(): SyncEntry | null {
    return this.#rows.at(-1) ?? null;
  }

  /** failures: failed syncs since start (including those that fell off the ring). */
  get failures(): number {
    return this.#failures;
  }
}

function withoutInput(r: SyncEntry): SyncEntry {
  const { input: _input, ...rest } = r;
  return rest;
}

import type { ActionResult, DriftReport, EventEntry, Overview, ServerMessage, ServiceDetail, ServiceSummary, SyncEntry, Viewer, WatchedCounters } from './protocol.ts';

/** MAX_SYNCS / MAX_EVENTS: what the browser keeps of the history. */
export const MAX_SYNCS = 300;
export const MAX_EVENTS = 200;

/** mergeServices applies a delta to the sorted service list, returning a new array (O(n) copy, O(log n) per key). */
export function mergeServices(list: readonly ServiceSummary[], upserts: readonly ServiceSummary[], removed: readonly string[]): ServiceSummary[] {
  if (upserts.length === 0 && removed.length === 0) return list as ServiceSummary[];
  const out = list.slice();
  const find = (key: string) => {
    let lo = 0;
    let hi = out.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (out[mid].key < key) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  for (const key of removed) {
    const i = find(key);
    if (out[i]?.key === key) out.splice(i, 1);
  }
  for (const s of upserts) {
    const i = find(s.key);
    if (out[i]?.key === s.key) out[i] = s;
    else out.splice(i, 0, s);
  }
  return out;
}

/**
 * DashboardStore is the browser's copy of the dashboard state, fed by the
 * live stream. Big collections are $state.raw and replaced whole on change,
 * so Svelte tracks one reference instead of 10,000 proxied objects.
 */
export class DashboardStore {
  overview = $state.raw<Overview | null>(null);
  services = $state.raw<readonly ServiceSummary[]>([]);
  syncs = $state.raw<readonly SyncEntry[]>([]);
  events = $state.raw<readonly EventEntry[]>([]);
  drift = $state.raw<DriftReport | null>(null);
  viewer = $state.raw<Viewer | null>(null);
  lastAction = $state.raw<ActionResult | null>(null);
  /** detail: the watched service's page; counters: its live counters. */
  detail = $state.raw<{ key: string; detail: ServiceDetail | null } | null>(null);
  counters = $state.raw<WatchedCounters | null>(null);
  /** receivedAt: when the last message arrived, in browser time (ages are measured against it). */
  receivedAt = $state(0);
  /** overviewAt: browser time when the overview arrived (its "now" is the server's time then). */
  overviewAt = $state(0);
  snapshots = $state(0);

  readonly lastSync = $derived(this.syncs.at(-1) ?? null);
  readonly failures = $derived(this.syncs.filter((s) => !s.ok).length);

  apply(m: ServerMessage, now = Date.now()): void {
    this.receivedAt = now;
    if (m.type === 'snapshot' || m.type === 'sync' || m.type === 'counters') this.overviewAt = now;
    switch (m.type) {
      case 'snapshot':
        this.viewer = m.viewer;
        this.overview = m.overview;
        this.services = m.services;
        this.syncs = m.syncs.slice(-MAX_SYNCS);
        this.events = m.events.slice(-MAX_EVENTS);
        this.drift = m.drift;
        this.lastAction = m.lastAction;
        this.snapshots++;
        break;
      case 'sync':
        this.overview = m.overview;
        this.services = mergeServices(this.services, m.services, m.removed);
        // Only the newest accepted and the newest refused sync keep a downloadable input.
        this.syncs = [...this.syncs.filter((s) => s.seq !== m.sync.seq).map((s) => (m.sync.input && s.input === m.sync.input ? { ...s, input: undefined } : s)), m.sync].slice(-MAX_SYNCS);
        break;
      case 'counters':
        this.overview = m.overview;
        this.drift = m.drift;
        if (m.watched) this.counters = m.watched;
        break;
      case 'event':
        this.events = [...this.events, m.event].slice(-MAX_EVENTS);
        break;
      case 'action':
        this.lastAction = m.result;
        if (this.overview) this.overview = { ...this.overview, paused: m.result.paused };
        break;
      case 'service':
        this.detail = { key: m.key, detail: m.detail };
        if (this.counters?.service !== m.key) this.counters = null;
        break;
    }
  }

  /** serverNow estimates the server's clock now (ages of server times read right even if clocks differ). */
  serverNow(now = Date.now()): number {
    return this.overview ? this.overview.now + (now - this.overviewAt) : now;
  }
}

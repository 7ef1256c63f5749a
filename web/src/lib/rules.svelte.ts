import type { Api } from './api.ts';
import type { RowsPage, Row } from './protocol.ts';

/** PAGE: rows fetched per request; a screen shows ~40, so one request covers several screens. */
export const PAGE = 200;

export interface RowsSource {
  rows(table: string, offset: number, limit: number, q: string, drift: boolean): Promise<RowsPage>;
  chainRow(table: string, chain: string, q: string, drift: boolean): Promise<number | null>;
}

/** apiRowsSource reads the Rules page's rows from /api/v1/tables. */
export function apiRowsSource(api: Api): RowsSource {
  const qs = (q: string, drift: boolean) => `${q ? `&q=${encodeURIComponent(q)}` : ''}${drift ? '&drift=true' : ''}`;
  return {
    rows: (table, offset, limit, q, drift) => api.get<RowsPage>(`tables/${encodeURIComponent(table)}/rows?offset=${offset}&limit=${limit}${qs(q, drift)}`),
    chainRow: async (table, chain, q, drift) => {
      try {
        return (await api.get<{ row: number }>(`tables/${encodeURIComponent(table)}/chains/${encodeURIComponent(chain)}?x=1${qs(q, drift)}`)).row;
      } catch {
        return null;
      }
    },
  };
}

/**
 * TableView is the Rules page's window on a table: the server holds the rows
 * (300,000 on a big node), the browser fetches pages of PAGE rows as they
 * scroll into view and forgets them when the view changes. `version` bumps
 * when a page arrives, so the list re-renders.
 */
export class TableView {
  total = $state(-1);
  readAt = $state<number | null>(null);
  loading = $state(false);
  error = $state<string | null>(null);
  version = $state(0);
  readonly #pages = new Map<number, readonly Row[]>();
  readonly #inflight = new Set<number>();
  readonly #src: RowsSource;
  #key = '';
  table = '';
  q = '';
  drift = false;

  constructor(src: RowsSource) {
    this.#src = src;
  }

  /** show switches table or filter; it resets the pages and loads the first one. */
  async show(table: string, q: string, drift: boolean): Promise<void> {
    const key = `${table}\u0000${q}\u0000${drift}`;
    if (key === this.#key) return;
    this.#key = key;
    this.table = table;
    this.q = q;
    this.drift = drift;
    this.#pages.clear();
    this.#inflight.clear();
    this.total = -1;
    this.error = null;
    await this.#load(0, key);
  }

  /** refresh drops the cached pages (the kernel was read again) and reloads the ones in view. */
  async refresh(start: number, end: number): Promise<void> {
    this.#pages.clear();
    await this.ensure(start, end);
  }

  row(i: number): Row | undefined {
    return this.#pages.get(Math.floor(i / PAGE))?.[i % PAGE];
  }

  /** ensure loads the pages holding rows start..end. */
  async ensure(start: number, end: number): Promise<void> {
    const key = this.#key;
    const jobs: Promise<void>[] = [];
    for (let p = Math.floor(start / PAGE); p <= Math.floor(Math.max(start, end - 1) / PAGE); p++) {
      if (!this.#pages.has(p) && !this.#inflight.has(p) && (this.total < 0 || p * PAGE < this.total)) jobs.push(this.#load(p, key));
    }
    await Promise.all(jobs);
  }

  async #load(page: number, key: string): Promise<void> {
    this.#inflight.add(page);
    this.loading = true;
    try {
      const res = await this.#src.rows(this.table, page * PAGE, PAGE, this.q, this.drift);
      if (key !== this.#key) return;
      this.#pages.set(page, res.rows);
      this.total = res.total;
      this.readAt = res.readAt;
      this.error = null;
      this.version++;
    } catch (err) {
      if (key === this.#key) this.error = (err as Error).message;
    } finally {
      this.#inflight.delete(page);
      this.loading = this.#inflight.size > 0;
    }
  }

  /** locate finds the row of a chain's header in the current view, or null. */
  locate(chain: string): Promise<number | null> {
    return this.#src.chainRow(this.table, chain, this.q, this.drift);
  }
}

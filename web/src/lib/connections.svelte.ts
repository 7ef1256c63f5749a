import type { Api } from './api.ts';
import type { ConnectionRow, ConnectionsPage } from './protocol.ts';

/** PAGE: rows asked for per request (the server allows up to 500). */
const PAGE = 200;

/**
 * ConnectionsView holds the window of the relay's open connections the page
 * shows: GET /api/v1/connections for the rows around what is scrolled into
 * view, for one search, refreshed by the page's timer. Rows outside the last
 * answered window are undefined (the list draws them as loading).
 */
export class ConnectionsView {
  readonly #api: Api;
  readonly #q: string;
  /** open: every open connection; total: those matching the search. */
  open = $state(0);
  total = $state(0);
  at = $state<number | null>(null);
  error = $state<string | null>(null);
  loading = $state(false);
  #offset = 0;
  rows = $state.raw<readonly ConnectionRow[]>([]);
  #want = { start: 0, end: PAGE };
  #inFlight: Promise<void> | null = null;

  constructor(api: Api, q: string) {
    this.#api = api;
    this.#q = q;
  }

  /** row is the connection at index i of the search's result, if it is in the window. */
  row(i: number): ConnectionRow | undefined {
    return i >= this.#offset && i < this.#offset + this.rows.length ? this.rows[i - this.#offset] : undefined;
  }

  /** show asks for rows start..end (the list's visible range); they are fetched if not in the window. */
  show(start: number, end: number): Promise<void> {
    this.#want = { start, end };
    if (start >= this.#offset && end <= this.#offset + this.rows.length) return Promise.resolve();
    return this.refresh();
  }

  /** refresh fetches the window around the wanted range again (new connections, closed ones, moved bytes). */
  refresh(): Promise<void> {
    this.#inFlight ??= this.#fetch().finally(() => (this.#inFlight = null));
    return this.#inFlight;
  }

  async #fetch(): Promise<void> {
    const offset = Math.max(0, Math.floor(this.#want.start / PAGE) * PAGE);
    const limit = Math.min(500, Math.max(PAGE, this.#want.end - offset));
    this.loading = true;
    try {
      const page = await this.#api.get<ConnectionsPage>(`connections?${new URLSearchParams({ q: this.#q, offset: String(offset), limit: String(limit) })}`);
      this.#offset = page.offset;
      this.rows = page.rows;
      this.open = page.open;
      this.total = page.total;
      this.at = page.at;
      this.error = null;
    } catch (err) {
      this.error = (err as Error).message;
    } finally {
      this.loading = false;
    }
  }
}

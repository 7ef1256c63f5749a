import { ApiError, type Api } from './api.ts';
import type { TraceResult } from './protocol.ts';
import type { TraceForm } from './router.svelte.ts';
import { traceSearch } from './trace-view.ts';

/**
 * TraceRun is the Trace page's state: the last packet asked about and the
 * answer of GET /api/v1/trace (or why there is none: a field the server
 * named, a busy dashboard). A newer question wins over an older answer.
 */
export class TraceRun {
  result = $state.raw<TraceResult | null>(null);
  error = $state.raw<{ message: string; code: string; status: number } | null>(null);
  loading = $state(false);
  #asked = '';
  readonly #api: Pick<Api, 'get'>;

  constructor(api: Pick<Api, 'get'>) {
    this.#api = api;
  }

  /** asked: the query of the answer (or error) shown. */
  get asked(): string {
    return this.#asked;
  }

  async run(form: TraceForm): Promise<void> {
    const q = traceSearch(form);
    this.#asked = q;
    this.loading = true;
    try {
      const r = await this.#api.get<TraceResult>(`trace?${q}`);
      if (q !== this.#asked) return;
      this.result = r;
      this.error = null;
    } catch (err) {
      if (q !== this.#asked) return;
      this.result = null;
      this.error = err instanceof ApiError ? { message: err.message, code: err.code, status: err.status } : { message: (err as Error).message, code: 'ERROR', status: 0 };
    } finally {
      if (q === this.#asked) this.loading = false;
    }
  }
}

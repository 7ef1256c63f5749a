import { Api, ApiError, type FetchFn } from './api.ts';
import type { Viewer } from './protocol.ts';

export type SessionStatus = 'checking' | 'login' | 'ready' | 'error';

/** TOKEN_KEY: where the token is kept, in sessionStorage (gone when the tab closes, never sent to other sites). */
export const TOKEN_KEY = 'kproxy.dashboard.token';

/**
 * Session is who the browser is to the dashboard: the bearer token typed in
 * the login form, and the viewer the server answered /whoami with. Without
 * auth on the server, /whoami answers at once and no login is shown.
 */
export class Session {
  status = $state<SessionStatus>('checking');
  viewer = $state.raw<Viewer | null>(null);
  error = $state<string | null>(null);
  token = $state<string | null>(null);
  readonly api: Api;
  readonly #storage: Pick<Storage, 'getItem' | 'setItem' | 'removeItem'> | null;

  constructor(storage: Pick<Storage, 'getItem' | 'setItem' | 'removeItem'> | null, fetchFn?: FetchFn) {
    this.#storage = storage;
    this.token = storage?.getItem(TOKEN_KEY) ?? null;
    this.api = new Api(() => this.token, fetchFn);
  }

  /** check asks the server who we are with the stored token (or none). */
  async check(): Promise<void> {
    this.status = 'checking';
    try {
      this.viewer = await this.api.get<Viewer>('whoami');
      this.status = 'ready';
      this.error = null;
    } catch (err) {
      if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
        this.status = 'login';
        this.error = this.token ? err.message : null;
        if (err.status === 401) this.#forget();
      } else {
        this.status = 'error';
        this.error = (err as Error).message;
      }
    }
  }

  /** login tries a token; it is kept only when the server accepts it. */
  async login(token: string): Promise<boolean> {
    this.token = token.trim();
    await this.check();
    if (this.status === 'ready') {
      this.#storage?.setItem(TOKEN_KEY, this.token);
      return true;
    }
    if (this.status === 'login') this.error ??= 'the server refused this token';
    return false;
  }

  logout(): void {
    this.#forget();
    this.viewer = null;
    this.status = 'login';
    this.error = null;
  }

  #forget(): void {
    this.token = null;
    this.#storage?.removeItem(TOKEN_KEY);
  }
}

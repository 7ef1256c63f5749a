/** ApiError is a refused or failed API call, with the server's error code when it sent one. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export type FetchFn = (input: string, init?: RequestInit) => Promise<Response>;

/**
 * Api calls /api/v1 with the bearer token (when there is one). Relative URLs
 * keep the app working behind a port-forward or a path prefix.
 */
export class Api {
  readonly #token: () => string | null;
  readonly #fetch: FetchFn;

  constructor(token: () => string | null, fetchFn: FetchFn = (i, init) => fetch(i, init)) {
    this.#token = token;
    this.#fetch = fetchFn;
  }

  #headers(extra: Record<string, string> = {}): Record<string, string> {
    const t = this.#token();
    return t ? { ...extra, authorization: `Bearer ${t}` } : extra;
  }

  async #send(path: string, init: RequestInit): Promise<Response> {
    let res: Response;
    try {
      res = await this.#fetch(`api/v1/${path}`, init);
    } catch (err) {
      throw new ApiError(0, 'NETWORK', `kproxy did not answer: ${(err as Error).message}`);
    }
    return res;
  }

  async #json<T>(res: Response): Promise<T> {
    const body = (await res.json().catch(() => null)) as (T & { error?: { code: string; message: string } }) | null;
    if (!res.ok) {
      throw new ApiError(res.status, body?.error?.code ?? `HTTP_${res.status}`, body?.error?.message ?? `HTTP ${res.status}`);
    }
    return body as T;
  }

  async get<T>(path: string): Promise<T> {
    return this.#json<T>(await this.#send(path, { headers: this.#headers() }));
  }

  /**
   * post sends an action, always with a JSON body ({} when it has none: the
   * server takes writes with a JSON body only, which another site's page cannot
   * send); a refused or failed action throws ApiError with the server's code
   * (409 syncs paused, 429 rate limited, 500 failed), as any other error does.
   */
  async post<T>(path: string, body: object = {}): Promise<{ status: number; body: T }> {
    const init: RequestInit = { method: 'POST', headers: this.#headers({ 'content-type': 'application/json' }), body: JSON.stringify(body) };
    const res = await this.#send(path, init);
    return { status: res.status, body: await this.#json<T>(res) };
  }

  /** text fetches a download (restore inputs): the token travels in a header, so a plain link would not do. */
  async text(path: string): Promise<{ text: string; filename: string }> {
    const res = await this.#send(path, { headers: this.#headers() });
    if (!res.ok) await this.#json(res);
    const cd = res.headers.get('content-disposition') ?? '';
    const filename = /filename="([^"]+)"/.exec(cd)?.[1] ?? path.split('/').pop()!;
    return { text: await res.text(), filename };
  }
}

/** saveFile hands text to the browser as a download. */
export function saveFile(text: string, filename: string): void {
  const url = URL.createObjectURL(new Blob([text], { type: 'text/plain' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

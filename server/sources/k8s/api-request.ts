import type { KubeConfig } from '@kubernetes/client-node';
import type { ClientNode } from './client-node.ts';

/**
 * ApiStatusError is an answer of the API server other than 2xx. `code` is the
 * HTTP status, as on client-node's ApiException (the informers, the Event
 * recorder and the ServiceCIDR probe read it); the message is the server's
 * own (a Status object's message) when it sent one.
 */
export class ApiStatusError extends Error {
  readonly code: number;
  readonly body: string;
  constructor(method: string, path: string, code: number, body: string) {
    super(`${method} ${path}: HTTP ${code}: ${statusMessage(body)}`);
    this.name = 'ApiStatusError';
    this.code = code;
    this.body = body;
  }
}

function statusMessage(body: string): string {
  try {
    const status = JSON.parse(body) as { message?: unknown };
    if (typeof status?.message === 'string' && status.message !== '') return status.message;
  } catch {
    // Not a Status object: the body itself, shortened.
  }
  return body.length > 200 ? `${body.slice(0, 197)}...` : body || '(no body)';
}

export interface ApiRequestOptions {
  query?: Record<string, string | number | boolean | undefined>;
  /** body: sent as JSON. */
  body?: unknown;
  /** contentType of the body (default application/json; a strategic merge patch says so). */
  contentType?: string;
  signal?: AbortSignal;
}

/** ListPage is one page of a list: its items as the server sent them (plain JSON), its resourceVersion and continue token. */
interface ListPage {
  apiVersion?: string;
  kind?: string;
  metadata?: { resourceVersion?: string; continue?: string };
  items?: unknown[] | null;
}

/** PlainList is a whole list, every page's items in order, as the informers take it. */
export interface PlainList {
  apiVersion?: string;
  kind?: string;
  metadata: { resourceVersion?: string };
  items: unknown[];
}

/** LIST_PAGE: objects per list request, as client-go's reflector pages its lists (the list's text is never held whole). */
export const LIST_PAGE = 500;

/**
 * KubeApi makes plain JSON requests to the API server with the kubeconfig's
 * credentials (its TLS settings, token, exec or auth plugin), through the
 * client's own fetch. kproxy reads a few fields of what it lists: decoded as
 * plain JSON, a list of 20,000 objects takes a fraction of what the generated
 * clients' model classes take (client-node's ObjectSerializer), and none of
 * those classes is loaded.
 */
export class KubeApi {
  readonly #kc: KubeConfig;
  readonly #client: ClientNode;
  readonly #http: InstanceType<ClientNode['HttpLibrary']>;
  readonly #server: string;

  constructor(kubeConfig: KubeConfig, client: ClientNode) {
    this.#kc = kubeConfig;
    this.#client = client;
    this.#http = new client.HttpLibrary();
    this.#server = (kubeConfig.getCurrentCluster()?.server ?? '').replace(/\/+$/, '');
  }

  /** request sends one request and returns the decoded JSON answer; an answer other than 2xx rejects with ApiStatusError. */
  async request<T>(method: 'GET' | 'POST' | 'PATCH', path: string, o: ApiRequestOptions = {}): Promise<T> {
    const url = new URL(this.#server + path);
    for (const [k, v] of Object.entries(o.query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
    const ctx = new this.#client.RequestContext(url.toString(), this.#client.HttpMethod[method]);
    ctx.setHeaderParam('Accept', 'application/json');
    if (o.body !== undefined) {
      ctx.setHeaderParam('Content-Type', o.contentType ?? 'application/json');
      ctx.setBody(JSON.stringify(o.body));
    }
    if (o.signal) ctx.setSignal(o.signal);
    await this.#kc.applySecurityAuthentication(ctx);
    const res = await this.#http.send(ctx).toPromise();
    const text = await res.body.text();
    if (res.httpStatusCode < 200 || res.httpStatusCode > 299) throw new ApiStatusError(method, path, res.httpStatusCode, text);
    return (text === '' ? {} : JSON.parse(text)) as T;
  }

  /**
   * list lists a collection page by page (limit, continue) and returns the
   * whole list, each item through keep as its page arrives: only the kept
   * fields of the pages before are held while the next one is read. The next
   * page is asked for before this one's items go through keep, so the server
   * prepares it meanwhile (a first list of 20,000 objects waited for the
   * server as long as it worked). A continue token that expired (410) lists
   * again in one request, as client-go's pager does.
   */
  async list(path: string, query: Record<string, string | undefined>, keep: (item: unknown) => unknown): Promise<PlainList> {
    let items: unknown[] = [];
    let first: ListPage | null = null;
    let limit: number | undefined = LIST_PAGE;
    const ask = (next: string | undefined) => ({ page: this.request<ListPage>('GET', path, { query: { ...query, limit, continue: next } }), continued: next !== undefined });
    let pending = ask(undefined);
    for (;;) {
      let page: ListPage;
      try {
        page = await pending.page;
      } catch (err) {
        if (!(err instanceof ApiStatusError && err.code === 410 && pending.continued)) throw err;
        // The pages so far are of an expired snapshot: the whole list again, at once.
        items = [];
        limit = undefined;
        pending = ask(undefined);
        continue;
      }
      first ??= page;
      const next = page.metadata?.continue || undefined;
      if (next) {
        pending = ask(next);
        // Handled when awaited; until then this page's items are kept (synchronously), so it never goes unhandled.
        pending.page.catch(() => {});
      }
      for (const item of page.items ?? []) items.push(keep(item));
      if (!next) return { apiVersion: first.apiVersion, kind: first.kind, metadata: { resourceVersion: page.metadata?.resourceVersion }, items };
    }
  }
}

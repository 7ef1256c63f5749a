import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { eventFor, FakeStore, RESOURCES, type Change, type Obj, type Resource, type WatchEvent } from './fake-store.ts';
import { parseFieldSelector, parseLabelSelector, SelectorError, type Matcher } from './selectors.ts';

/** RecordedRequest is one request the fake server received. */
export interface RecordedRequest {
  readonly method: string;
  readonly path: string;
  readonly query: Readonly<Record<string, string>>;
  readonly watch: boolean;
  readonly authorization?: string;
  readonly at: number;
}

/** StoredEvent is an Event object the fake server holds (events.k8s.io/v1 or core v1). */
export interface StoredEvent {
  readonly api: 'events.k8s.io/v1' | 'v1';
  readonly namespace: string;
  object: Record<string, unknown>;
  /** patches: how many times it was patched (series updates). */
  patches: number;
}

/** IssuedToken is a token the fake TokenReview knows: whose it is and the audiences it was issued for. */
export interface IssuedToken {
  readonly user: { username: string; uid?: string; groups?: string[]; extra?: Record<string, string[]> };
  readonly audiences: readonly string[];
}

/** AccessRule grants verbs on a resource (RBAC-like) to users or groups, for SubjectAccessReview. */
export interface AccessRule {
  readonly users?: readonly string[];
  readonly groups?: readonly string[];
  readonly apiGroup: string;
  /** resource: "nodes" or "nodes/kproxy" (with its subresource), as RBAC writes it. */
  readonly resource: string;
  readonly verbs: readonly string[];
  readonly resourceNames?: readonly string[];
}

/** API_SERVER_AUDIENCE: the audience of tokens issued without --audience (kubectl create token's default). */
export const API_SERVER_AUDIENCE = 'https://kubernetes.default.svc.cluster.local';

interface Watcher {
  readonly resource: Resource;
  readonly match: Matcher;
  readonly bookmarks: boolean;
  readonly res: ServerResponse;
  timer?: NodeJS.Timeout;
}

interface Failure {
  method?: string;
  pathPrefix?: string;
  status: number;
  remaining: number;
}

const MICRO_TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$/;

function status(code: number, reason: string, message: string): Record<string, unknown> {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code };
}

const REASONS: Record<number, string> = {
  400: 'BadRequest',
  404: 'NotFound',
  409: 'AlreadyExists',
  410: 'Expired',
  415: 'UnsupportedMediaType',
  422: 'Invalid',
  500: 'InternalError',
  503: 'ServiceUnavailable',
};

/**
 * FakeApiServer is a Kubernetes API server on 127.0.0.1 that speaks the real
 * list/watch protocol for Services, EndpointSlices and Nodes (resourceVersion,
 * label and field selectors, chunked watch streams of JSON lines, BOOKMARK with
 * allowWatchBookmarks, ERROR 410 for compacted versions), accepts Event
 * writes, and answers TokenReviews (tokens issued for audiences) and
 * SubjectAccessReviews (RBAC-like rules). Tests mutate objects through it and break it on purpose: drop watch
 * connections, compact history, stall watches, fail requests, go down and come
 * back on the same port.
 */
export class FakeApiServer {
  readonly store = new FakeStore();
  readonly requests: RecordedRequest[] = [];
  readonly events: StoredEvent[] = [];
  /** tokens: what TokenReview authenticates (as `kubectl create token SA --audience A` issues them). */
  readonly tokens = new Map<string, IssuedToken>();
  /** accessRules: what SubjectAccessReview allows; decide, when it answers, overrides them (an authorizer webhook). */
  readonly accessRules: AccessRule[] = [];
  decide: ((spec: Record<string, any>) => boolean | undefined) | null = null;
  /** audienceAware: TokenReview answers status.audiences (every API server since 1.13; off: an old or odd authenticator). */
  audienceAware = true;
  /** reviews: the bodies of the TokenReviews and SubjectAccessReviews received. */
  readonly reviews: { kind: 'TokenReview' | 'SubjectAccessReview'; spec: Record<string, any> }[] = [];
  #server: Server | null = null;
  #port = 0;
  readonly #sockets = new Set<Socket>();
  readonly #watchers = new Set<Watcher>();
  readonly #failures: Failure[] = [];
  #stalled = false;
  /** #held: requests received while holding, answered when holding ends. */
  #held: (() => void)[] | null = null;
  readonly #unserved = new Set<Resource['plural']>();
  #expireContinue = false;

  constructor() {
    this.store.onChange((c) => this.#fanOut(c));
  }

  /** start listens on a random port of 127.0.0.1 (or the given one). */
  async start(port = 0): Promise<this> {
    const server = createServer((req, res) => this.#handle(req, res));
    server.on('connection', (s) => {
      this.#sockets.add(s);
      s.on('close', () => this.#sockets.delete(s));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
    this.#server = server;
    this.#port = (server.address() as { port: number }).port;
    return this;
  }

  get url(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  get up(): boolean {
    return this.#server !== null;
  }

  /** unserve makes the server answer 404 for a resource, as an older API server that does not know it. */
  unserve(plural: Resource['plural']): this {
    this.#unserved.add(plural);
    return this;
  }

  /** openWatches: watch streams currently open, optionally for one resource. */
  openWatches(plural?: Resource['plural']): number {
    return [...this.#watchers].filter((w) => !plural || w.resource.plural === plural).length;
  }

  /** goDown closes the listener and every connection: clients get refused until comeBack(). */
  async goDown(): Promise<void> {
    const server = this.#server;
    if (!server) return;
    this.#server = null;
    for (const w of this.#watchers) this.#endWatch(w, false);
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** comeBack listens again on the same port. */
  async comeBack(): Promise<void> {
    await this.start(this.#port);
  }

  async stop(): Promise<void> {
    await this.goDown();
  }

  /**
   * dropWatches ends every open watch: gracefully (the stream ends, as when the
   * server's watch timeout expires) or abruptly (the connection is reset).
   */
  dropWatches(opts: { abrupt?: boolean } = {}): number {
    const n = this.#watchers.size;
    for (const w of [...this.#watchers]) this.#endWatch(w, opts.abrupt ?? false);
    return n;
  }

  /** compact forgets history: a watch resuming from an older version gets ERROR 410. */
  compact(): void {
    this.store.compact();
  }

  /**
   * holdRequests: requests are accepted and never answered while on, as an API
   * server (or a load balancer before it) that takes connections and hangs;
   * a held request whose client goes away is forgotten; off answers the held
   * ones in order and serves normally again.
   */
  holdRequests(on: boolean): void {
    if (on) {
      this.#held ??= [];
      return;
    }
    const held = this.#held ?? [];
    this.#held = null;
    for (const answer of held) answer();
  }

  /** heldRequests: requests waiting for an answer while holding. */
  get heldRequests(): number {
    return this.#held?.length ?? 0;
  }

  /** stallWatches: open and new watches receive nothing (no events, no bookmarks), as a hung watch. */
  stallWatches(on: boolean): void {
    this.#stalled = on;
  }

  /** bookmark sends a BOOKMARK at the current version to every watch that allowed them. */
  bookmark(): number {
    if (this.#stalled) return 0;
    let sent = 0;
    for (const w of this.#watchers) {
      if (!w.bookmarks) continue;
      this.#send(w, { type: 'BOOKMARK', object: { kind: w.resource.kind, apiVersion: w.resource.apiVersion, metadata: { resourceVersion: String(this.store.resourceVersion) } } });
      sent++;
    }
    return sent;
  }

  /**
   * expireNextContinue: the next list request that carries a continue token is
   * answered 410 Expired, as the API server answers a token whose snapshot
   * etcd compacted away.
   */
  expireNextContinue(): void {
    this.#expireContinue = true;
  }

  /** failNext answers the next `count` matching requests with an error status. */
  failNext(opts: { method?: string; pathPrefix?: string; status: number; count?: number }): void {
    this.#failures.push({ method: opts.method, pathPrefix: opts.pathPrefix, status: opts.status, remaining: opts.count ?? 1 });
  }

  /** apply creates or updates a Service, EndpointSlice or Node (by its kind). */
  apply(obj: { kind?: string; metadata?: { name?: string } } & Record<string, unknown>): Obj {
    return this.store.apply(pluralOf(obj.kind), obj);
  }

  remove(kind: string, name: string, namespace?: string): boolean {
    return this.store.remove(pluralOf(kind), name, namespace);
  }

  /** lists / watches: recorded requests by kind. */
  listRequests(plural: Resource['plural']): RecordedRequest[] {
    return this.requests.filter((r) => r.method === 'GET' && !r.watch && r.path.endsWith(`/${plural}`));
  }

  watchRequests(plural: Resource['plural']): RecordedRequest[] {
    return this.requests.filter((r) => r.method === 'GET' && r.watch && r.path.endsWith(`/${plural}`));
  }

  #handle(req: IncomingMessage, res: ServerResponse): void {
    if (this.#held) {
      const answer = () => this.#handle(req, res);
      this.#held.push(answer);
      // A client that gives up takes its request with it.
      res.once('close', () => {
        if (this.#held && !res.writableFinished) this.#held = this.#held.filter((a) => a !== answer);
      });
      return;
    }
    const url = new URL(req.url ?? '/', 'http://fake');
    const query = Object.fromEntries(url.searchParams);
    const watch = query.watch === 'true' || query.watch === '1';
    this.requests.push({ method: req.method ?? 'GET', path: url.pathname, query, watch, authorization: req.headers.authorization, at: Date.now() });
    const failure = this.#failures.find((f) => f.remaining > 0 && (!f.method || f.method === req.method) && (!f.pathPrefix || url.pathname.startsWith(f.pathPrefix)));
    if (failure) {
      failure.remaining--;
      return this.#json(res, failure.status, status(failure.status, REASONS[failure.status] ?? 'InternalError', `injected failure for ${req.method} ${url.pathname}`));
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      try {
        this.#route(req, res, url, query, watch, Buffer.concat(chunks).toString('utf8'));
      } catch (err) {
        this.#json(res, 500, status(500, 'InternalError', String(err)));
      }
    });
  }

  #route(req: IncomingMessage, res: ServerResponse, url: URL, query: Record<string, string>, watch: boolean, body: string): void {
    const path = url.pathname;
    if (path === '/apis/authentication.k8s.io/v1/tokenreviews') return this.#tokenReview(req, res, body);
    if (path === '/apis/authorization.k8s.io/v1/subjectaccessreviews') return this.#accessReview(req, res, body);
    const ev = /^\/(api\/v1|apis\/events\.k8s\.io\/v1)\/namespaces\/([^/]+)\/events(?:\/([^/]+))?$/.exec(path);
    if (ev) return this.#events(req, res, ev[1] === 'api/v1' ? 'v1' : 'events.k8s.io/v1', ev[2], ev[3], body);
    for (const r of Object.values(RESOURCES)) {
      if (this.#unserved.has(r.plural)) continue;
      const all = path === `${r.prefix}/${r.plural}`;
      const ns = r.namespaced ? new RegExp(`^${r.prefix.replace(/\./g, '\\.')}/namespaces/([^/]+)/${r.plural}$`).exec(path) : null;
      if (!all && !ns) continue;
      if (req.method !== 'GET') return this.#json(res, 405, status(405, 'MethodNotAllowed', `${req.method} is not supported on ${path}`));
      let match: Matcher;
      try {
        const labels = parseLabelSelector(query.labelSelector);
        const fields = parseFieldSelector(query.fieldSelector, r.fields);
        const namespace = ns?.[1];
        match = (o) => (!namespace || (o.metadata as { namespace?: string }).namespace === namespace) && labels(o) && fields(o);
      } catch (err) {
        if (err instanceof SelectorError) return this.#json(res, 400, status(400, 'BadRequest', err.message));
        throw err;
      }
      return watch ? this.#watch(res, r, match, query) : this.#list(res, r, match, query);
    }
    this.#json(res, 404, status(404, 'NotFound', `the server could not find the requested resource (${req.method} ${path})`));
  }

  /**
   * #list answers a list, in pages when asked (limit, then the continue token
   * of each page, as the API server pages). Unlike the API server, later pages
   * come from the current objects rather than the first page's snapshot; the
   * resourceVersion stays the first page's.
   */
  #list(res: ServerResponse, r: Resource, match: Matcher, query: Record<string, string>): void {
    let start = 0;
    let rv: number | null = null;
    if (query.continue) {
      const token = decodeContinue(query.continue);
      if (!token || this.#expireContinue || this.store.tooOld(token.rv)) {
        this.#expireContinue = false;
        return this.#json(res, 410, status(410, 'Expired', 'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.'));
      }
      ({ start, rv } = token);
    }
    const limit = Number(query.limit) > 0 ? Number(query.limit) : undefined;
    // The stored objects, serialised before this returns: nothing can change them meanwhile.
    const { items: stored, resourceVersion, total } = this.store.list(r.plural, match, { start, limit, copy: false });
    rv ??= resourceVersion;
    // A real server leaves kind/apiVersion off the items of a typed list.
    const items = stored.map(({ kind: _kind, apiVersion: _apiVersion, ...item }) => item);
    const end = start + items.length;
    const more = end < total;
    const metadata = { resourceVersion: String(rv), ...(more ? { continue: encodeContinue({ rv, start: end }), remainingItemCount: total - end } : {}) };
    this.#json(res, 200, { kind: r.listKind, apiVersion: r.apiVersion, metadata, items });
  }

  #watch(res: ServerResponse, r: Resource, match: Matcher, query: Record<string, string>): void {
    const from = query.resourceVersion ? Number(query.resourceVersion) : 0;
    res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked', 'Cache-Control': 'no-cache, private' });
    res.flushHeaders();
    const w: Watcher = { resource: r, match, bookmarks: query.allowWatchBookmarks === 'true', res };
    if (Number.isNaN(from) || (from > 0 && this.store.tooOld(from))) {
      // As the API server: the stream opens, carries one ERROR with a 410 Status, and ends.
      const msg = `too old resource version: ${query.resourceVersion} (${this.store.compactedResourceVersion})`;
      res.end(JSON.stringify({ type: 'ERROR', object: status(410, 'Expired', msg) }) + '\n');
      return;
    }
    this.#watchers.add(w);
    res.on('close', () => this.#forget(w));
    const timeout = Number(query.timeoutSeconds);
    if (timeout > 0) w.timer = setTimeout(() => this.#endWatch(w, false), timeout * 1000);
    if (this.#stalled) return;
    if (from === 0) {
      // resourceVersion unset or "0": synthetic ADDED events for the current state first.
      for (const obj of this.store.list(r.plural, match).items) this.#send(w, { type: 'ADDED', object: obj });
    } else {
      for (const c of this.store.changesSince(r.plural, from)) {
        const e = eventFor(c, match);
        if (e) this.#send(w, e);
      }
    }
  }

  #fanOut(c: Change): void {
    if (this.#stalled) return;
    for (const w of this.#watchers) {
      if (w.resource.plural !== c.resource) continue;
      const e = eventFor(c, w.match);
      if (e) this.#send(w, e);
    }
  }

  #send(w: Watcher, e: WatchEvent): void {
    if (!w.res.writableEnded) w.res.write(JSON.stringify(e) + '\n');
  }

  #endWatch(w: Watcher, abrupt: boolean): void {
    this.#forget(w);
    if (abrupt) w.res.socket?.destroy();
    else if (!w.res.writableEnded) w.res.end();
  }

  #forget(w: Watcher): void {
    if (w.timer) clearTimeout(w.timer);
    this.#watchers.delete(w);
  }

  #events(req: IncomingMessage, res: ServerResponse, api: StoredEvent['api'], namespace: string, name: string | undefined, body: string): void {
    let input: Record<string, unknown>;
    try {
      input = body ? (JSON.parse(body) as Record<string, unknown>) : {};
    } catch {
      return this.#json(res, 400, status(400, 'BadRequest', 'request body is not JSON'));
    }
    if (req.method === 'POST' && !name) {
      const problems = api === 'events.k8s.io/v1' ? validateEventV1(input, namespace) : [];
      if (problems.length) return this.#json(res, 422, status(422, 'Invalid', `Event is invalid: ${problems.join(', ')}`));
      const meta = (input.metadata ?? {}) as Record<string, unknown>;
      if (this.events.some((e) => e.api === api && e.namespace === namespace && (e.object.metadata as { name: string }).name === meta.name)) {
        return this.#json(res, 409, status(409, 'AlreadyExists', `events "${String(meta.name)}" already exists`));
      }
      const object = { ...input, metadata: { ...meta, namespace, uid: randomUUID(), resourceVersion: String(this.store.resourceVersion) } };
      this.events.push({ api, namespace, object, patches: 0 });
      return this.#json(res, 201, object);
    }
    if (req.method === 'PATCH' && name) {
      const type = String(req.headers['content-type'] ?? '').split(';')[0];
      if (type !== 'application/strategic-merge-patch+json' && type !== 'application/merge-patch+json') {
        return this.#json(
          res,
          415,
          status(
            415,
            'UnsupportedMediaType',
            `the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json (got ${type})`,
          ),
        );
      }
      const stored = this.events.find((e) => e.api === api && e.namespace === namespace && (e.object.metadata as { name: string }).name === name);
      if (!stored) return this.#json(res, 404, status(404, 'NotFound', `events "${name}" not found`));
      stored.object = mergePatch(stored.object, input) as Record<string, unknown>;
      stored.patches++;
      return this.#json(res, 200, stored.object);
    }
    this.#json(res, 405, status(405, 'MethodNotAllowed', `${req.method} is not supported on events here`));
  }

  /** #tokenReview authenticates a token for the audiences asked (the API server's own when none), as the API server does. */
  #tokenReview(req: IncomingMessage, res: ServerResponse, body: string): void {
    if (req.method !== 'POST') return this.#json(res, 405, status(405, 'MethodNotAllowed', `${req.method} is not supported on tokenreviews`));
    const input = JSON.parse(body || '{}') as { spec?: { token?: string; audiences?: string[] } };
    const spec = input.spec ?? {};
    this.reviews.push({ kind: 'TokenReview', spec });
    const asked = spec.audiences?.length ? spec.audiences : [API_SERVER_AUDIENCE];
    const issued = spec.token ? this.tokens.get(spec.token) : undefined;
    const audiences = issued ? asked.filter((a) => issued.audiences.includes(a)) : [];
    const st =
      issued && audiences.length
        ? { authenticated: true, user: { groups: [], ...issued.user }, ...(this.audienceAware ? { audiences } : {}) }
        : { authenticated: false, error: issued ? 'token audiences do not match' : 'invalid bearer token' };
    this.#json(res, 201, { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', metadata: {}, spec, status: st });
  }

  /** #accessReview answers a SubjectAccessReview from accessRules (or decide). */
  #accessReview(req: IncomingMessage, res: ServerResponse, body: string): void {
    if (req.method !== 'POST') return this.#json(res, 405, status(405, 'MethodNotAllowed', `${req.method} is not supported on subjectaccessreviews`));
    const input = JSON.parse(body || '{}') as { spec?: Record<string, any> };
    const spec = input.spec ?? {};
    this.reviews.push({ kind: 'SubjectAccessReview', spec });
    const a = (spec.resourceAttributes ?? {}) as { group?: string; resource?: string; subresource?: string; name?: string; verb?: string };
    const resource = a.subresource ? `${a.resource}/${a.subresource}` : a.resource;
    const groups = (spec.groups ?? []) as string[];
    const byRules = this.accessRules.some(
      (r) =>
        (r.users?.includes(spec.user) || r.groups?.some((g) => groups.includes(g))) &&
        r.apiGroup === (a.group ?? '') &&
        r.resource === resource &&
        (r.verbs.includes(a.verb ?? '') || r.verbs.includes('*')) &&
        (!r.resourceNames || r.resourceNames.includes(a.name ?? '')),
    );
    const allowed = this.decide?.(spec) ?? byRules;
    this.#json(res, 201, {
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SubjectAccessReview',
      metadata: {},
      spec,
      status: { allowed, ...(allowed ? { reason: 'allowed by the fake API server' } : {}) },
    });
  }

  #json(res: ServerResponse, code: number, body: unknown): void {
    res.writeHead(code, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify(body));
  }
}

function pluralOf(kind: string | undefined): Resource['plural'] {
  const r = Object.values(RESOURCES).find((x) => x.kind === kind);
  if (!r) throw new Error(`fake API server does not serve kind ${String(kind)}`);
  return r.plural;
}

/** validateEventV1 checks what the API server's events.k8s.io/v1 validation checks on create. */
function validateEventV1(e: Record<string, unknown>, namespace: string): string[] {
  const problems: string[] = [];
  const meta = (e.metadata ?? {}) as Record<string, unknown>;
  if (!meta.name) problems.push('metadata.name: Required value');
  if (meta.namespace !== undefined && meta.namespace !== namespace) problems.push(`metadata.namespace: does not match the namespace of the request (${namespace})`);
  if (typeof e.eventTime !== 'string' || !MICRO_TIME.test(e.eventTime)) problems.push(`eventTime: Invalid value: ${JSON.stringify(e.eventTime)}: must be RFC 3339 with microseconds`);
  for (const f of ['reportingController', 'reportingInstance', 'action', 'reason']) if (!e[f]) problems.push(`${f}: Required value`);
  if (e.type !== 'Normal' && e.type !== 'Warning') problems.push(`type: Unsupported value: ${JSON.stringify(e.type)}`);
  if (typeof e.note === 'string' && Buffer.byteLength(e.note) > 1024) problems.push('note: Too long: may not be longer than 1024');
  const regarding = (e.regarding ?? {}) as Record<string, unknown>;
  if (regarding.namespace && regarding.namespace !== namespace) problems.push('regarding.namespace: does not match event.namespace');
  const series = e.series as Record<string, unknown> | undefined;
  if (series && (typeof series.count !== 'number' || series.count < 2)) problems.push('series.count: should be at least 2');
  return problems;
}

/** mergePatch applies a JSON merge patch (RFC 7386); for Event fields it equals a strategic merge. */
function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> = target && typeof target === 'object' && !Array.isArray(target) ? { ...(target as Record<string, unknown>) } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

/** Continue is what a continue token carries: the first page's resourceVersion and where the next page starts. */
interface Continue {
  rv: number;
  start: number;
}

function encodeContinue(c: Continue): string {
  return Buffer.from(JSON.stringify(c)).toString('base64url');
}

function decodeContinue(token: string): Continue | null {
  try {
    const c = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as Continue;
    return Number.isInteger(c.rv) && Number.isInteger(c.start) && c.start >= 0 ? c : null;
  } catch {
    return null;
  }
}

/**
 * EventsApi is the one call the API sink needs: a JSON request with kproxy's
 * credentials (the Kubernetes source's KubeApi is one). Declared here so the
 * events layer imports nothing above it.
 */
export interface EventsApi {
  request(method: 'POST' | 'PATCH', path: string, o: { body: unknown; contentType?: string }): Promise<unknown>;
}

/** EventObject is an events.k8s.io/v1 Event as kproxy writes it (eventTime already in MicroTime form). */
export interface EventObject {
  apiVersion: 'events.k8s.io/v1';
  kind: 'Event';
  metadata: { name: string; namespace: string };
  /** eventTime: RFC 3339 with microseconds, as the API server's MicroTime requires. */
  eventTime: string;
  series?: { count: number; lastObservedTime: string };
  reportingController: string;
  reportingInstance: string;
  action: string;
  reason: string;
  note: string;
  type: 'Normal' | 'Warning';
  regarding: { kind: string; name: string; namespace?: string; uid?: string; apiVersion?: string };
}

/** SeriesPatch is the body of a series update: the count and when the event was last seen. */
export interface SeriesPatch {
  series: { count: number; lastObservedTime: string };
}

/**
 * EventSink writes Events to the API. Failures reject with an error whose `code`
 * (or `statusCode`) is the HTTP status when the server answered, and none when
 * it could not be reached: the recorder retries the latter and 5xx, and drops
 * requests the server refused.
 */
export interface EventSink {
  create(namespace: string, event: EventObject): Promise<void>;
  patch(namespace: string, name: string, patch: SeriesPatch): Promise<void>;
}

/** httpStatus returns the HTTP status of a sink failure, or undefined when the server was not reached. */
export function httpStatus(err: unknown): number | undefined {
  const e = err as { code?: unknown; statusCode?: unknown } | null;
  if (typeof e?.code === 'number') return e.code;
  if (typeof e?.statusCode === 'number') return e.statusCode;
  return undefined;
}

/** ApiEventSink writes to the events.k8s.io/v1 API as JSON, with kproxy's credentials. */
export class ApiEventSink implements EventSink {
  readonly #api: EventsApi;

  constructor(api: EventsApi) {
    this.#api = api;
  }

  async create(namespace: string, event: EventObject): Promise<void> {
    await this.#api.request('POST', `/apis/events.k8s.io/v1/namespaces/${encodeURIComponent(namespace)}/events`, { body: event });
  }

  async patch(namespace: string, name: string, patch: SeriesPatch): Promise<void> {
    // A series update is a strategic merge, as client-go sends it.
    await this.#api.request('PATCH', `/apis/events.k8s.io/v1/namespaces/${encodeURIComponent(namespace)}/events/${encodeURIComponent(name)}`, {
      body: patch,
      contentType: 'application/strategic-merge-patch+json',
    });
  }
}

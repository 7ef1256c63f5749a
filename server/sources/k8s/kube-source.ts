import type { KubeConfig, KubernetesListObject, KubernetesObject } from '@kubernetes/client-node';
import type { Clock } from '../../clock.ts';
import { errorMessage, KubeconfigError } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import type { EndpointSlice, Node, Service, ServiceCIDR } from '../../proxy/kube-objects.ts';
import type { ChangeHandlers } from '../../proxy/proxy-state.ts';
import { keptFields, type KeptKind } from '../../proxy/kept-fields.ts';
import type { Source, SourceStatus } from '../../proxy/source.ts';
import { ApiStatusError, KubeApi } from './api-request.ts';
import { loadClientNode } from './client-node.ts';
import type { InformerCounters, InformerKind, InformerStatus, InformerTuning, WatchClient } from './informer-types.ts';
import { ResilientInformer, type ResilientInformerOptions } from './resilient-informer.ts';

/** InformerCommon: what every informer of a source shares. */
type InformerCommon = Pick<ResilientInformerOptions<KubernetesObject>, 'watch' | 'ListWatch' | 'server' | 'clock' | 'logger' | 'tuning' | 'random'>;
import { ENDPOINT_SLICES_PATH, NODES_PATH, nodeFieldSelector, PROXY_LABEL_SELECTOR, SERVICE_CIDRS_PATH, SERVICE_FIELD_SELECTOR, SERVICES_PATH } from './selectors.ts';

export interface KubeSourceOptions {
  kubeConfig: KubeConfig;
  /** nodeName: this node (its Node object is the only one watched). */
  nodeName: string;
  clock: Clock;
  logger: Logger;
  /** tuning: backoff, quiet-watch relist and watch timeouts (defaults: DEFAULT_TUNING). */
  tuning?: Partial<InformerTuning>;
  /**
   * watchInactivityMs: client-node aborts a watch that received no bytes this
   * long and resumes it from its resourceVersion. It runs on the real clock
   * inside client-node; longer than the API server's bookmark interval (~1 min).
   */
  watchInactivityMs?: number;
  random?: () => number;
  /**
   * serviceCIDRs: also watch ServiceCIDRs (networking.k8s.io/v1), which nftables
   * mode needs to drop traffic to unallocated cluster IPs; the other modes do not.
   */
  serviceCIDRs?: boolean;
}

/** KINDS: the informers, in the order status lists them. */
const KINDS: readonly InformerKind[] = ['Service', 'EndpointSlice', 'Node', 'ServiceCIDR'];
/** REQUIRED: the informers whose first lists make the source synced (ServiceCIDRs refine, they never hold a sync back). */
const REQUIRED: readonly InformerKind[] = ['Service', 'EndpointSlice', 'Node'];

/**
 * KubeSource feeds the change handlers from the Kubernetes API: Services and
 * EndpointSlices cluster-wide (kube-proxy's selectors) and this node's Node,
 * each through a ResilientInformer over client-node's ListWatch. start() returns
 * at once: when the API server is down the informers keep retrying with backoff
 * and log it, and handlers.onSynced(kind) says when each first list has arrived.
 */
export class KubeSource implements Source {
  readonly #o: KubeSourceOptions;
  readonly #server: string;
  readonly #informers = new Map<InformerKind, ResilientInformer<KubernetesObject>>();
  #started = false;
  #stopped = false;

  constructor(opts: KubeSourceOptions) {
    this.#o = opts;
    const cluster = opts.kubeConfig.getCurrentCluster();
    if (!cluster) throw new KubeconfigError('the kubeconfig has no current cluster: cannot watch the API');
    this.#server = cluster.server;
  }

  async start(handlers: ChangeHandlers): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    const { kubeConfig, nodeName, clock, logger, tuning, random } = this.#o;
    const client = await loadClientNode();
    let api: KubeApi;
    try {
      api = new KubeApi(kubeConfig, client);
    } catch (err) {
      throw new KubeconfigError(`API requests to ${this.#server} cannot be made: ${errorMessage(err)}`, { cause: err });
    }
    const watch = new client.Watch(kubeConfig);
    // requestTimeoutMs is private in client-node's typings but is the only knob for its inactivity timeout.
    (watch as unknown as { requestTimeoutMs: number }).requestTimeoutMs = this.#o.watchInactivityMs ?? 3 * 60_000;
    const log = logger.child('kube-source');
    const common: InformerCommon = { watch: watch as WatchClient, ListWatch: client.ListWatch, server: this.#server, clock, logger: log, tuning, random };
    // Each list is plain JSON, page by page, keeping only the fields kproxy reads (keptFields) of each object.
    const list = (path: string, query: Record<string, string | undefined>) => (keep: (item: unknown) => unknown) => api.list(path, query, keep) as Promise<KubernetesListObject<KubernetesObject>>;
    const keep = (kind: KeptKind) => (obj: unknown) => keptFields(kind, obj) as KubernetesObject;

    this.#add(
      new ResilientInformer<KubernetesObject>({
        ...common,
        kind: 'Service',
        path: SERVICES_PATH,
        labelSelector: PROXY_LABEL_SELECTOR,
        fieldSelector: SERVICE_FIELD_SELECTOR,
        list: list(SERVICES_PATH, { labelSelector: PROXY_LABEL_SELECTOR, fieldSelector: SERVICE_FIELD_SELECTOR }),
        keep: keep('Service'),
        onChange: (prev, cur) => handlers.onService(prev as Service | null, cur as Service | null),
        onSynced: () => handlers.onSynced('Service'),
      }),
    );
    this.#add(
      new ResilientInformer<KubernetesObject>({
        ...common,
        kind: 'EndpointSlice',
        path: ENDPOINT_SLICES_PATH,
        labelSelector: PROXY_LABEL_SELECTOR,
        list: list(ENDPOINT_SLICES_PATH, { labelSelector: PROXY_LABEL_SELECTOR }),
        keep: keep('EndpointSlice'),
        onChange: (prev, cur) => handlers.onEndpointSlice(prev as EndpointSlice | null, cur as EndpointSlice | null),
        onSynced: () => handlers.onSynced('EndpointSlice'),
      }),
    );
    this.#add(
      new ResilientInformer<KubernetesObject>({
        ...common,
        kind: 'Node',
        path: NODES_PATH,
        fieldSelector: nodeFieldSelector(nodeName),
        list: list(NODES_PATH, { fieldSelector: nodeFieldSelector(nodeName) }),
        keep: keep('Node'),
        onChange: (prev, cur) => handlers.onNode(prev as Node | null, cur as Node | null),
        onSynced: () => handlers.onSynced('Node'),
      }),
    );
    log.info('watching the Kubernetes API', { server: this.#server, node: nodeName });
    for (const inf of this.#informers.values()) inf.start();
    if (this.#o.serviceCIDRs) void this.#watchServiceCIDRs(api, common, handlers, list(SERVICE_CIDRS_PATH, {}), keep('ServiceCIDR'));
  }

  /**
   * #watchServiceCIDRs starts the ServiceCIDR informer unless the API server
   * does not serve networking.k8s.io/v1 ServiceCIDRs at all (before Kubernetes
   * 1.33, or with the MultiCIDRServiceAllocator gate off): one probing list
   * answers 404 then, and watching would only fail forever. Any other failure
   * of the probe (the API is down) leaves the informer to its own retries.
   */
  async #watchServiceCIDRs(
    api: KubeApi,
    common: InformerCommon,
    handlers: ChangeHandlers,
    list: ResilientInformerOptions<KubernetesObject>['list'],
    keep: (obj: unknown) => KubernetesObject,
  ): Promise<void> {
    try {
      await api.request('GET', SERVICE_CIDRS_PATH, { query: { limit: 1 } });
    } catch (err) {
      if (err instanceof ApiStatusError && err.code === 404) {
        common.logger.warn('the API server serves no networking.k8s.io/v1 ServiceCIDRs (Kubernetes before 1.33?): traffic to unallocated cluster IPs is not dropped', { server: this.#server });
        return;
      }
    }
    if (this.#stopped) return;
    const inf = new ResilientInformer<KubernetesObject>({
      ...common,
      kind: 'ServiceCIDR',
      path: SERVICE_CIDRS_PATH,
      list,
      keep,
      onChange: (prev, cur) => handlers.onServiceCIDR?.(prev as ServiceCIDR | null, cur as ServiceCIDR | null),
      onSynced: () => {},
    });
    this.#add(inf);
    inf.start();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    for (const inf of this.#informers.values()) inf.stop();
  }

  /** informers: each informer's status, for the dashboard. */
  informers(): InformerStatus[] {
    return KINDS.flatMap((k) => {
      const inf = this.#informers.get(k);
      return inf ? [inf.status()] : [];
    });
  }

  /** status: counters are totals over the informers, plus each one's as "<Kind>.<counter>". */
  status(): SourceStatus {
    const all = this.informers();
    const counters: Record<string, number> = {};
    for (const st of all) {
      for (const [name, value] of Object.entries(st.counters) as [keyof InformerCounters, number][]) counters[name] = (counters[name] ?? 0) + value;
    }
    for (const st of all) {
      for (const [name, value] of Object.entries(st.counters) as [keyof InformerCounters, number][]) counters[`${st.kind}.${name}`] = value;
    }
    const failed = all.filter((s) => s.lastErrorAt !== undefined).sort((a, b) => b.lastErrorAt! - a.lastErrorAt!)[0];
    // ServiceCIDRs refine the rules; they never hold the source's sync back.
    const unlisted = REQUIRED.filter((k) => !all.some((s) => s.kind === k && s.synced));
    const synced = unlisted.length === 0;
    return {
      kind: 'kubernetes',
      description: this.#server,
      synced,
      ...(synced ? {} : { waitingFor: `the first list of ${unlisted.join(', ')}${failed?.lastError ? ` (last error: ${failed.lastError})` : ''}` }),
      objects: all.reduce((n, s) => n + s.objects, 0),
      lastError: failed?.lastError,
      lastErrorAt: failed?.lastErrorAt,
      counters,
    };
  }

  #add(inf: ResilientInformer<KubernetesObject>): void {
    this.#informers.set(inf.status().kind, inf);
  }
}

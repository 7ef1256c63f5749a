import type { Clock } from '../clock.ts';
import type { Endpoint } from './endpoint.ts';
import { EndpointsChangeTracker, type StaleEndpoint } from './endpoints-change-tracker.ts';
import type { IPFamily } from '../net/ip.ts';
import { objectKey, objectRef, type EndpointSlice, type KubeObject, type Node, type Service, type ServiceCIDR } from './kube-objects.ts';
import { serviceCIDRsOf } from './service-cidrs.ts';
import { nodeInfoFromNode, nodeIPOf, topologyChanged, unknownNode, type NodeInfo } from './node-info.ts';
import { ServiceChangeTracker } from './service-change-tracker.ts';
import type { ServicePort } from './service-port.ts';

export type ObjectKind = 'Service' | 'EndpointSlice' | 'Node';

/**
 * ChangeHandlers is what every source (informers, manifest files) calls. Add:
 * prev null; update: both; delete: cur null (prev is the last known object).
 */
export interface ChangeHandlers {
  onService(prev: Service | null, cur: Service | null): void;
  onEndpointSlice(prev: EndpointSlice | null, cur: EndpointSlice | null): void;
  onNode(prev: Node | null, cur: Node | null): void;
  /** onServiceCIDR: a ServiceCIDR (networking.k8s.io/v1) was added, changed or deleted; sources without them never call it. */
  onServiceCIDR?(prev: ServiceCIDR | null, cur: ServiceCIDR | null): void;
  /** onSynced: the source has delivered a complete initial list of this kind. */
  onSynced(kind: ObjectKind): void;
}

export interface ProxyStateHooks {
  /** onInvalid: an object was refused (it keeps its last valid version, if any). */
  onInvalid?(kind: ObjectKind, ref: string, error: Error, object: KubeObject): void;
}

/** StateCheckout is the input of one sync: the whole wanted state plus what changed. */
export interface StateCheckout {
  readonly services: ReadonlyMap<string, ServicePort>;
  readonly endpoints: ReadonlyMap<string, readonly Endpoint[]>;
  readonly node: NodeInfo;
  /** changedServices: "ns/name" of services whose ports or endpoints changed since the last checkout. */
  readonly changedServices: ReadonlySet<string>;
  /** topologyChanged: the node's zone or pod CIDRs changed; every service may be affected. */
  readonly topologyChanged: boolean;
  readonly deletedUDPClusterIPs: ReadonlySet<string>;
  readonly staleEndpoints: readonly StaleEndpoint[];
  readonly newlyActiveUDPServices: ReadonlySet<string>;
  /** triggerTimes: epoch ms of the endpoint changes this sync programs (network programming latency). */
  readonly triggerTimes: readonly number[];
  /** serviceCIDRs: every ServiceCIDR's ranges (both families), sorted; nftables mode drops traffic to their unallocated addresses. */
  readonly serviceCIDRs?: readonly string[];
  /**
   * withoutNodeIP: service ports of this family left out because the Node lists
   * addresses but none of this family (0 otherwise); services, endpoints and
   * changedServices are empty then, so the family's rules are removed.
   */
  readonly withoutNodeIP: number;
}

const NO_SERVICES: ReadonlyMap<string, ServicePort> = new Map();
const NO_ENDPOINTS: ReadonlyMap<string, readonly Endpoint[]> = new Map();

export interface ProxyStateOptions {
  family: IPFamily;
  nodeName: string;
  clock: Clock;
  hooks?: ProxyStateHooks;
}

/** READY_KINDS: the lists a sync needs (the Node refines locality; a daemon syncs again when it arrives). */
const READY_KINDS: readonly ObjectKind[] = ['Service', 'EndpointSlice'];

/**
 * ProxyState is the single place where source events meet the proxier: it owns
 * the service and endpoints change trackers and the node, counts changes, and
 * hands a consistent checkout to each sync.
 */
export class ProxyState implements ChangeHandlers {
  readonly family: IPFamily;
  readonly nodeName: string;
  readonly #services: ServiceChangeTracker;
  readonly #endpoints: EndpointsChangeTracker;
  readonly #hooks: ProxyStateHooks;
  readonly #changeListeners: (() => void)[] = [];
  #node: NodeInfo;
  #nodeTopologyDirty = false;
  /** #serviceCIDRs: each ServiceCIDR's valid ranges by name; #cidrs: all of them, sorted. */
  readonly #serviceCIDRs = new Map<string, readonly string[]>();
  #cidrs: readonly string[] = [];
  #cidrsDirty = false;
  readonly #synced = new Set<ObjectKind>();
  #listWaiters: { kinds: readonly ObjectKind[]; resolve: () => void }[] = [];
  /** Totals for kube-proxy's *_changes_total metrics. */
  serviceChangesTotal = 0;
  endpointChangesTotal = 0;
  /** invalidTotal counts refused objects by kind (kproxy_invalid_objects_total). */
  readonly invalidTotal: Record<ObjectKind, number> = { Service: 0, EndpointSlice: 0, Node: 0 };
  /** invalid holds the current refusal per object ("Service ns/name" -> message), for the dashboard. */
  readonly invalid = new Map<string, string>();

  constructor(opts: ProxyStateOptions) {
    this.family = opts.family;
    this.nodeName = opts.nodeName;
    this.#services = new ServiceChangeTracker(opts.family);
    this.#endpoints = new EndpointsChangeTracker(opts.family, opts.nodeName, opts.clock.now());
    this.#node = unknownNode(opts.nodeName);
    this.#hooks = opts.hooks ?? {};
  }

  /**
   * addChangeListener subscribes to changes that need a sync (the SyncLoop
   * subscribes itself when it is built over this state).
   */
  addChangeListener(listener: () => void): void {
    this.#changeListeners.push(listener);
  }

  #changed(): void {
    for (const listener of this.#changeListeners) listener();
  }

  onService(prev: Service | null, cur: Service | null): void {
    const obj = (cur ?? prev)!;
    const key = objectKey(obj);
    const ref = objectRef('Service', obj);
    this.serviceChangesTotal++;
    const res = this.#services.update(key, cur);
    if (res.kind === 'invalid') return this.#refuse('Service', ref, res.error, obj);
    this.invalid.delete(ref);
    if (res.kind === 'changed') this.#changed();
  }

  onEndpointSlice(prev: EndpointSlice | null, cur: EndpointSlice | null): void {
    const obj = (cur ?? prev)!;
    const key = objectKey(obj);
    const ref = objectRef('EndpointSlice', obj);
    this.endpointChangesTotal++;
    const res = this.#endpoints.update(key, cur);
    if (res.kind === 'invalid') return this.#refuse('EndpointSlice', ref, res.error, obj);
    this.invalid.delete(ref);
    if (res.kind === 'changed') this.#changed();
  }

  onNode(_prev: Node | null, cur: Node | null): void {
    if (cur && cur.metadata?.name !== this.nodeName) return;
    const next = nodeInfoFromNode(this.nodeName, cur);
    const before = this.#node;
    this.#node = next;
    if (topologyChanged(before, next) || this.#hasNodeIP(before) !== this.#hasNodeIP(next)) {
      this.#nodeTopologyDirty = true;
      this.#changed();
    }
  }

  onServiceCIDR(prev: ServiceCIDR | null, cur: ServiceCIDR | null): void {
    const name = (cur ?? prev)?.metadata?.name;
    if (typeof name !== 'string') return;
    if (cur) this.#serviceCIDRs.set(name, serviceCIDRsOf(cur));
    else this.#serviceCIDRs.delete(name);
    const all = [...new Set([...this.#serviceCIDRs.values()].flat())].sort();
    if (all.join(',') === this.#cidrs.join(',')) return;
    this.#cidrs = all;
    this.#cidrsDirty = true;
    this.#changed();
  }

  /** serviceCIDRs: the ranges of every ServiceCIDR seen, sorted. */
  get serviceCIDRs(): readonly string[] {
    return this.#cidrs;
  }

  onSynced(kind: ObjectKind): void {
    this.#synced.add(kind);
    this.#listWaiters = this.#listWaiters.filter((w) => {
      if (!this.listed(w.kinds)) return true;
      w.resolve();
      return false;
    });
  }

  #refuse(kind: ObjectKind, ref: string, error: Error, obj: KubeObject): void {
    this.invalidTotal[kind]++;
    this.invalid.set(ref, error.message);
    this.#hooks.onInvalid?.(kind, ref, error, obj);
  }

  /** families: this state's one family (the meta proxier lists every family's). */
  get families(): IPFamily[] {
    return [this.family];
  }

  /** ready: Services and EndpointSlices have both been listed once (no sync before that). */
  get ready(): boolean {
    return this.listed(READY_KINDS);
  }

  /** whenReady resolves once ready. */
  whenReady(): Promise<void> {
    return this.whenListed(READY_KINDS);
  }

  /** listed: each of these kinds has been listed once. */
  listed(kinds: readonly ObjectKind[]): boolean {
    return kinds.every((k) => this.#synced.has(k));
  }

  /** whenListed resolves once each of these kinds has been listed once. */
  whenListed(kinds: readonly ObjectKind[]): Promise<void> {
    if (this.listed(kinds)) return Promise.resolve();
    return new Promise((resolve) => this.#listWaiters.push({ kinds, resolve }));
  }

  get node(): NodeInfo {
    return this.#node;
  }

  get services(): ReadonlyMap<string, ServicePort> {
    return this.#services.ports;
  }

  get endpoints(): ReadonlyMap<string, readonly Endpoint[]> {
    return this.#endpoints.endpoints;
  }

  get servicesPending(): number {
    return this.#services.pendingCount;
  }

  get endpointsPending(): number {
    return this.#endpoints.pendingCount;
  }

  /** hasPending: some change is waiting for a sync. */
  get hasPending(): boolean {
    return this.servicesPending > 0 || this.endpointsPending > 0 || this.#nodeTopologyDirty || this.#cidrsDirty;
  }

  /**
   * #hasNodeIP: the Node gives this family an address, or says nothing of its
   * addresses (no Node object, as with a manifest source, or no addresses yet).
   * A Node listing addresses of the other family only is a node of that family
   * alone: this family's Services are skipped rather than programmed without a
   * node IP.
   */
  #hasNodeIP(node: NodeInfo): boolean {
    return !node.known || node.addresses.length === 0 || nodeIPOf(node, this.family) !== null;
  }

  /** withoutNodeIP: this family has no node IP, so its Services are skipped (see #hasNodeIP). */
  get withoutNodeIP(): boolean {
    return !this.#hasNodeIP(this.#node);
  }

  /** checkout applies every pending change and returns the input of one sync. */
  checkout(): StateCheckout {
    const svc = this.#services.checkout();
    const eps = this.#endpoints.checkout();
    const changedServices = new Set([...svc.changed, ...eps.changed]);
    const topology = this.#nodeTopologyDirty;
    this.#nodeTopologyDirty = false;
    this.#cidrsDirty = false;
    const skipped = this.withoutNodeIP;
    return {
      services: skipped ? NO_SERVICES : this.#services.ports,
      endpoints: skipped ? NO_ENDPOINTS : this.#endpoints.endpoints,
      node: this.#node,
      changedServices,
      topologyChanged: topology,
      deletedUDPClusterIPs: svc.deletedUDPClusterIPs,
      staleEndpoints: eps.stale,
      newlyActiveUDPServices: eps.newlyActive,
      triggerTimes: eps.triggerTimes,
      serviceCIDRs: this.#cidrs,
      withoutNodeIP: skipped ? this.#services.ports.size : 0,
    };
  }
}

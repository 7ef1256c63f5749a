import type { Clock } from '../clock.ts';
import type { IPFamily } from '../net/ip.ts';
import type { Logger } from '../log.ts';
import type { Backend } from './backend.ts';
import type { EndpointSlice, KubeObject, Node, Service, ServiceCIDR } from './kube-objects.ts';
import { objectRef } from './kube-objects.ts';
import { ProxyState, type ChangeHandlers, type ObjectKind } from './proxy-state.ts';
import { SyncLoop, type SyncObserver, type SyncRecord, type SyncTrigger } from './sync-loop.ts';

/**
 * FamilyProxier is the proxier of one IP family: its own change trackers
 * (Services by cluster IP of the family, EndpointSlices by addressType), its
 * own sync loop and its own backend writing that family's kernel objects
 * (iptables or ip6tables, IPv4 or IPv6 virtual servers, the ip or ip6 table).
 */
export interface FamilyProxier {
  readonly family: IPFamily;
  readonly state: ProxyState;
  readonly loop: SyncLoop;
  readonly backend: Backend;
}

interface Refusal {
  kind: ObjectKind;
  ref: string;
  error: Error;
  object: KubeObject;
}

export interface MetaProxierHooks {
  /** onInvalid: an object was refused by a family's proxier (told once per event, whatever refused it). */
  onInvalid?(kind: ObjectKind, ref: string, error: Error, object: KubeObject): void;
}

export interface MetaProxierOptions {
  /** backends: one per family, the primary family first (kube-proxy's primary IP family). */
  backends: readonly { family: IPFamily; backend: Backend }[];
  nodeName: string;
  clock: Clock;
  logger: Logger;
  minSyncPeriodMs: number;
  syncPeriodMs: number;
  hooks?: MetaProxierHooks;
}

/**
 * MetaProxier is kube-proxy's metaproxier (pkg/proxy/metaproxier): the one
 * set of change handlers the sources call, handing every Service,
 * EndpointSlice and Node event to the proxier of each IP family, which keeps
 * what belongs to its family. A single-stack node has one proxier behind it,
 * a dual-stack node two, each syncing on its own (a failed IPv6 restore does
 * not hold IPv4 back). It also carries the operator's controls (resync,
 * pause) to every family, and counts a refused object once, not per family.
 */
export class MetaProxier implements ChangeHandlers {
  readonly proxiers: readonly FamilyProxier[];
  /** invalidTotal counts refused objects by kind (kproxy_invalid_objects_total), once per refused event. */
  readonly invalidTotal: Record<ObjectKind, number> = { Service: 0, EndpointSlice: 0, Node: 0 };
  /** invalid holds the current refusal per object ("Service ns/name" -> message), for the dashboard. */
  readonly invalid = new Map<string, string>();
  readonly #hooks: MetaProxierHooks;
  /** #refused: what the families refused during the event being dispatched. */
  #refused: Refusal | null = null;
  #paused = false;
  #seq = 0;

  constructor(opts: MetaProxierOptions) {
    if (opts.backends.length === 0 || opts.backends.length > 2 || new Set(opts.backends.map((b) => b.family)).size !== opts.backends.length) {
      throw new Error(`a meta proxier needs one backend per IP family (got ${opts.backends.map((b) => b.family).join(', ') || 'none'})`);
    }
    this.#hooks = opts.hooks ?? {};
    this.proxiers = opts.backends.map(({ family, backend }) => {
      const state = new ProxyState({
        family,
        nodeName: opts.nodeName,
        clock: opts.clock,
        hooks: { onInvalid: (kind, ref, error, object) => (this.#refused ??= { kind, ref, error, object }) },
      });
      const loop: SyncLoop = new SyncLoop({
        state,
        backend,
        clock: opts.clock,
        logger: opts.logger.child(family === 'IPv6' ? 'sync6' : 'sync'),
        minSyncPeriodMs: opts.minSyncPeriodMs,
        syncPeriodMs: opts.syncPeriodMs,
        // One numbering for every family's syncs: the dashboard and logs name a sync by its seq.
        nextSeq: () => ++this.#seq,
        // A family's after-sync work waits for the other family's sync in flight (the first syncs run side by side).
        beforeAfterSync: (): Promise<void> => Promise.all(this.proxiers.filter((p) => p.loop !== loop).map((p) => p.loop.programmed())).then(() => {}),
      });
      return { family, state, loop, backend };
    });
  }

  /** primary is the proxier of the primary IP family (the first one). */
  get primary(): FamilyProxier {
    return this.proxiers[0];
  }

  /** families lists the IP families this node proxies, the primary first. */
  get families(): IPFamily[] {
    return this.proxiers.map((p) => p.family);
  }

  /** proxier returns the proxier of a family, or undefined on a single-stack node of the other family. */
  proxier(family: IPFamily): FamilyProxier | undefined {
    return this.proxiers.find((p) => p.family === family);
  }

  onService(prev: Service | null, cur: Service | null): void {
    this.#dispatch('Service', prev, cur, (s) => s.onService(prev, cur));
  }

  onEndpointSlice(prev: EndpointSlice | null, cur: EndpointSlice | null): void {
    this.#dispatch('EndpointSlice', prev, cur, (s) => s.onEndpointSlice(prev, cur));
  }

  onNode(prev: Node | null, cur: Node | null): void {
    for (const p of this.proxiers) p.state.onNode(prev, cur);
  }

  onServiceCIDR(prev: ServiceCIDR | null, cur: ServiceCIDR | null): void {
    // Every family keeps every ServiceCIDR; each backend takes the ranges of its family.
    for (const p of this.proxiers) p.state.onServiceCIDR(prev, cur);
  }

  onSynced(kind: ObjectKind): void {
    for (const p of this.proxiers) p.state.onSynced(kind);
  }

  #dispatch(kind: ObjectKind, prev: KubeObject | null, cur: KubeObject | null, apply: (s: ProxyState) => void): void {
    this.#refused = null;
    for (const p of this.proxiers) apply(p.state);
    const obj = (cur ?? prev)!;
    const refused = this.#refused as Refusal | null;
    this.#refused = null;
    if (refused) {
      this.invalidTotal[kind]++;
      this.invalid.set(refused.ref, refused.error.message);
      this.#hooks.onInvalid?.(refused.kind, refused.ref, refused.error, refused.object);
    } else {
      this.invalid.delete(objectRef(kind, obj));
    }
  }

  /** ready: Services and EndpointSlices have been listed (every family hears the same source). */
  get ready(): boolean {
    return this.proxiers.every((p) => p.state.ready);
  }

  whenReady(): Promise<void> {
    return Promise.all(this.proxiers.map((p) => p.state.whenReady())).then(() => undefined);
  }

  /** Change totals summed over the families: each family's tracker counts every event, as kube-proxy's do. */
  get serviceChangesTotal(): number {
    return this.proxiers.reduce((n, p) => n + p.state.serviceChangesTotal, 0);
  }

  get endpointChangesTotal(): number {
    return this.proxiers.reduce((n, p) => n + p.state.endpointChangesTotal, 0);
  }

  get servicesPending(): number {
    return this.proxiers.reduce((n, p) => n + p.state.servicesPending, 0);
  }

  get endpointsPending(): number {
    return this.proxiers.reduce((n, p) => n + p.state.endpointsPending, 0);
  }

  /** addObserver subscribes an observer to every family's syncs (records carry their family). */
  addObserver(o: SyncObserver): void {
    for (const p of this.proxiers) p.loop.addObserver(o);
  }

  /** lastRecord: the latest sync of any family, or null before the first. */
  get lastRecord(): SyncRecord | null {
    let last: SyncRecord | null = null;
    for (const p of this.proxiers) {
      const r = p.loop.lastRecord;
      if (r && (!last || r.finishedAt >= last.finishedAt)) last = r;
    }
    return last;
  }

  /** lastRecords: each family's latest sync. */
  get lastRecords(): SyncRecord[] {
    return this.proxiers.map((p) => p.loop.lastRecord).filter((r): r is SyncRecord => r !== null);
  }

  get paused(): boolean {
    return this.#paused;
  }

  pause(): void {
    this.#paused = true;
    for (const p of this.proxiers) p.loop.pause();
  }

  resume(): void {
    this.#paused = false;
    for (const p of this.proxiers) p.loop.resume();
  }

  requestFullSync(trigger: SyncTrigger = 'resync'): void {
    for (const p of this.proxiers) p.loop.requestFullSync(trigger);
  }

  /** start starts every family's sync loop (each runs its first full sync once the sources listed). */
  start(): void {
    for (const p of this.proxiers) p.loop.start();
  }

  /** syncOnce runs one full sync of every family, the primary first (for --once). */
  async syncOnce(): Promise<SyncRecord[]> {
    const out: SyncRecord[] = [];
    for (const p of this.proxiers) out.push(await p.loop.syncOnce());
    return out;
  }

  async stop(): Promise<void> {
    await Promise.all(this.proxiers.map((p) => p.loop.stop()));
  }

  /** idle resolves when no family is syncing (tests). */
  async idle(): Promise<void> {
    await Promise.all(this.proxiers.map((p) => p.loop.idle()));
  }
}

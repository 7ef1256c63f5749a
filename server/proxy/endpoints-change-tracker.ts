import { EndpointSliceInvalidError } from '../errors.ts';
import { sameEndpointList, type Endpoint } from './endpoint.ts';
import { EndpointSliceCache, sliceInfoFromEndpointSlice } from './endpoint-slice-cache.ts';
import type { IPFamily } from '../net/ip.ts';
import { ANNOTATION_LAST_CHANGE_TRIGGER_TIME, type EndpointSlice } from './kube-objects.ts';

/** StaleEndpoint is a UDP/SCTP endpoint that stopped serving a service port: its conntrack entries must go. */
export interface StaleEndpoint {
  readonly servicePortId: string;
  readonly endpoint: Endpoint;
}

/** EndpointsCheckout is what changed in the endpoints map since the last checkout. */
export interface EndpointsCheckout {
  /** changed: "ns/name" of services whose endpoints changed. */
  readonly changed: ReadonlySet<string>;
  /** stale: endpoints of connectionless protocols that are gone or no longer serving. */
  readonly stale: readonly StaleEndpoint[];
  /** newlyActive: UDP/SCTP service port ids that had no serving endpoint and now have one. */
  readonly newlyActive: ReadonlySet<string>;
  /** triggerTimes: last-change-trigger-time values (ms) of the changes, for network programming latency. */
  readonly triggerTimes: readonly number[];
}

export type EndpointSliceUpdate = { kind: 'changed' | 'unchanged' } | { kind: 'ignored'; reason: string } | { kind: 'invalid'; error: Error };

/**
 * EndpointsChangeTracker turns EndpointSlice events into the endpoints map a
 * proxier programs. Slices are cached by service; checkout() re-merges only the
 * services whose slices changed.
 */
export class EndpointsChangeTracker {
  readonly #family: IPFamily;
  readonly #cache: EndpointSliceCache;
  readonly #startedAt: number;
  readonly #applied = new Map<string, Endpoint[]>();
  readonly #appliedByService = new Map<string, string[]>();
  readonly #pending = new Set<string>();
  /** sliceService remembers which service a slice belongs to, so deletes work whatever the deleted object holds. */
  readonly #sliceService = new Map<string, string>();
  #triggerTimes: number[] = [];

  constructor(family: IPFamily, nodeName: string, startedAt: number) {
    this.#family = family;
    this.#cache = new EndpointSliceCache(nodeName);
    this.#startedAt = startedAt;
  }

  /** update records an EndpointSlice add/update (cur set) or delete (cur null); key is "ns/name" of the slice. */
  update(key: string, cur: EndpointSlice | null): EndpointSliceUpdate {
    if (!cur) {
      const service = this.#sliceService.get(key);
      if (!service) return { kind: 'unchanged' };
      this.#sliceService.delete(key);
      if (!this.#cache.delete(service, key.slice(key.indexOf('/') + 1))) return { kind: 'unchanged' };
      this.#pending.add(service);
      return { kind: 'changed' };
    }
    let conv;
    try {
      conv = sliceInfoFromEndpointSlice(cur, this.#family);
    } catch (error) {
      // Only a refused object is bad input; anything else is a bug in kproxy and must not pass for one.
      if (!(error instanceof EndpointSliceInvalidError)) throw error;
      return { kind: 'invalid', error };
    }
    if (conv.kind === 'ignored') return { kind: 'ignored', reason: conv.reason };
    const previousService = this.#sliceService.get(key);
    if (previousService && previousService !== conv.service) {
      // The slice was relabelled to another service: it leaves the old one.
      this.#cache.delete(previousService, conv.sliceName);
      this.#pending.add(previousService);
    }
    this.#sliceService.set(key, conv.service);
    if (!this.#cache.set(conv.service, conv.sliceName, conv.info)) return { kind: 'unchanged' };
    this.#pending.add(conv.service);
    const t = parseTriggerTime(cur.metadata?.annotations?.[ANNOTATION_LAST_CHANGE_TRIGGER_TIME]);
    // Changes from before kproxy started would inflate the latency metric with kproxy's own start-up time.
    if (t !== null && t > this.#startedAt) this.#triggerTimes.push(t);
    return { kind: 'changed' };
  }

  get pendingCount(): number {
    return this.#pending.size;
  }

  /** endpoints returns the applied map: service port id -> endpoints sorted by ip:port. */
  get endpoints(): ReadonlyMap<string, readonly Endpoint[]> {
    return this.#applied;
  }

  /** checkout applies pending changes and reports what changed. */
  checkout(): EndpointsCheckout {
    const changed = new Set<string>();
    const stale: StaleEndpoint[] = [];
    const newlyActive = new Set<string>();
    for (const service of this.#pending) {
      const merged = this.#cache.endpointsOf(service);
      const oldIds = this.#appliedByService.get(service) ?? [];
      let differs = oldIds.length !== merged.size;
      for (const id of oldIds) {
        const before = this.#applied.get(id);
        const after = merged.get(id);
        if (!sameEndpointList(before, after)) differs = true;
        if (before && isConnectionless(id)) {
          for (const ep of before) {
            if (!ep.serving) continue;
            const now = after?.find((e) => e.key === ep.key);
            if (!now || !now.serving) stale.push({ servicePortId: id, endpoint: ep });
          }
        }
        if (!after) this.#applied.delete(id);
      }
      for (const [id, eps] of merged) {
        const before = this.#applied.get(id);
        if (isConnectionless(id) && !before?.some((e) => e.serving) && eps.some((e) => e.serving)) newlyActive.add(id);
        this.#applied.set(id, eps);
      }
      if (merged.size === 0) this.#appliedByService.delete(service);
      else this.#appliedByService.set(service, [...merged.keys()]);
      if (differs) changed.add(service);
    }
    this.#pending.clear();
    const triggerTimes = this.#triggerTimes;
    this.#triggerTimes = [];
    return { changed, stale, newlyActive, triggerTimes };
  }
}

function isConnectionless(servicePortId: string): boolean {
  return servicePortId.endsWith('/UDP') || servicePortId.endsWith('/SCTP');
}

function parseTriggerTime(value: unknown): number | null {
  if (typeof value !== 'string') return null;
  const t = Date.parse(value);
  return Number.isNaN(t) ? null : t;
}

import { randomUUID } from 'node:crypto';
import type { Matcher } from './selectors.ts';

/** Resource describes one API resource the fake server serves. */
export interface Resource {
  readonly plural: 'services' | 'endpointslices' | 'nodes' | 'servicecidrs';
  readonly kind: string;
  readonly listKind: string;
  readonly apiVersion: string;
  /** prefix: "/api/v1" or "/apis/<group>/<version>". */
  readonly prefix: string;
  readonly namespaced: boolean;
  /** fields: the field selectors this resource supports (others are a 400). */
  readonly fields: readonly string[];
}

export const RESOURCES: Record<Resource['plural'], Resource> = {
  services: {
    plural: 'services',
    kind: 'Service',
    listKind: 'ServiceList',
    apiVersion: 'v1',
    prefix: '/api/v1',
    namespaced: true,
    fields: ['metadata.name', 'metadata.namespace', 'spec.clusterIP', 'spec.type'],
  },
  endpointslices: {
    plural: 'endpointslices',
    kind: 'EndpointSlice',
    listKind: 'EndpointSliceList',
    apiVersion: 'discovery.k8s.io/v1',
    prefix: '/apis/discovery.k8s.io/v1',
    namespaced: true,
    fields: ['metadata.name', 'metadata.namespace', 'addressType'],
  },
  nodes: {
    plural: 'nodes',
    kind: 'Node',
    listKind: 'NodeList',
    apiVersion: 'v1',
    prefix: '/api/v1',
    namespaced: false,
    fields: ['metadata.name', 'spec.unschedulable'],
  },
  servicecidrs: {
    plural: 'servicecidrs',
    kind: 'ServiceCIDR',
    listKind: 'ServiceCIDRList',
    apiVersion: 'networking.k8s.io/v1',
    prefix: '/apis/networking.k8s.io/v1',
    namespaced: false,
    fields: ['metadata.name'],
  },
};

export type Obj = Record<string, unknown> & { metadata: { name: string; namespace?: string; resourceVersion?: string; uid?: string; [k: string]: unknown } };
export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED';

/** Change is one entry of the store's history: what a watch from an older version replays. */
export interface Change {
  readonly rv: number;
  readonly resource: Resource['plural'];
  readonly type: WatchEventType;
  /** prev: the object before the change (null for a create). */
  readonly prev: Obj | null;
  /** obj: the object after the change (for a delete: the final object, at the delete's version). */
  readonly obj: Obj;
}

/** WatchEvent is one line of a watch stream. */
export interface WatchEvent {
  type: WatchEventType | 'BOOKMARK' | 'ERROR';
  object: Record<string, unknown>;
}

function keyOf(meta: { name: string; namespace?: string }): string {
  return meta.namespace ? `${meta.namespace}/${meta.name}` : meta.name;
}

const clone = <T>(v: T): T => structuredClone(v);

/**
 * FakeStore holds the objects, one global resourceVersion counter (as etcd's
 * revision) and the change history since the last compaction, so a watch can
 * resume from any version newer than the compaction point and an older one gets
 * 410 Gone.
 */
export class FakeStore {
  #rv = 1;
  /** compactedRv: versions at or below this are gone from history. */
  #compactedRv = 0;
  readonly #objects = new Map<Resource['plural'], Map<string, Obj>>(Object.keys(RESOURCES).map((k) => [k as Resource['plural'], new Map()]));
  readonly #history: Change[] = [];
  readonly #listeners = new Set<(c: Change) => void>();

  get resourceVersion(): number {
    return this.#rv;
  }

  get compactedResourceVersion(): number {
    return this.#compactedRv;
  }

  /** onChange subscribes to every change (the server fans them out to open watches). */
  onChange(fn: (c: Change) => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  /** apply creates or replaces an object, giving it a new resourceVersion. */
  apply(plural: Resource['plural'], input: Record<string, unknown>): Obj {
    const res = RESOURCES[plural];
    const obj = clone(input) as Obj;
    if (!obj.metadata?.name) throw new Error(`fake store: ${res.kind} without metadata.name`);
    if (res.namespaced) obj.metadata.namespace ??= 'default';
    else delete obj.metadata.namespace;
    const key = keyOf(obj.metadata);
    const prev = this.#objects.get(plural)!.get(key) ?? null;
    obj.apiVersion = res.apiVersion;
    obj.kind = res.kind;
    obj.metadata.uid = prev?.metadata.uid ?? obj.metadata.uid ?? randomUUID();
    obj.metadata.creationTimestamp = prev?.metadata.creationTimestamp ?? new Date(Math.floor(Date.now() / 1000) * 1000).toISOString().replace('.000Z', 'Z');
    obj.metadata.resourceVersion = String(++this.#rv);
    this.#objects.get(plural)!.set(key, obj);
    this.#record({ rv: this.#rv, resource: plural, type: prev ? 'MODIFIED' : 'ADDED', prev, obj });
    return clone(obj);
  }

  /** remove deletes an object; returns false when it did not exist. */
  remove(plural: Resource['plural'], name: string, namespace?: string): boolean {
    const res = RESOURCES[plural];
    const key = keyOf({ name, namespace: res.namespaced ? (namespace ?? 'default') : undefined });
    const prev = this.#objects.get(plural)!.get(key);
    if (!prev) return false;
    this.#objects.get(plural)!.delete(key);
    const obj = clone(prev);
    obj.metadata.resourceVersion = String(++this.#rv);
    this.#record({ rv: this.#rv, resource: plural, type: 'DELETED', prev, obj });
    return true;
  }

  get(plural: Resource['plural'], name: string, namespace?: string): Obj | undefined {
    const res = RESOURCES[plural];
    const o = this.#objects.get(plural)!.get(keyOf({ name, namespace: res.namespaced ? (namespace ?? 'default') : undefined }));
    return o && clone(o);
  }

  /**
   * list returns the matching objects at the current version, or a page of
   * them (start, then at most limit; total counts them all): only what is
   * returned is copied, so a list in pages costs what the pages hold. With
   * copy false the stored objects themselves are returned, for a caller that
   * only serialises them before it returns (a list response: a real API server
   * serialises from its cache, it does not copy every object first).
   */
  list(plural: Resource['plural'], match: Matcher, page?: { start: number; limit?: number; copy?: boolean }): { items: Obj[]; resourceVersion: number; total: number } {
    const all = [...this.#objects.get(plural)!.values()].filter(match);
    const start = page?.start ?? 0;
    const slice = all.slice(start, page?.limit ? start + page.limit : undefined);
    const items = page?.copy === false ? slice : slice.map(clone);
    return { items, resourceVersion: this.#rv, total: all.length };
  }

  /** compact forgets the history: watches resuming from before now get 410 Gone. */
  compact(): void {
    this.#compactedRv = this.#rv;
    this.#history.length = 0;
  }

  /** tooOld: a watch from this version cannot be served (its history was compacted). */
  tooOld(fromRv: number): boolean {
    return fromRv < this.#compactedRv;
  }

  /** changesSince returns the history after fromRv for one resource. */
  changesSince(plural: Resource['plural'], fromRv: number): Change[] {
    return this.#history.filter((c) => c.resource === plural && c.rv > fromRv);
  }

  #record(c: Change): void {
    this.#history.push(c);
    for (const fn of this.#listeners) fn(c);
  }
}

/**
 * eventFor turns a change into what one watcher sees through its selector, as the
 * API server does: an object that starts matching arrives as ADDED, one that
 * stops matching as DELETED, and a change outside the selector not at all.
 */
export function eventFor(c: Change, match: Matcher): WatchEvent | null {
  const before = c.prev !== null && match(c.prev);
  const after = c.type !== 'DELETED' && match(c.obj);
  if (c.type === 'DELETED') return before ? { type: 'DELETED', object: clone(c.obj) } : null;
  if (before && after) return { type: 'MODIFIED', object: clone(c.obj) };
  if (after) return { type: 'ADDED', object: clone(c.obj) };
  if (before) return { type: 'DELETED', object: clone(c.obj) };
  return null;
}

import type { IPFamily } from '../net/ip.ts';
import type { Endpoint } from '../proxy/endpoint.ts';
import type { ServicePort } from '../proxy/service-port.ts';

/**
 * The dashboard shows the Services of every IP family together: a dual-stack
 * Service is one row with the ports of both families. Each family's proxier
 * keys its service ports "ns/name:port/PROTO"; on the dashboard an IPv6 port
 * is "ns/name:port/PROTO@IPv6", so both live in one map (the Service page,
 * its live counters and the skipped-port notes use that id).
 */

/** IPV6_SUFFIX marks the dashboard id of an IPv6 service port. */
export const IPV6_SUFFIX = '@IPv6';

/** dashboardPortId is a service port's id on the dashboard (its family's id, "@IPv6" for IPv6). */
export function dashboardPortId(id: string, family: IPFamily): string {
  return family === 'IPv6' ? id + IPV6_SUFFIX : id;
}

/** splitPortId returns a dashboard port id's family and the id its proxier uses. */
export function splitPortId(id: string): { family: IPFamily; id: string } {
  return id.endsWith(IPV6_SUFFIX) ? { family: 'IPv6', id: id.slice(0, -IPV6_SUFFIX.length) } : { family: 'IPv4', id };
}

/** portFamily is the IP family of a service port (its cluster IP's). */
export function portFamily(sp: Pick<ServicePort, 'clusterIP'>): IPFamily {
  return sp.clusterIP.includes(':') ? 'IPv6' : 'IPv4';
}

/** FamilyMaps is one family's live maps (a ProxyState's services and endpoints). */
export interface FamilyMaps {
  readonly family: IPFamily;
  readonly services: ReadonlyMap<string, ServicePort>;
  readonly endpoints: ReadonlyMap<string, readonly Endpoint[]>;
}

/**
 * JoinedMap is a read-only map over one map per family, each key carrying its
 * family's suffix. It copies nothing: lookups go to the family the key names,
 * iteration walks the families in order. rewrite adapts a value to its
 * dashboard key (an IPv6 ServicePort gets its "@IPv6" id), once per value.
 */
class JoinedMap<V> implements ReadonlyMap<string, V> {
  readonly #parts: readonly { family: IPFamily; map: () => ReadonlyMap<string, V> }[];
  readonly #rewrite: (v: V, family: IPFamily) => V;

  constructor(parts: readonly { family: IPFamily; map: () => ReadonlyMap<string, V> }[], rewrite: (v: V, family: IPFamily) => V = (v) => v) {
    this.#parts = parts;
    this.#rewrite = rewrite;
  }

  #part(key: string): { map: ReadonlyMap<string, V>; id: string; family: IPFamily } | null {
    const { family, id } = splitPortId(key);
    const part = this.#parts.find((p) => p.family === family);
    return part ? { map: part.map(), id, family } : null;
  }

  get(key: string): V | undefined {
    const p = this.#part(key);
    const v = p?.map.get(p.id);
    return v === undefined ? undefined : this.#rewrite(v, p!.family);
  }

  has(key: string): boolean {
    const p = this.#part(key);
    return p !== null && p.map.has(p.id);
  }

  get size(): number {
    return this.#parts.reduce((n, p) => n + p.map().size, 0);
  }

  *entries(): MapIterator<[string, V]> {
    for (const p of this.#parts) for (const [k, v] of p.map()) yield [dashboardPortId(k, p.family), this.#rewrite(v, p.family)];
  }

  *keys(): MapIterator<string> {
    for (const [k] of this.entries()) yield k;
  }

  *values(): MapIterator<V> {
    for (const p of this.#parts) for (const v of p.map().values()) yield this.#rewrite(v, p.family);
  }

  forEach(fn: (value: V, key: string, map: ReadonlyMap<string, V>) => void): void {
    for (const [k, v] of this.entries()) fn(v, k, this);
  }

  [Symbol.iterator](): MapIterator<[string, V]> {
    return this.entries();
  }
}

/** joinFamilies returns the services and endpoints of every family keyed by dashboard port id. */
export function joinFamilies(families: () => readonly FamilyMaps[]): {
  services: ReadonlyMap<string, ServicePort>;
  endpoints: ReadonlyMap<string, readonly Endpoint[]>;
} {
  // The live maps change with every checkout, so each access asks the families again.
  const parts = <V>(pick: (f: FamilyMaps) => ReadonlyMap<string, V>) =>
    (['IPv4', 'IPv6'] as const).map((family) => ({ family, map: () => pick(families().find((f) => f.family === family) ?? EMPTY_FAMILY) }));
  const renamed = new WeakMap<ServicePort, ServicePort>();
  const rewrite = (sp: ServicePort, family: IPFamily): ServicePort => {
    if (family === 'IPv4') return sp;
    let r = renamed.get(sp);
    if (!r) renamed.set(sp, (r = { ...sp, id: dashboardPortId(sp.id, family) }));
    return r;
  };
  return {
    services: new JoinedMap(
      parts((f) => f.services),
      rewrite,
    ),
    endpoints: new JoinedMap(parts((f) => f.endpoints)),
  };
}

const EMPTY_FAMILY: FamilyMaps = { family: 'IPv4', services: new Map(), endpoints: new Map() };

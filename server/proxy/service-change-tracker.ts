import { ServiceInvalidError } from '../errors.ts';
import type { IPFamily } from '../net/ip.ts';
import type { Service } from './kube-objects.ts';
import { sameServicePort, servicePortsFromService, type ServicePort } from './service-port.ts';

/** ServiceCheckout is what changed in the service map since the last checkout. */
export interface ServiceCheckout {
  /** changed: "ns/name" of every service whose ports were added, changed or removed. */
  readonly changed: ReadonlySet<string>;
  /** deletedUDPClusterIPs: cluster IPs of UDP service ports that went away (their conntrack entries are stale). */
  readonly deletedUDPClusterIPs: ReadonlySet<string>;
}

/** ServiceUpdate is the outcome of one Service event, for logging and counting. */
export type ServiceUpdate =
  | { kind: 'changed' | 'unchanged' }
  | { kind: 'ignored'; reason: string }
  /** invalid: the new object was refused; the service keeps its last valid version. */
  | { kind: 'invalid'; error: Error };

/**
 * ServiceChangeTracker turns Service events into the ServicePort map a proxier
 * programs. Events only record the wanted ports per service; checkout() applies
 * them, so a burst of events for one service costs one diff at sync time.
 */
export class ServiceChangeTracker {
  readonly #family: IPFamily;
  /** applied: what the last checkout handed to the proxier, by service port id. */
  readonly #applied = new Map<string, ServicePort>();
  /** appliedByService: service "ns/name" -> its applied ports. */
  readonly #appliedByService = new Map<string, ServicePort[]>();
  /** pending: service -> wanted ports (empty list = deleted) since the last checkout. */
  readonly #pending = new Map<string, ServicePort[]>();
  /** current: the last valid wanted ports of every known service (applied + pending). */
  readonly #current = new Map<string, ServicePort[]>();

  constructor(family: IPFamily) {
    this.#family = family;
  }

  /** update records a Service add/update (cur set) or delete (cur null). */
  update(key: string, cur: Service | null): ServiceUpdate {
    let ports: ServicePort[] = [];
    let result: ServiceUpdate = { kind: 'changed' };
    if (cur) {
      try {
        const conv = servicePortsFromService(cur, this.#family);
        if (conv.kind === 'ignored') result = { kind: 'ignored', reason: conv.reason };
        else ports = conv.ports;
      } catch (error) {
        // Only a refused object is bad input; anything else is a bug in kproxy and must not pass for one.
        if (!(error instanceof ServiceInvalidError)) throw error;
        return { kind: 'invalid', error };
      }
    }
    const before = this.#current.get(key) ?? [];
    if (samePorts(before, ports)) return result.kind === 'ignored' ? result : { kind: 'unchanged' };
    if (ports.length === 0) this.#current.delete(key);
    else this.#current.set(key, ports);
    this.#pending.set(key, ports);
    // A Service that stops being this proxier's (its family's cluster IP removed,
    // now headless...) must still be synced away: that is a change, not "ignored".
    return result.kind === 'ignored' ? { kind: 'changed' } : result;
  }

  /** pendingCount is the number of services with changes not yet checked out. */
  get pendingCount(): number {
    return this.#pending.size;
  }

  /** ports returns the applied map: service port id -> ServicePort. */
  get ports(): ReadonlyMap<string, ServicePort> {
    return this.#applied;
  }

  /** checkout applies pending changes to the map and reports what changed. */
  checkout(): ServiceCheckout {
    const changed = new Set<string>();
    const deletedUDPClusterIPs = new Set<string>();
    for (const [service, wanted] of this.#pending) {
      const old = this.#appliedByService.get(service) ?? [];
      if (samePorts(old, wanted)) continue;
      changed.add(service);
      const wantedIds = new Set(wanted.map((p) => p.id));
      for (const p of old) {
        if (!wantedIds.has(p.id)) {
          this.#applied.delete(p.id);
          if (p.protocol === 'UDP') deletedUDPClusterIPs.add(p.clusterIP);
        }
      }
      for (const p of wanted) this.#applied.set(p.id, p);
      if (wanted.length === 0) this.#appliedByService.delete(service);
      else this.#appliedByService.set(service, wanted);
    }
    this.#pending.clear();
    return { changed, deletedUDPClusterIPs };
  }
}

function samePorts(a: readonly ServicePort[], b: readonly ServicePort[]): boolean {
  return a.length === b.length && a.every((p, i) => sameServicePort(p, b[i]));
}

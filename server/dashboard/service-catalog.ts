import type { Endpoint } from '../proxy/endpoint.ts';
import { externallyAccessible, type ServicePort } from '../proxy/service-port.ts';
import { categorizeEndpoints } from '../proxy/topology.ts';
import type { ServiceSummary, ServiceWarning } from './protocol.ts';
import type { Yield } from './yield.ts';

/** ServiceModel is the part of the proxy state the service views read. */
export interface ServiceModel {
  readonly services: ReadonlyMap<string, ServicePort>;
  readonly endpoints: ReadonlyMap<string, readonly Endpoint[]>;
  readonly nodeName: string;
  readonly zone: string;
  /** invalid: refused objects, "Service ns/name" -> why. */
  readonly invalid: ReadonlyMap<string, string>;
  /** skipped: why the backend could not program a service port. */
  skipped(servicePortId: string): string | undefined;
}

/** usesLocalPolicy: some traffic to the port is only sent to this node's endpoints. */
function usesLocalPolicy(sp: ServicePort): boolean {
  return sp.internalPolicyLocal || (sp.externalPolicyLocal && externallyAccessible(sp));
}

/** summarize builds one row of the Services list. */
export function summarize(key: string, ports: readonly ServicePort[], model: ServiceModel): ServiceSummary {
  const first = ports[0];
  const byIP = new Map<string, Endpoint>();
  let anyEndpoints = false;
  let noLocal = false;
  let skipped = false;
  const ips = new Set<string>();
  for (const sp of ports) {
    const eps = model.endpoints.get(sp.id) ?? [];
    for (const ep of eps) if (!byIP.has(ep.ip)) byIP.set(ep.ip, ep);
    const cat = categorizeEndpoints(eps, sp, model.nodeName, model.zone);
    if (cat.hasAny) anyEndpoints = true;
    if (cat.hasAny && usesLocalPolicy(sp) && cat.local.length === 0) noLocal = true;
    if (model.skipped(sp.id) !== undefined) skipped = true;
    for (const ip of sp.externalIPs) ips.add(ip);
    for (const ip of sp.loadBalancerVIPs) ips.add(ip);
  }
  const counts = { total: byIP.size, ready: 0, serving: 0, terminating: 0, local: 0 };
  for (const ep of byIP.values()) {
    if (ep.ready) counts.ready++;
    if (ep.serving) counts.serving++;
    if (ep.terminating) counts.terminating++;
    if (ep.isLocal) counts.local++;
  }
  const clusterIPs: string[] = [];
  for (const sp of ports) if (!clusterIPs.includes(sp.clusterIP)) clusterIPs.push(sp.clusterIP);
  const warnings: ServiceWarning[] = [];
  if (!anyEndpoints) warnings.push('no-endpoints');
  if (noLocal) warnings.push('no-local-endpoints');
  if (model.invalid.has(`Service ${key}`)) warnings.push('invalid');
  if (skipped) warnings.push('not-programmed');
  return {
    key,
    namespace: first.namespace,
    name: first.serviceName,
    type: first.type,
    clusterIP: first.clusterIP,
    clusterIPs,
    families: clusterIPs.map(portFamilyOfIP),
    ports: [...new Set(ports.map((sp) => `${sp.port}/${sp.protocol}${sp.nodePort ? `:${sp.nodePort}` : ''}`))],
    ips: [...ips],
    endpoints: counts,
    warnings,
  };
}

/** REFRESH_PER_TURN: services summarized between two turns of the event loop by refreshAll. */
export const REFRESH_PER_TURN = 500;

/** Refreshed is what a refresh changed: the delta a sync sends to dashboards. */
export interface Refreshed {
  readonly upserts: readonly ServiceSummary[];
  readonly removed: readonly string[];
}

/** byPort orders a Service's ports: IPv4 before IPv6 (the dashboard's primary first), then by port and protocol. */
const byPort = (a: ServicePort, b: ServicePort) =>
  Number(a.clusterIP.includes(':')) - Number(b.clusterIP.includes(':')) || a.port - b.port || (a.protocol < b.protocol ? -1 : a.protocol > b.protocol ? 1 : 0);

const portFamilyOfIP = (ip: string) => (ip.includes(':') ? ('IPv6' as const) : ('IPv4' as const));

/**
 * ServiceCatalog keeps the Services list: service ports grouped by Service and
 * a summary per Service, recomputed only for the services a sync changed, so
 * a sync's dashboard delta is proportional to the change and not to the
 * cluster. The sorted list for snapshots is rebuilt only when a key appears
 * or goes.
 */
export class ServiceCatalog {
  #ports = new Map<string, ServicePort[]>();
  #summaries = new Map<string, ServiceSummary>();
  #sorted: ServiceSummary[] | null = null;
  #sortedAt = new Map<string, number>();

  /** refresh recomputes the given services ("all" for every one) from the model. */
  refresh(model: ServiceModel, changed: ReadonlySet<string> | 'all'): Refreshed {
    const { fresh, keys } = this.#gather(model, changed);
    const out = { upserts: [] as ServiceSummary[], removed: [] as string[] };
    for (const key of keys) this.#refreshKey(key, fresh.get(key), model, out);
    return out;
  }

  /**
   * refreshAll recomputes every service, pausing every REFRESH_PER_TURN of
   * them: at 10,000 Services × 10 endpoints summarizing them all held the
   * event loop 270-360 ms in one piece after each full sync. Between two
   * turns the list holds some summaries from before and some from after,
   * each whole; a sync meanwhile is refreshed by the next call.
   */
  async refreshAll(model: ServiceModel, pause: Yield): Promise<Refreshed> {
    const { fresh, keys } = this.#gather(model, 'all');
    const out = { upserts: [] as ServiceSummary[], removed: [] as string[] };
    let n = 0;
    for (const key of keys) {
      this.#refreshKey(key, fresh.get(key), model, out);
      if (++n % REFRESH_PER_TURN === 0) await pause();
    }
    return out;
  }

  /** #gather groups the changed services' ports (one pass over the model's service ports) and lists the keys to refresh. */
  #gather(model: ServiceModel, changed: ReadonlySet<string> | 'all'): { fresh: Map<string, ServicePort[]>; keys: Iterable<string> } {
    const all = changed === 'all';
    const fresh = new Map<string, ServicePort[]>();
    // Ports are keyed by port id, and changes by "ns/name".
    for (const sp of model.services.values()) {
      if (!all && !changed.has(sp.service)) continue;
      let list = fresh.get(sp.service);
      if (!list) fresh.set(sp.service, (list = []));
      list.push(sp);
    }
    return { fresh, keys: all ? new Set([...this.#ports.keys(), ...fresh.keys()]) : changed };
  }

  /** #refreshKey recomputes one service (gone when it has no ports any more). */
  #refreshKey(key: string, ports: ServicePort[] | undefined, model: ServiceModel, out: { upserts: ServiceSummary[]; removed: string[] }): void {
    if (!ports) {
      if (this.#ports.delete(key)) {
        this.#summaries.delete(key);
        out.removed.push(key);
        this.#sorted = null;
      }
      return;
    }
    ports.sort(byPort);
    if (!this.#ports.has(key)) this.#sorted = null;
    this.#ports.set(key, ports);
    const summary = summarize(key, ports, model);
    this.#summaries.set(key, summary);
    const at = this.#sortedAt.get(key);
    if (this.#sorted && at !== undefined) this.#sorted[at] = summary;
    out.upserts.push(summary);
  }

  get size(): number {
    return this.#ports.size;
  }

  ports(key: string): readonly ServicePort[] | undefined {
    return this.#ports.get(key);
  }

  summary(key: string): ServiceSummary | undefined {
    return this.#summaries.get(key);
  }

  /** list returns every summary sorted by "ns/name". */
  list(): readonly ServiceSummary[] {
    if (!this.#sorted) {
      this.#sorted = [...this.#summaries.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
      this.#sortedAt = new Map(this.#sorted.map((s, i) => [s.key, i]));
    }
    return this.#sorted;
  }

  /** counts: services without endpoints, and with a Local policy but no endpoint here. */
  warningCounts(): { noEndpoints: number; noLocalEndpoints: number } {
    let noEndpoints = 0;
    let noLocalEndpoints = 0;
    for (const s of this.#summaries.values()) {
      if (s.warnings.includes('no-endpoints')) noEndpoints++;
      if (s.warnings.includes('no-local-endpoints')) noLocalEndpoints++;
    }
    return { noEndpoints, noLocalEndpoints };
  }
}

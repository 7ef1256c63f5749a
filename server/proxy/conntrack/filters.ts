import { filterKey, type ConntrackFilter, type ConntrackFlow, type ConntrackProtocol } from '../../kernel/conntrack.ts';
import type { Endpoint } from '../endpoint.ts';
import type { StaleEndpoint } from '../endpoints-change-tracker.ts';
import { ipFamilyOf, type IPFamily } from '../../net/ip.ts';
import type { ServicePort } from '../service-port.ts';

/**
 * Which conntrack flows are stale after a sync, as conntrack filters. Pure:
 * plain data in, filters out; the cleaner runs them.
 *
 * Why UDP (and SCTP) only: a TCP connection to a removed endpoint fails and
 * the client reconnects, which creates a new entry through the new rules; a
 * UDP "connection" is just an entry kept alive by the client's packets, so a
 * client that keeps sending stays pinned to the dead endpoint until someone
 * deletes the entry.
 */

/** frontend is one address:port a service port is reached on; origDst is absent for node ports (any node address). */
interface Frontend {
  readonly origDst?: string;
  readonly port: number;
}

/** frontends lists where a service port is reached: cluster IP, external IPs and LB IPs on its port, and its node port. */
function frontends(sp: ServicePort): Frontend[] {
  const out: Frontend[] = [{ origDst: sp.clusterIP, port: sp.port }];
  for (const ip of sp.externalIPs) out.push({ origDst: ip, port: sp.port });
  for (const ip of sp.loadBalancerVIPs) out.push({ origDst: ip, port: sp.port });
  if (sp.nodePort !== 0) out.push({ port: sp.nodePort });
  return out;
}

function dst(fe: Frontend): { origDst?: string; origDstPort: number } {
  return fe.origDst === undefined ? { origDstPort: fe.port } : { origDst: fe.origDst, origDstPort: fe.port };
}

/** connectionlessProtocol maps a service protocol to conntrack's name, or null for TCP. */
export function connectionlessProtocol(sp: ServicePort): ConntrackProtocol | null {
  return sp.protocol === 'UDP' ? 'udp' : sp.protocol === 'SCTP' ? 'sctp' : null;
}

/** StaleFlowsInput is the part of a sync checkout the targeted cleanup reads. */
export interface StaleFlowsInput {
  readonly services: ReadonlyMap<string, ServicePort>;
  /** previous: the service ports of the sync before, for ports this sync removed or changed. */
  readonly previous: ReadonlyMap<string, ServicePort>;
  readonly staleEndpoints: readonly StaleEndpoint[];
  readonly newlyActiveUDPServices: ReadonlySet<string>;
  readonly deletedUDPClusterIPs: ReadonlySet<string>;
}

/** StaleFlows is one sync's cleanup work. */
export interface StaleFlows {
  /** filters: deletions, one conntrack -D each, deduplicated. */
  readonly filters: readonly ConntrackFilter[];
  /**
   * unnatedNodePorts: UDP node ports that just got their first endpoint. Their
   * unNATed entries name whichever node address the client used, which no
   * single filter can express, so they are found by a streamed listing.
   */
  readonly unnatedNodePorts: readonly number[];
}

/**
 * staleFlowFilters returns the targeted cleanup of one sync:
 * - an endpoint that stopped serving: per frontend of its service port,
 *   `-p udp --orig-dst VIP --orig-port-dst PORT --reply-src EP` (node ports:
 *   `--orig-port-dst NODEPORT --reply-src EP`), so other endpoints' flows and
 *   other ports' flows stay;
 * - a service port that just got its first serving endpoint: the entries its
 *   clients made while it had none were never DNATed (the reply would come
 *   from the VIP itself) and would keep their packets away from the endpoint:
 *   `--orig-dst VIP --orig-port-dst PORT --reply-src VIP`; flows already DNATed
 *   stay (kube-proxy before 1.32 deleted every flow to the VIP here, which at
 *   each restart cut all UDP flows); its node port goes to unnatedNodePorts;
 * - the cluster IP of a deleted UDP service port: every UDP flow to it.
 * A frontend that changed in this sync is covered in its old and new form.
 */
export function staleFlowFilters(family: IPFamily, input: StaleFlowsInput): StaleFlows {
  const out = new Map<string, ConntrackFilter>();
  const nodePorts = new Set<number>();
  const add = (f: ConntrackFilter) => {
    if (f.origDst !== undefined && ipFamilyOf(f.origDst) !== family) return;
    if (f.replySrc !== undefined && ipFamilyOf(f.replySrc) !== family) return;
    out.set(filterKey(f), f);
  };
  const portsOf = (id: string) => [input.services.get(id), input.previous.get(id)].filter((sp): sp is ServicePort => sp !== undefined);

  for (const { servicePortId, endpoint } of input.staleEndpoints) {
    for (const sp of portsOf(servicePortId)) {
      const protocol = connectionlessProtocol(sp);
      if (!protocol) continue;
      for (const fe of frontends(sp)) add({ family, protocol, ...dst(fe), replySrc: endpoint.ip });
    }
  }
  for (const id of input.newlyActiveUDPServices) {
    const sp = input.services.get(id);
    const protocol = sp ? connectionlessProtocol(sp) : null;
    if (!sp || !protocol) continue;
    for (const fe of frontends(sp)) {
      if (fe.origDst !== undefined) add({ family, protocol, origDst: fe.origDst, origDstPort: fe.port, replySrc: fe.origDst });
      else if (protocol === 'udp') nodePorts.add(fe.port);
    }
  }
  for (const ip of input.deletedUDPClusterIPs) add({ family, protocol: 'udp', origDst: ip });
  return { filters: [...out.values()], unnatedNodePorts: [...nodePorts] };
}

/**
 * ReconcileIndex answers "is this flow stale?" for the full reconcile, the way
 * kube-proxy's CleanStaleEntries decides it: a UDP flow to a service frontend
 * (VIP:port or node port) whose reply does not come from a serving endpoint
 * of that service. Services without any serving endpoint are left out (their
 * entries would only be made again). It holds one entry per frontend, not
 * per flow, so its size follows the cluster, not the conntrack table.
 */
export class ReconcileIndex {
  readonly #vips = new Map<string, ReadonlySet<string>>();
  readonly #nodePorts = new Map<number, ReadonlySet<string>>();
  readonly family: IPFamily;

  constructor(family: IPFamily, services: ReadonlyMap<string, ServicePort>, endpoints: ReadonlyMap<string, readonly Endpoint[]>) {
    this.family = family;
    for (const [id, sp] of services) {
      if (sp.protocol !== 'UDP') continue;
      const serving = new Set<string>();
      // Policies, topology and termination do not matter here: a flow to any
      // serving endpoint is as valid as a TCP connection to it would be.
      for (const ep of endpoints.get(id) ?? []) if (ep.serving) serving.add(ep.ip);
      if (serving.size === 0) continue;
      for (const fe of frontends(sp)) {
        if (fe.origDst === undefined) this.#nodePorts.set(fe.port, serving);
        else this.#vips.set(`${fe.origDst} ${fe.port}`, serving);
      }
    }
  }

  get size(): number {
    return this.#vips.size + this.#nodePorts.size;
  }

  /**
   * staleFilter returns the deletion for a stale flow, or null. Node ports
   * only claim flows that were DNATed (the reply comes from elsewhere than the
   * address the client sent to): an unNATed flow to that port number belongs to
   * some other host's service. The filter names the flow's own destination, so
   * it removes this frontend's flows and nothing else.
   */
  staleFilter(flow: ConntrackFlow): ConntrackFilter | null {
    if (flow.protocol !== 'udp' || flow.family !== this.family) return null;
    const { orig, reply } = flow;
    const serving = this.#vips.get(`${orig.dst} ${orig.dport}`);
    if (serving) {
      return serving.has(reply.src) ? null : { family: this.family, protocol: 'udp', origDst: orig.dst, origDstPort: orig.dport, replySrc: reply.src };
    }
    const byNodePort = this.#nodePorts.get(orig.dport);
    if (!byNodePort || reply.src === orig.dst || byNodePort.has(reply.src)) return null;
    return { family: this.family, protocol: 'udp', origDst: orig.dst, origDstPort: orig.dport, replySrc: reply.src };
  }
}

/**
 * FilterMatcher tells which of many filters a listed flow matches, with a few
 * map lookups per flow (one per filter shape in use): one listing then
 * decides for every queued deletion whether there is anything to delete, so
 * the table is walked once instead of once per filter.
 */
export class FilterMatcher<T> {
  readonly #byKey = new Map<string, T[]>();
  /** #shapes: which of dst/port/reply the added filters name (bit 4, 2, 1). */
  readonly #shapes = new Set<number>();

  add(f: ConntrackFilter, value: T): void {
    const shape = (f.origDst !== undefined ? 4 : 0) | (f.origDstPort !== undefined ? 2 : 0) | (f.replySrc !== undefined ? 1 : 0);
    this.#shapes.add(shape);
    const key = matchKey(f.family, f.protocol, shape, f.origDst, f.origDstPort, f.replySrc);
    const list = this.#byKey.get(key);
    if (list) list.push(value);
    else this.#byKey.set(key, [value]);
  }

  get size(): number {
    return this.#byKey.size;
  }

  /** match calls onMatch with the value of every added filter the flow matches. */
  match(flow: ConntrackFlow, onMatch: (value: T) => void): void {
    for (const shape of this.#shapes) {
      const key = matchKey(flow.family, flow.protocol, shape, flow.orig.dst, flow.orig.dport, flow.reply.src);
      const list = this.#byKey.get(key);
      if (list) for (const v of list) onMatch(v);
    }
  }
}

function matchKey(family: IPFamily, protocol: string, shape: number, dst: string | undefined, port: number | undefined, reply: string | undefined): string {
  return `${family} ${protocol} ${shape & 4 ? dst : '*'} ${shape & 2 ? port : '*'} ${shape & 1 ? reply : '*'}`;
}

import { canonicalEntry } from '../../kernel/ipset.ts';
import { hostPort } from '../../kernel/ipvs-batch.ts';
import {
  IPSETS,
  KUBE_IPVS_FILTER,
  KUBE_LOAD_BALANCER,
  KUBE_NODE_PORT,
  KUBE_POSTROUTING,
  KUBE_PROXY_FIREWALL,
  KUBE_SERVICES,
  KUBE_SOURCE_RANGES_FIREWALL,
  setName,
  type IpvsIntent,
  type SetKey,
  type WantedVirtualServer,
} from '../../proxy/ipvs/index.ts';
import type { ServicePort } from '../../proxy/service-port.ts';
import type { KernelRule, OwnedChain, ServicePortObjects } from '../kernel-view.ts';
import type { EntryKind, FlowEntry } from '../protocol.ts';
import { SETS_TABLE, virtualServerName } from './tables.ts';

/**
 * The Service page of IPVS mode. A service port owns its virtual servers (one
 * per cluster IP, external IP, LB IP and node address); everything else is
 * shared and matched by set: its entry "rules" are its members of the ipsets
 * and the iptables rules that match those sets (the glue deciding masquerade,
 * source ranges and what INPUT lets through). A new connection meets:
 *
 *   cluster IP   nat KUBE-SERVICES, set KUBE-CLUSTER-IP                         -> virtual server -> real servers
 *   node port    nat KUBE-SERVICES, KUBE-NODE-PORT, set KUBE-NODE-PORT-TCP       -> a virtual server per node address
 *   external IP  nat KUBE-SERVICES, set KUBE-EXTERNAL-IP(-LOCAL)                 -> virtual server
 *   LB IP        nat KUBE-SERVICES, KUBE-LOAD-BALANCER (set and chain),
 *                [set KUBE-LOAD-BALANCER-LOCAL], [filter KUBE-SOURCE-RANGES-FIREWALL] -> virtual server
 *
 * IPVS takes the packet in INPUT, after nat PREROUTING and filter INPUT, as
 * the kernel hooks it (ip_vs at NF_INET_LOCAL_IN, after the filter table).
 */

const ENTRY: Record<WantedVirtualServer['role'], { kind: EntryKind; role: string; order: number }> = {
  'cluster IP': { kind: 'clusterIP', role: 'cluster-ip', order: 0 },
  'node port': { kind: 'nodePort', role: 'node-port', order: 1 },
  'external IP': { kind: 'externalIP', role: 'external-ip', order: 2 },
  'load balancer IP': { kind: 'loadBalancerIP', role: 'load-balancer-ip', order: 3 },
};

/** GLUE: iptables chains whose set matches lead a service's packets (a port's rules there are those matching its sets). */
const GLUE = [
  { table: 'nat', chain: KUBE_SERVICES },
  { table: 'nat', chain: KUBE_NODE_PORT },
  { table: 'nat', chain: KUBE_LOAD_BALANCER },
  { table: 'nat', chain: KUBE_POSTROUTING },
  { table: 'filter', chain: KUBE_PROXY_FIREWALL },
  { table: 'filter', chain: KUBE_SOURCE_RANGES_FIREWALL },
  { table: 'filter', chain: KUBE_NODE_PORT },
  { table: 'filter', chain: KUBE_IPVS_FILTER },
] as const;

const SET_TYPE = new Map(IPSETS.map((i) => [i.key, i.type]));

const NONE: ServicePortObjects = { owned: [], entryChains: [], isEntryRule: () => false, flows: [], endpointObject: () => null };

function nodePortSet(protocol: string, local: boolean): SetKey {
  if (protocol === 'SCTP') return local ? 'nodePortLocalSCTP' : 'nodePortSCTP';
  if (protocol === 'UDP') return local ? 'nodePortLocalUDP' : 'nodePortUDP';
  return local ? 'nodePortLocalTCP' : 'nodePortTCP';
}

/**
 * ipvsServicePort describes one service port's IPVS objects from what the
 * last successful sync built for it (nothing when it was skipped or no sync
 * ran yet: the page then shows the port without a picture).
 */
export function ipvsServicePort(sp: ServicePort, planned: IpvsIntent | null): ServicePortObjects {
  const objs = planned?.objects(sp.id) ?? null;
  if (!planned || !objs) return NONE;
  const family = planned.family;
  const set = (k: SetKey) => setName(k, family);

  // Its sets and members, spelled as `ipset save` lists them.
  const setNames = new Set<string>();
  const members = new Set<string>();
  const entryChains: { table: string; chain: string }[] = [];
  for (const info of IPSETS) {
    const list = objs.entries.get(info.key);
    if (!list?.length) continue;
    setNames.add(set(info.key));
    entryChains.push({ table: SETS_TABLE, chain: set(info.key) });
    for (const e of list) members.add(canonicalEntry(SET_TYPE.get(info.key)!, e) ?? e);
  }
  entryChains.push(...GLUE);
  const hasNodePort = objs.virtualServers.some((w) => w.role === 'node port');
  const isEntryRule = (rule: KernelRule): boolean => {
    const m = /--match-set (\S+)/.exec(rule.spec);
    if (m) return setNames.has(m[1]);
    // nat KUBE-SERVICES hands packets to local addresses (node ports) to KUBE-NODE-PORT.
    if (rule.target === KUBE_NODE_PORT) return hasNodePort;
    return members.has(rule.spec);
  };

  const draining = new Map<string, number>();
  for (const d of planned.draining) draining.set(d.vsKey, (draining.get(d.vsKey) ?? 0) + 1);
  const ranges = sp.loadBalancerSourceRanges;
  const sorted = [...objs.virtualServers].sort((a, b) => ENTRY[a.role].order - ENTRY[b.role].order);
  const flows: FlowEntry[] = [];
  const owned: OwnedChain[] = [];
  for (const w of sorted) {
    const entry = ENTRY[w.role];
    const name = virtualServerName(w.vs);
    owned.push({ table: 'ipvs', chain: name, role: entry.role });
    const internal = w.role === 'cluster IP';
    const local = internal ? sp.internalPolicyLocal : sp.externalPolicyLocal;
    const path: string[] = [KUBE_SERVICES];
    const notes: string[] = [];
    switch (w.role) {
      case 'cluster IP':
        path.push(set('clusterIP'));
        break;
      case 'external IP':
        path.push(set(local ? 'externalIPLocal' : 'externalIP'));
        break;
      case 'load balancer IP':
        path.push(KUBE_LOAD_BALANCER);
        if (local) path.push(set('loadBalancerLocal'));
        if (ranges.length) {
          path.push(KUBE_SOURCE_RANGES_FIREWALL);
          notes.push(`only from ${ranges.join(', ')}: filter KUBE-PROXY-FIREWALL sends ${set('loadBalancerFW')} members to KUBE-SOURCE-RANGES-FIREWALL, which drops other sources`);
        }
        break;
      case 'node port':
        path.push(KUBE_NODE_PORT, set(nodePortSet(w.vs.protocol, local)));
        break;
    }
    path.push(name);
    if (local && (internal ? objs.noLocalInternal : objs.noLocalExternal)) {
      notes.push(
        internal
          ? 'internalTrafficPolicy Local and no endpoint on this node: falls back to every endpoint, as kube-proxy does (kubernetes#97081)'
          : 'externalTrafficPolicy Local and no endpoint on this node: falls back to every endpoint (kubernetes#97081); pods here still reach the service, outside clients get no answer',
      );
    } else if (local && !internal) {
      notes.push("externalTrafficPolicy Local: only this node's endpoints, and the client address is kept (no masquerade)");
    }
    const n = draining.get(w.key) ?? 0;
    if (n > 0) notes.push(`${n} real server${n === 1 ? '' : 's'} draining at weight 0: no new connections, open ones go on until they end (15 min at most)`);
    const reject = w.reals.size === 0;
    if (reject) notes.unshift('no real server takes new connections: IPVS answers them with ICMP port unreachable');
    flows.push({
      kind: entry.kind,
      address: `${hostPort(w.vs.address, w.vs.port)}/${w.vs.protocol}`,
      path,
      policy: local ? 'Local' : 'Cluster',
      outcome: reject ? 'reject' : 'endpoints',
      ...(notes.length ? { note: notes.join('; ') } : {}),
    });
  }

  return {
    owned,
    entryChains,
    isEntryRule,
    flows,
    // The cluster IP's virtual server first: every endpoint in use is one of its real servers unless a Local policy narrows it.
    endpointObject: (key) => {
      const w = sorted.find((v) => v.reals.has(key));
      return w ? virtualServerName(w.vs) : null;
    },
  };
}

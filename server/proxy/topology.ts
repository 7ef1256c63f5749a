import type { Endpoint } from './endpoint.ts';
import { usesClusterEndpoints, usesLocalEndpoints, type ServicePort } from './service-port.ts';

/** CategorizedEndpoints is what a backend programs for one service port on this node. */
export interface CategorizedEndpoints {
  /** cluster: usable endpoints for "Cluster" policy (topology applied); empty if the port never uses it. */
  readonly cluster: readonly Endpoint[];
  /** local: usable endpoints on this node for "Local" policy; empty if the port never uses it. */
  readonly local: readonly Endpoint[];
  /** allReachable: union of cluster and local. */
  readonly allReachable: readonly Endpoint[];
  /** hasAny: some usable endpoint exists anywhere in the cluster (even if none is reachable from here). */
  readonly hasAny: boolean;
  /** topologyMode: "" (none), "PreferSameZone" or "PreferSameNode", as decided from hints. */
  readonly topologyMode: '' | 'PreferSameZone' | 'PreferSameNode';
}

const EMPTY: CategorizedEndpoints = { cluster: [], local: [], allReachable: [], hasAny: false, topologyMode: '' };

/**
 * categorizeEndpoints follows kube-proxy's CategorizeEndpoints: ready endpoints
 * are used by default; when none is ready, serving+terminating endpoints are the
 * fallback (separately for Cluster and Local); topology hints narrow the Cluster
 * set to this node or zone only when every ready endpoint carries a hint and one
 * names this node/zone.
 */
export function categorizeEndpoints(endpoints: readonly Endpoint[] | undefined, sp: ServicePort, nodeName: string, zone: string): CategorizedEndpoints {
  if (!endpoints || endpoints.length === 0) return EMPTY;
  let cluster: readonly Endpoint[] = [];
  let local: readonly Endpoint[] = [];
  let hasAny = false;
  let topologyMode: CategorizedEndpoints['topologyMode'] = '';
  let useServingTerminating = false;

  if (usesClusterEndpoints(sp)) {
    topologyMode = topologyModeFromHints(endpoints, nodeName, zone);
    cluster = endpoints.filter((ep) => ep.ready && availableForTopology(ep, topologyMode, nodeName, zone));
    if (cluster.length === 0) cluster = endpoints.filter((ep) => ep.serving && ep.terminating);
    if (cluster.length > 0) hasAny = true;
  }
  if (!usesLocalEndpoints(sp)) return { cluster, local, allReachable: cluster, hasAny, topologyMode };

  let hasLocalReady = false;
  let hasLocalServingTerminating = false;
  for (const ep of endpoints) {
    if (ep.ready) {
      hasAny = true;
      if (ep.isLocal) hasLocalReady = true;
    } else if (ep.serving && ep.terminating) {
      hasAny = true;
      if (ep.isLocal) hasLocalServingTerminating = true;
    }
  }
  if (hasLocalReady) {
    local = endpoints.filter((ep) => ep.isLocal && ep.ready);
  } else if (hasLocalServingTerminating) {
    useServingTerminating = true;
    local = endpoints.filter((ep) => ep.isLocal && ep.serving && ep.terminating);
  }
  if (!usesClusterEndpoints(sp)) return { cluster, local, allReachable: local, hasAny, topologyMode };
  if (topologyMode === '' && !useServingTerminating) {
    // cluster holds every ready endpoint and local only ready ones: cluster is a superset.
    return { cluster, local, allReachable: cluster, hasAny, topologyMode };
  }
  const merged = new Map<string, Endpoint>();
  for (const ep of cluster) merged.set(ep.key, ep);
  for (const ep of local) merged.set(ep.key, ep);
  const allReachable = [...merged.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  return { cluster, local, allReachable, hasAny, topologyMode };
}

function topologyModeFromHints(endpoints: readonly Endpoint[], nodeName: string, zone: string): CategorizedEndpoints['topologyMode'] {
  let hasReady = false;
  let hasForNode = false;
  let allHaveNodeHints = true;
  let hasForZone = false;
  let allHaveZoneHints = true;
  for (const ep of endpoints) {
    if (!ep.ready) continue;
    hasReady = true;
    if (ep.nodeHints.length === 0) allHaveNodeHints = false;
    else if (ep.nodeHints.includes(nodeName)) hasForNode = true;
    if (ep.zoneHints.length === 0) allHaveZoneHints = false;
    else if (ep.zoneHints.includes(zone)) hasForZone = true;
  }
  if (!hasReady) return '';
  if (allHaveNodeHints && hasForNode) return 'PreferSameNode';
  if (allHaveZoneHints && hasForZone && zone !== '') return 'PreferSameZone';
  return '';
}

function availableForTopology(ep: Endpoint, mode: CategorizedEndpoints['topologyMode'], nodeName: string, zone: string): boolean {
  if (mode === '') return true;
  if (mode === 'PreferSameNode') return ep.nodeHints.includes(nodeName);
  return ep.zoneHints.includes(zone);
}

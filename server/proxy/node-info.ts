import { objectIP, parseCIDR, type IPFamily } from '../net/ip.ts';
import { LABEL_TOPOLOGY_ZONE, TAINT_TO_BE_DELETED, type Node } from './kube-objects.ts';

/** NodeInfo is what kproxy knows about its own Node. */
export interface NodeInfo {
  readonly name: string;
  /** known: a Node object for this name has been seen (false: only the name is known). */
  readonly known: boolean;
  readonly labels: Readonly<Record<string, string>>;
  /** zone is the topology.kubernetes.io/zone label ("" when unset). */
  readonly zone: string;
  /** deleting: the Node has a deletionTimestamp. */
  readonly deleting: boolean;
  /** toBeDeleted: the Node carries the cluster autoscaler's ToBeDeletedByClusterAutoscaler taint. */
  readonly toBeDeleted: boolean;
  readonly podCIDRs: readonly string[];
  /**
   * addresses: the Node's InternalIP addresses, then its ExternalIP ones, in
   * status order (kube-proxy's GetNodeHostIPs order: the first of each family is
   * that family's node IP). IPv4-mapped IPv6 and malformed entries are dropped.
   */
  readonly addresses: readonly string[];
}

/** unknownNode is the NodeInfo before (or without) a Node object. */
export function unknownNode(name: string): NodeInfo {
  return { name, known: false, labels: {}, zone: '', deleting: false, toBeDeleted: false, podCIDRs: [], addresses: [] };
}

/**
 * nodeNotFound says that no Node has this node's name, once the API server listed
 * them: a mistyped or defaulted node name (kube-proxy waits for its Node, then
 * fails to start). --once, the log and the dashboard say it (/readyz in fixed words).
 */
export function nodeNotFound(name: string): string {
  return `Node ${name} not found in the cluster (check --hostname-override): which endpoints are local, and the node's addresses, are unknown`;
}

/** nodeInfoFromNode reads a Node object; malformed fields are dropped rather than fatal. */
export function nodeInfoFromNode(name: string, node: Node | null): NodeInfo {
  if (!node) return unknownNode(name);
  const labels: Record<string, string> = {};
  for (const [k, v] of Object.entries(node.metadata?.labels ?? {})) if (typeof v === 'string') labels[k] = v;
  const cidrs = node.spec?.podCIDRs?.length ? node.spec.podCIDRs : node.spec?.podCIDR ? [node.spec.podCIDR] : [];
  return {
    name,
    known: true,
    labels,
    zone: labels[LABEL_TOPOLOGY_ZONE] ?? '',
    deleting: node.metadata?.deletionTimestamp != null && node.metadata.deletionTimestamp !== '',
    toBeDeleted: Array.isArray(node.spec?.taints) && node.spec.taints.some((t) => t?.key === TAINT_TO_BE_DELETED),
    podCIDRs: (Array.isArray(cidrs) ? cidrs : []).map((c) => parseCIDR(c)?.text).filter((c): c is string => !!c),
    addresses: nodeAddresses(node),
  };
}

/** topologyChanged: a change that alters which endpoints this node uses (zone, name, pod CIDRs). */
export function topologyChanged(a: NodeInfo, b: NodeInfo): boolean {
  return a.zone !== b.zone || a.podCIDRs.join(',') !== b.podCIDRs.join(',');
}

function nodeAddresses(node: Node): string[] {
  const listed = Array.isArray(node.status?.addresses) ? node.status.addresses : [];
  const out: string[] = [];
  for (const type of ['InternalIP', 'ExternalIP']) {
    for (const a of listed) {
      if (a?.type !== type) continue;
      const parsed = objectIP(a.address);
      if (parsed.ip !== null && !out.includes(parsed.ip)) out.push(parsed.ip);
    }
  }
  return out;
}

/**
 * nodeIPOf returns the node's IP of one family (its first InternalIP of that
 * family, else its first ExternalIP), or null when the Node lists none: the
 * address kube-proxy's proxier of that family uses as "the node IP".
 */
export function nodeIPOf(node: Pick<NodeInfo, 'addresses'>, family: IPFamily): string | null {
  return node.addresses.find((a) => a.includes(':') === (family === 'IPv6')) ?? null;
}

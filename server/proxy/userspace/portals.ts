import type { IPFamily } from '../../net/ip.ts';
import { chainLine, comment } from '../xtables/restore-writer.ts';
import type { LocalDetector } from '../local-detector.ts';
import type { ServicePort } from '../service-port.ts';
import type { Pool } from './relay-stats.ts';

/**
 * The userspace mode's iptables rules, kube-proxy's userspace "portals"
 * (pkg/proxy/userspace/proxier.go): nat rules that send a service's addresses
 * to the proxy socket kproxy listens on. Pure: plain data in, restore text out.
 *
 *   nat PREROUTING  -> KUBE-PORTALS-CONTAINER   cluster, external and LB IPs, from pods and the network
 *                   -> KUBE-NODEPORT-CONTAINER  node ports (the jump is the chain's last rule)
 *   nat OUTPUT      -> KUBE-PORTALS-HOST        the same addresses, from the node itself
 *                   -> KUBE-NODEPORT-HOST       node ports from the node itself (last rule)
 *   filter INPUT    -> KUBE-NODEPORT-NON-LOCAL  accepts new connections to node ports' proxy sockets
 *
 * Traffic arriving from outside the node is REDIRECTed to the proxy port
 * (the address it arrived on answers, so conntrack undoes it for UDP
 * replies); with a specific bind address it is DNATed to that address.
 * The node's own traffic is DNATed to the host IP (REDIRECT would answer
 * from 127.0.0.1, which breaks UDP clients such as DNS resolvers).
 */

export const KUBE_PORTALS_CONTAINER = 'KUBE-PORTALS-CONTAINER';
export const KUBE_PORTALS_HOST = 'KUBE-PORTALS-HOST';
export const KUBE_NODEPORT_CONTAINER = 'KUBE-NODEPORT-CONTAINER';
export const KUBE_NODEPORT_HOST = 'KUBE-NODEPORT-HOST';
export const KUBE_NODEPORT_NON_LOCAL = 'KUBE-NODEPORT-NON-LOCAL';

/** PORTAL_CHAINS: the mode's chains per table, in the order they are written. */
export const PORTAL_CHAINS = {
  nat: [KUBE_PORTALS_CONTAINER, KUBE_PORTALS_HOST, KUBE_NODEPORT_CONTAINER, KUBE_NODEPORT_HOST],
  filter: [KUBE_NODEPORT_NON_LOCAL],
} as const;

/** PortalJump is one rule in a built-in chain that leads into a portal chain. */
export interface PortalJump {
  readonly table: 'nat' | 'filter';
  readonly from: string;
  readonly to: string;
  /** position: "first" rules are inserted at the top, "last" appended (the node port jumps must come after everything). */
  readonly position: 'first' | 'last';
  /** args: the rule words as iptables-save lists them (comment unquoted, one word). */
  readonly args: readonly string[];
}

const CLUSTER_IPS_COMMENT = 'handle ClusterIPs; NOTE: this must be before the NodePort rules';
const NODE_PORTS_COMMENT = 'handle service NodePorts; NOTE: this must be the last rule in the chain';
const LOCAL = ['-m', 'addrtype', '--dst-type', 'LOCAL'];

/** PORTAL_JUMPS are kube-proxy's iptablesInit rules, in its order. */
export const PORTAL_JUMPS: readonly PortalJump[] = [
  { table: 'nat', from: 'PREROUTING', to: KUBE_PORTALS_CONTAINER, position: 'first', args: ['-m', 'comment', '--comment', CLUSTER_IPS_COMMENT, '-j', KUBE_PORTALS_CONTAINER] },
  { table: 'nat', from: 'OUTPUT', to: KUBE_PORTALS_HOST, position: 'first', args: ['-m', 'comment', '--comment', CLUSTER_IPS_COMMENT, '-j', KUBE_PORTALS_HOST] },
  { table: 'nat', from: 'PREROUTING', to: KUBE_NODEPORT_CONTAINER, position: 'last', args: [...LOCAL, '-m', 'comment', '--comment', NODE_PORTS_COMMENT, '-j', KUBE_NODEPORT_CONTAINER] },
  { table: 'nat', from: 'OUTPUT', to: KUBE_NODEPORT_HOST, position: 'last', args: [...LOCAL, '-m', 'comment', '--comment', NODE_PORTS_COMMENT, '-j', KUBE_NODEPORT_HOST] },
  {
    table: 'filter',
    from: 'INPUT',
    to: KUBE_NODEPORT_NON_LOCAL,
    position: 'first',
    args: ['-m', 'comment', '--comment', 'Ensure that non-local NodePort traffic can flow', '-j', KUBE_NODEPORT_NON_LOCAL],
  },
];

/** jumpLine renders a jump as restore input: "-I FROM 1 …" for the first rules, "-A FROM …" for the last. */
export function jumpLine(j: PortalJump): string {
  const words = j.args.map((a, i) => (j.args[i - 1] === '--comment' ? comment(a) : a));
  return [j.position === 'first' ? `-I ${j.from} 1` : `-A ${j.from}`, ...words].join(' ');
}

/** PortalContext is what the rules need to know about the node. */
export interface PortalContext {
  readonly family: IPFamily;
  /** listenIP: the address proxy sockets are bound to (bindAddress); the wildcard means REDIRECT for arriving traffic. */
  readonly listenIP: string;
  /** hostIP: where the node's own traffic is DNATed (its primary address of the family). */
  readonly hostIP: string;
  /** nodePortIPs: null accepts node ports on every local address (kube-proxy's default), else on these. */
  readonly nodePortIPs: readonly string[] | null;
  /** localDetector: how to tell this node's pods (their traffic to an ETP Local address takes the Cluster endpoints). */
  readonly localDetector: LocalDetector;
}

/** PortalEntry is one service port with its proxy sockets' ports. */
export interface PortalEntry {
  readonly sp: ServicePort;
  /** ports: the proxy port of each pool the service port has (a pool without one is null). */
  readonly ports: Readonly<Record<Pool, number | null>>;
  /** nodePort: its node port was claimed (false: a claim failed, no node port rules). */
  readonly nodePort: boolean;
  /** skipIPs: external IPs whose claim on this node failed (their rules are left out). */
  readonly skipIPs?: ReadonlySet<string>;
}

/** PortalRule is one rule a service port owns, for the dashboard. */
export interface PortalRule {
  readonly table: 'nat' | 'filter';
  readonly chain: string;
  /** spec: the rule without "-A CHAIN", as iptables-save lists it. */
  readonly spec: string;
  /** pool: the proxy socket it leads to. */
  readonly pool: Pool;
}

export interface Portals {
  /** rules: per service port id, its rules in chain order. */
  readonly rules: ReadonlyMap<string, readonly PortalRule[]>;
  readonly rulesByTable: { readonly nat: number; readonly filter: number };
}

function wildcard(ip: string): boolean {
  return ip === '0.0.0.0' || ip === '::';
}

function hostPort(ip: string, port: number): string {
  return ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/** poolFor: which proxy socket traffic of a kind goes to (the Local one exists when the policy is Local). */
function poolFor(e: PortalEntry, local: boolean): { pool: Pool; port: number } | null {
  const pool: Pool = local ? 'local' : 'cluster';
  const port = e.ports[pool];
  return port === null ? null : { pool, port };
}

/**
 * buildPortals writes every service port's rules. Per service port (its name
 * as the rule comment, as upstream):
 *
 * - cluster IP and each LB IP: one KUBE-PORTALS-CONTAINER rule and one
 *   KUBE-PORTALS-HOST rule;
 * - each external IP: two KUBE-PORTALS-CONTAINER rules (arriving from outside
 *   a bridge, `-m physdev ! --physdev-is-in`, and to a local address) and one
 *   KUBE-PORTALS-HOST rule for a local address, as upstream;
 * - a node port: KUBE-NODEPORT-CONTAINER and KUBE-NODEPORT-HOST rules (one
 *   per node port address when --nodeport-addresses narrows them), and a
 *   KUBE-NODEPORT-NON-LOCAL rule accepting new connections to its proxy port.
 *
 * Traffic policies pick the socket: the cluster IP follows
 * internalTrafficPolicy; node ports, external and LB IPs follow
 * externalTrafficPolicy, except the node's own traffic and its pods' (when
 * the local detector can tell them), which take the Cluster endpoints as in
 * kube-proxy's other modes.
 */
export function buildPortals(ctx: PortalContext, entries: readonly PortalEntry[]): Portals {
  const rules = new Map<string, PortalRule[]>();
  let nat = 0;
  let filter = 0;
  const bits = ctx.family === 'IPv6' ? 128 : 32;
  for (const e of entries) {
    const sp = e.sp;
    const out: PortalRule[] = [];
    const proto = sp.protocol.toLowerCase();
    // Words in iptables-save's order (-s, -d, -i, -p, then matches), so the listing compares equal to what was written.
    const base = (dst: string | null, dport: number, local: readonly string[] = []) => {
      const source = local[0] === '-s' ? local : [];
      const iface = local[0] === '-s' ? [] : local;
      return [...source, ...(dst ? ['-d', `${dst}/${bits}`] : []), ...iface, '-p', proto, '-m', 'comment', '--comment', comment(sp.name), '-m', proto, '--dport', String(dport)];
    };
    const fromOutside = (port: number) => (wildcard(ctx.listenIP) ? ['-j', 'REDIRECT', '--to-ports', String(port)] : ['-j', 'DNAT', '--to-destination', hostPort(ctx.listenIP, port)]);
    const fromHost = (port: number) => ['-j', 'DNAT', '--to-destination', hostPort(wildcard(ctx.listenIP) ? ctx.hostIP : ctx.listenIP, port)];
    const add = (table: 'nat' | 'filter', chain: string, words: string[], pool: Pool) => {
      out.push({ table, chain, spec: words.join(' '), pool });
      if (table === 'nat') nat++;
      else filter++;
    };
    const internal = poolFor(e, sp.internalPolicyLocal);
    const external = poolFor(e, sp.externalPolicyLocal);
    // The node's own traffic and its pods' to an ETP Local address short-circuit to the Cluster endpoints.
    const shortCircuit = sp.externalPolicyLocal ? poolFor(e, false) : null;
    const podShortCircuit = shortCircuit && ctx.localDetector.implemented ? shortCircuit : null;
    const hostExternal = shortCircuit ?? external;

    if (internal) {
      add('nat', KUBE_PORTALS_CONTAINER, [...base(sp.clusterIP, sp.port), ...fromOutside(internal.port)], internal.pool);
      add('nat', KUBE_PORTALS_HOST, [...base(sp.clusterIP, sp.port), ...fromHost(internal.port)], internal.pool);
    }
    if (external) {
      for (const ip of sp.externalIPs) {
        if (e.skipIPs?.has(ip)) continue;
        if (podShortCircuit) add('nat', KUBE_PORTALS_CONTAINER, [...base(ip, sp.port, ctx.localDetector.ifLocal), ...fromOutside(podShortCircuit.port)], podShortCircuit.pool);
        add('nat', KUBE_PORTALS_CONTAINER, [...base(ip, sp.port), '-m', 'physdev', '!', '--physdev-is-in', ...fromOutside(external.port)], external.pool);
        add('nat', KUBE_PORTALS_CONTAINER, [...base(ip, sp.port), ...LOCAL, ...fromOutside(external.port)], external.pool);
        add('nat', KUBE_PORTALS_HOST, [...base(ip, sp.port), ...LOCAL, ...fromHost(hostExternal!.port)], hostExternal!.pool);
      }
      for (const ip of sp.loadBalancerVIPs) {
        if (podShortCircuit) add('nat', KUBE_PORTALS_CONTAINER, [...base(ip, sp.port, ctx.localDetector.ifLocal), ...fromOutside(podShortCircuit.port)], podShortCircuit.pool);
        add('nat', KUBE_PORTALS_CONTAINER, [...base(ip, sp.port), ...fromOutside(external.port)], external.pool);
        add('nat', KUBE_PORTALS_HOST, [...base(ip, sp.port), ...fromHost(hostExternal!.port)], hostExternal!.pool);
      }
      if (sp.nodePort !== 0 && e.nodePort) {
        const dsts = ctx.nodePortIPs ?? [null];
        for (const ip of dsts) {
          if (podShortCircuit) add('nat', KUBE_NODEPORT_CONTAINER, [...base(ip, sp.nodePort, ctx.localDetector.ifLocal), ...fromOutside(podShortCircuit.port)], podShortCircuit.pool);
          add('nat', KUBE_NODEPORT_CONTAINER, [...base(ip, sp.nodePort), ...fromOutside(external.port)], external.pool);
        }
        for (const ip of dsts) add('nat', KUBE_NODEPORT_HOST, [...base(ip, sp.nodePort), ...fromHost(hostExternal!.port)], hostExternal!.pool);
        const accepted = new Set([external.port, ...(podShortCircuit ? [podShortCircuit.port] : [])]);
        for (const port of accepted) {
          add('filter', KUBE_NODEPORT_NON_LOCAL, [...base(null, port), '-m', 'state', '--state', 'NEW', '-j', 'ACCEPT'], port === external.port ? external.pool : podShortCircuit!.pool);
        }
      }
    }
    rules.set(sp.id, out);
  }
  return { rules, rulesByTable: { nat, filter } };
}

/**
 * portalsRestoreText renders the portals as one iptables-restore input (with
 * --noflush): each portal chain declared (which empties it) and refilled, in
 * service port order, plus the jumps a full sync found missing.
 */
export function portalsRestoreText(portals: Portals, order: readonly string[], missingJumps: readonly PortalJump[] = []): { text: string; lines: number } {
  const lines: string[] = [];
  for (const table of ['nat', 'filter'] as const) {
    lines.push(`*${table}`);
    for (const chain of PORTAL_CHAINS[table]) lines.push(chainLine(chain));
    for (const j of missingJumps) if (j.table === table) lines.push(jumpLine(j));
    for (const chain of PORTAL_CHAINS[table]) {
      for (const id of order) for (const r of portals.rules.get(id) ?? []) if (r.table === table && r.chain === chain) lines.push(`-A ${chain} ${r.spec}`);
    }
    lines.push('COMMIT');
  }
  return { text: lines.join('\n') + '\n', lines: lines.length };
}

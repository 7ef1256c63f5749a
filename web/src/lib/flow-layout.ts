import { fmtPercent } from './format.ts';
import { realServers } from './ipvs-view.ts';
import { nftSub } from './nft-view.ts';
import type { ChainView, EndpointRow, EntryKind, KernelKind, PortDetail } from './protocol.ts';

export type NodeKind = 'entry' | 'chain' | 'endpoint' | 'refuse' | 'more';

export interface FlowNode {
  readonly id: string;
  readonly kind: NodeKind;
  readonly label: string;
  readonly sub: string;
  readonly x: number;
  readonly y: number;
  readonly w: number;
  readonly h: number;
  /** tone: ok (ready endpoint), warn (terminating fallback), bad (refused). */
  readonly tone: 'ok' | 'warn' | 'bad' | 'none';
  /** chain: the chain name, for a link to its rules. */
  readonly chain?: string;
}

export interface FlowEdge {
  readonly id: string;
  readonly d: string;
  readonly label: string;
  readonly lx: number;
  readonly ly: number;
  readonly tone: 'ok' | 'warn' | 'bad' | 'none';
}

export interface FlowPicture {
  readonly nodes: readonly FlowNode[];
  readonly edges: readonly FlowEdge[];
  readonly width: number;
  readonly height: number;
}

const ENTRY_LABEL: Record<EntryKind, string> = {
  clusterIP: 'Cluster IP',
  nodePort: 'Node port',
  externalIP: 'External IP',
  loadBalancerIP: 'Load balancer IP',
};

const ROLE_LABEL: Record<string, string> = {
  entry: 'entry rules',
  service: 'Cluster policy: all endpoints',
  local: 'Local policy: this node only',
  external: 'external traffic',
  firewall: 'source ranges',
};

/** MAX_ENDPOINTS drawn per policy chain; the rest are one "+N more" box. */
export const MAX_ENDPOINTS = 8;

const H = 46;
const GAP_X = 44;
const GAP_Y = 14;
const MIN_W = 120;
/** DUMMY_H: height of a waypoint of an edge that crosses a column. */
const DUMMY_H = 6;
const MAX_W = 230;

/** textWidth estimates rendered text width: monospace labels (chains, endpoints) 6.9 px a character at 11.5 px, others about 7. */
function textWidth(text: string, mono: boolean, max: number): number {
  return Math.min(text.length, max) * (mono ? 6.9 : 6.6);
}

/** boxWidth fits a box to its label and sub-label (the SVG truncates beyond MAX_W). */
function boxWidth(n: { kind: NodeKind; label: string; sub: string }): number {
  const mono = n.kind === 'chain' || n.kind === 'endpoint';
  // Kernel names run to 28 characters (iptables' limit; "TCP [2001:db8::a]:443" in IPVS).
  const w = Math.max(textWidth(n.label, mono, mono ? 28 : 25), textWidth(n.sub, false, 32) * 0.92) + 26;
  return Math.round(Math.min(MAX_W, Math.max(MIN_W, w)));
}

interface Pending {
  id: string;
  kind: NodeKind;
  label: string;
  sub: string;
  tone: FlowNode['tone'];
  layer: number;
  chain?: string;
}

/** ipvsSub labels an object on an IPVS path: a virtual server, a set match or an iptables chain. */
function ipvsSub(name: string, chains: readonly ChainView[]): string {
  const vs = chains.find((c) => c.table === 'ipvs' && c.name === name);
  if (vs) return vs.ipvs ? `virtual server · ${vs.ipvs.scheduler}${vs.ipvs.persistence ? ' · persistent' : ''}` : 'virtual server';
  const isSet = chains.some((c) => c.table === 'ipsets' && c.name === name);
  // A chain the page lists, or one its rules jump to (KUBE-SERVICES' set match jumps to the KUBE-LOAD-BALANCER chain).
  // ip6-nat and ip6-filter are the IPv6 family's tables (ip6tables).
  const iptables = chains.filter((c) => /^(ip6-)?(nat|filter)$/.test(c.table));
  const table = (iptables.find((c) => c.name === name) ?? iptables.find((c) => c.rules.some((r) => r.target === name)))?.table;
  if (isSet && table) return `ipset match → ${table} chain`;
  if (isSet) return 'ipset match';
  return table ? `${table} chain` : '';
}

/**
 * flowLayout draws how a new connection to one service port travels: each
 * way in (cluster IP, node port, external and load balancer IPs) on the left,
 * the kernel objects it meets in the middle, and the endpoints it can end at
 * on the right with each one's share, or the REJECT/DROP that refuses it.
 * Columns are the longest-path layers of that graph; the result is plain
 * boxes and curves for an SVG. In IPVS mode (kind "ipvs") the path ends at a
 * virtual server and the right column holds its real servers, each with its
 * weight's share, draining ones (weight 0) included. In nftables mode the path
 * starts at the verdict map element the port has ("@service-ips") and each box
 * says what the map or chain does (numgen, affinity sets, source ranges).
 */
export function flowLayout(port: PortDetail, kind: KernelKind = 'iptables'): FlowPicture {
  const nodes = new Map<string, Pending>();
  const edges: { from: string; to: string; label: string; tone: FlowEdge['tone'] }[] = [];
  // An entry chain (KUBE-SERVICES…) may also be listed for other tables: a chain's own role wins.
  const roleOf = new Map<string, string>();
  for (const c of port.chains) if (c.role !== 'entry' || !roleOf.has(c.name)) roleOf.set(c.name, c.role);
  const add = (n: Pending) => {
    const cur = nodes.get(n.id);
    if (!cur) nodes.set(n.id, n);
    else cur.layer = Math.max(cur.layer, n.layer);
    return n.id;
  };
  const edge = (from: string, to: string, label = '', tone: FlowEdge['tone'] = 'none') => {
    if (!edges.some((e) => e.from === from && e.to === to)) edges.push({ from, to, label, tone });
  };

  const maxPath = Math.max(1, ...port.flows.map((f) => f.path.length));
  const last = maxPath + 1;
  const policyChains = new Map<string, 'Cluster' | 'Local'>();
  const virtualServers = new Set<string>();
  port.flows.forEach((f, i) => {
    const entry = add({ id: `entry:${i}`, kind: 'entry', label: ENTRY_LABEL[f.kind], sub: f.address, tone: 'none', layer: 0 });
    let prev = entry;
    f.path.forEach((chain, j) => {
      const terminal = f.outcome === 'endpoints' && j === f.path.length - 1;
      const role = roleOf.get(chain);
      const sub = kind === 'ipvs' ? ipvsSub(chain, port.chains) : kind === 'nftables' ? nftSub(chain, role, port.chains) : role ? (ROLE_LABEL[role] ?? role) : '';
      const id = add({ id: `chain:${chain}`, kind: 'chain', label: chain, sub, tone: 'none', layer: terminal ? maxPath : j + 1, chain });
      edge(prev, id);
      prev = id;
    });
    // A virtual server that refuses new connections may still hold draining real servers.
    if (kind === 'ipvs' && f.outcome !== 'endpoints' && f.path.length) virtualServers.add(f.path.at(-1)!);
    if (f.outcome === 'endpoints') {
      policyChains.set(f.path.at(-1)!, f.policy);
    } else {
      const id = add({
        id: `refuse:${f.outcome}:${i}`,
        kind: 'refuse',
        label: f.outcome === 'reject' ? 'REJECT' : 'DROP',
        sub: f.outcome === 'reject' ? 'no endpoints: refused' : 'dropped (see the note below)',
        tone: 'bad',
        layer: last,
      });
      edge(prev, id, '', 'bad');
    }
  });

  const byKey = new Map(port.endpoints.map((e) => [e.key, e]));
  // Virtual servers of one port usually share their real servers and weights: a real server's
  // share is written once (on the edge from the first virtual server reaching it), and again
  // only where another virtual server gives it a different one, so labels do not pile up.
  const labelled = new Map<string, string>();
  const drawReals = (chain: string, vs: ChainView) => {
    const rows = realServers(vs);
    for (const r of rows.slice(0, MAX_ENDPOINTS)) {
      const e = byKey.get(r.key);
      const tone = r.state !== 'active' || (e && !e.ready) ? 'warn' : 'ok';
      const state = r.state === 'draining' ? 'draining' : r.state === 'weight-0' ? 'weight 0' : e && !e.ready ? 'terminating' : '';
      const sub = [e ? e.node || 'node ?' : 'endpoint gone', e?.zone ?? '', e?.local ? 'local' : '', state].filter(Boolean).join(' · ');
      const id = add({ id: `ep:${r.key}`, kind: 'endpoint', label: r.key, sub, tone, layer: last, chain });
      const label = r.state === 'draining' ? 'draining' : fmtPercent(r.share);
      edge(`chain:${chain}`, id, labelled.get(r.key) === label ? '' : label, tone);
      if (!labelled.has(r.key)) labelled.set(r.key, label);
    }
    if (rows.length > MAX_ENDPOINTS) {
      const id = add({ id: `more:${chain}`, kind: 'more', label: `+${rows.length - MAX_ENDPOINTS} more real servers`, sub: 'see the virtual server below', tone: 'none', layer: last });
      edge(`chain:${chain}`, id);
    }
  };
  for (const chain of [...policyChains.keys(), ...virtualServers]) {
    const vs = kind === 'ipvs' ? port.chains.find((c) => c.table === 'ipvs' && c.name === chain) : undefined;
    if (vs) {
      drawReals(chain, vs);
      policyChains.delete(chain);
    }
  }

  for (const [chain, policy] of policyChains) {
    const share = (e: EndpointRow) => (policy === 'Local' ? e.localShare : e.clusterShare);
    const used = port.endpoints.filter((e) => share(e) !== null);
    for (const e of used.slice(0, MAX_ENDPOINTS)) {
      const tone = e.ready ? 'ok' : 'warn';
      const id = add({
        id: `ep:${e.key}`,
        kind: 'endpoint',
        label: e.key,
        sub: [e.node || 'node ?', e.zone, e.local ? 'local' : '', e.ready ? '' : 'terminating'].filter(Boolean).join(' · '),
        tone,
        layer: last,
        chain: e.object ?? undefined,
      });
      edge(`chain:${chain}`, id, fmtPercent(share(e)), tone);
    }
    if (used.length > MAX_ENDPOINTS) {
      const id = add({ id: `more:${chain}`, kind: 'more', label: `+${used.length - MAX_ENDPOINTS} more endpoints`, sub: 'see the endpoint table', tone: 'none', layer: last });
      edge(`chain:${chain}`, id);
    }
  }

  // Edges that skip columns get an invisible waypoint in each column they cross,
  // so they run between boxes instead of through them (a Sugiyama-style layout).
  interface Slot {
    id: string;
    layer: number;
    node: Pending | null;
    h: number;
    order: number;
  }
  const slots = new Map<string, Slot>();
  let order = 0;
  for (const n of nodes.values()) slots.set(n.id, { id: n.id, layer: n.layer, node: n, h: H, order: order++ });
  const routes = edges.map((e, k) => {
    const from = nodes.get(e.from)!;
    const to = nodes.get(e.to)!;
    const via: string[] = [];
    for (let l = from.layer + 1; l < to.layer; l++) {
      const id = `via:${k}:${l}`;
      slots.set(id, { id, layer: l, node: null, h: DUMMY_H, order: order++ });
      via.push(id);
    }
    return { e, chain: [e.from, ...via, e.to] };
  });
  const layers: Slot[][] = [];
  for (const sl of slots.values()) (layers[sl.layer] ??= []).push(sl);
  // Order each column by where its predecessors sit (barycenter), left to right.
  const preds = new Map<string, string[]>();
  for (const r of routes) for (let i = 1; i < r.chain.length; i++) (preds.get(r.chain[i]) ?? preds.set(r.chain[i], []).get(r.chain[i])!).push(r.chain[i - 1]);
  const rank = new Map<string, number>();
  layers.forEach((layer, l) => {
    if (!layer) return;
    if (l > 0) {
      const key = (sl: Slot) => {
        const ps = (preds.get(sl.id) ?? []).map((p) => rank.get(p)).filter((x): x is number => x !== undefined);
        return ps.length ? ps.reduce((a, b) => a + b, 0) / ps.length : Infinity;
      };
      layer.sort((a, b) => key(a) - key(b) || a.order - b.order);
    }
    layer.forEach((sl, i) => rank.set(sl.id, i));
  });

  const colW = (l: number) => Math.max(MIN_W, ...(layers[l] ?? []).filter((sl) => sl.node).map((sl) => boxWidth(sl.node!)));
  const colH = (l: Slot[]) => l.reduce((a, sl) => a + sl.h, 0) + (l.length - 1) * GAP_Y;
  const height = Math.max(H, ...layers.filter(Boolean).map(colH));
  const placed = new Map<string, FlowNode>();
  const at = new Map<string, { x: number; y: number; w: number }>();
  let x = 0;
  layers.forEach((layer, l) => {
    if (!layer) return;
    const w = colW(l);
    let y = (height - colH(layer)) / 2;
    for (const sl of layer) {
      at.set(sl.id, { x, y: y + sl.h / 2, w });
      const n = sl.node;
      if (n) placed.set(n.id, { id: n.id, kind: n.kind, label: n.label, sub: n.sub, tone: n.tone, x, y, w, h: H, ...(n.chain ? { chain: n.chain } : {}) });
      y += sl.h + GAP_Y;
    }
    // The last gap (before the endpoints) holds the share labels.
    x += w + (l === layers.length - 2 ? GAP_X + 24 : GAP_X);
  });
  const width = Math.max(MIN_W, ...[...at.values()].map((p) => p.x + p.w));
  const curve = (x1: number, y1: number, x2: number, y2: number) => {
    const dx = Math.max(16, (x2 - x1) / 2);
    return `C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}`;
  };
  const out: FlowEdge[] = routes.map(({ e, chain }) => {
    const pts = chain.map((id) => at.get(id)!);
    let d = `M${pts[0].x + pts[0].w},${pts[0].y}`;
    for (let i = 1; i < pts.length; i++) {
      const p = pts[i - 1];
      const q = pts[i];
      d += ` ${curve(p.x + p.w, p.y, q.x, q.y)}`;
      if (i < pts.length - 1) d += ` L${q.x + q.w},${q.y}`;
    }
    const p = pts[pts.length - 2];
    const q = pts[pts.length - 1];
    return { id: `${e.from}->${e.to}`, d, label: e.label, lx: (p.x + p.w + q.x) / 2, ly: (p.y + q.y) / 2 + 4, tone: e.tone };
  });
  return { nodes: [...placed.values()], edges: out, width, height };
}

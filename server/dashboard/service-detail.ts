import type { ServicePort } from '../proxy/service-port.ts';
import { categorizeEndpoints } from '../proxy/topology.ts';
import type { KernelChain, KernelTables, KernelViewProvider } from './kernel-view.ts';
import type { ServiceHealthEntry } from '../proxy/healthcheck/service-health-server.ts';
import type { ChainView, EndpointRow, HealthCheckInfo, PortDetail, ServiceDetail, WatchedCounters } from './protocol.ts';
import type { ServiceCatalog, ServiceModel } from './service-catalog.ts';

/** DetailSources are the two copies of the kernel a Service page draws from. */
export interface DetailSources {
  /** kernel: the last read (live counters), or null before the first read. */
  readonly kernel: KernelTables | null;
  readonly kernelReadAt: number | null;
  /** intended: what kproxy wrote, or null before the first sync. */
  readonly intended: KernelTables | null;
  /** missing: drift says kproxy wrote this chain and the kernel does not hold it. */
  missing(table: string, chain: string): boolean;
}

function chainView(table: string, name: string, role: string, src: DetailSources): ChainView | null {
  const listed = src.kernel?.tables.get(table)?.chains.get(name);
  if (listed) return view(table, role, listed, 'kernel');
  const written = src.intended?.tables.get(table)?.chains.get(name);
  if (!written) return null;
  return { ...view(table, role, written, 'intended'), ...(src.missing(table, name) ? { missing: true } : {}) };
}

function view(table: string, role: string, c: KernelChain, from: ChainView['from'], rules = c.rules): ChainView {
  return {
    table,
    name: c.name,
    role,
    from,
    packets: c.packets,
    bytes: c.bytes,
    rules: rules.map((r) => ({ text: r.spec, target: r.target, packets: r.packets, bytes: r.bytes, ...(r.ipvs ? { ipvs: r.ipvs } : {}) })),
    ...(c.ipvs ? { ipvs: c.ipvs } : {}),
  };
}

/** portDetail describes one service port: endpoints with their share of traffic, chains, flows. */
export function portDetail(sp: ServicePort, model: ServiceModel, provider: KernelViewProvider, src: DetailSources): PortDetail {
  const eps = model.endpoints.get(sp.id) ?? [];
  const cat = categorizeEndpoints(eps, sp, model.nodeName, model.zone);
  const objects = provider.servicePort(sp, eps, cat);
  const clusterSet = new Set(cat.cluster.map((e) => e.key));
  const localSet = new Set(cat.local.map((e) => e.key));
  // Each rule of a KUBE-SVC- chain takes 1/(endpoints left): every endpoint gets an equal share.
  const endpoints: EndpointRow[] = eps.map((ep) => ({
    key: ep.key,
    ip: ep.ip,
    port: ep.port,
    ready: ep.ready,
    serving: ep.serving,
    terminating: ep.terminating,
    local: ep.isLocal,
    node: ep.nodeName,
    zone: ep.zone,
    clusterShare: clusterSet.has(ep.key) ? 1 / clusterSet.size : null,
    localShare: localSet.has(ep.key) ? 1 / localSet.size : null,
    object: clusterSet.has(ep.key) || localSet.has(ep.key) ? objects.endpointObject(ep.key) : null,
  }));
  const chains: ChainView[] = [];
  const source = src.kernel ?? src.intended;
  for (const e of objects.entryChains) {
    const c = source?.tables.get(e.table)?.chains.get(e.chain);
    if (!c) continue;
    const rules = c.rules.filter((r) => objects.isEntryRule(r));
    if (rules.length) chains.push(view(e.table, 'entry', c, src.kernel ? 'kernel' : 'intended', rules));
  }
  for (const o of objects.owned) {
    const v = chainView(o.table, o.chain, o.role, src);
    if (v) chains.push(v);
  }
  const skipped = model.skipped(sp.id);
  const relay = provider.relayPort?.(sp) ?? null;
  return {
    id: sp.id,
    portName: sp.portName,
    protocol: sp.protocol,
    port: sp.port,
    nodePort: sp.nodePort,
    clusterIP: sp.clusterIP,
    externalIPs: sp.externalIPs,
    loadBalancerIPs: sp.loadBalancerVIPs,
    sourceRanges: sp.loadBalancerSourceRanges,
    affinitySeconds: sp.stickyMaxAgeSeconds,
    externalPolicy: sp.externalPolicyLocal ? 'Local' : 'Cluster',
    internalPolicy: sp.internalPolicyLocal ? 'Local' : 'Cluster',
    healthCheckNodePort: sp.healthCheckNodePort,
    topologyMode: cat.topologyMode,
    endpoints,
    flows: objects.flows,
    chains,
    ...(skipped !== undefined ? { skipped } : {}),
    ...(relay ? { relay } : {}),
  };
}

/** serviceDetail is the Service page of "ns/name", or null when there is no such service. */
export function serviceDetail(
  key: string,
  catalog: ServiceCatalog,
  model: ServiceModel,
  provider: KernelViewProvider,
  src: DetailSources,
  healthChecks: readonly ServiceHealthEntry[] = [],
): ServiceDetail | null {
  const ports = catalog.ports(key);
  const summary = catalog.summary(key);
  if (!ports || !summary) return null;
  const invalid = model.invalid.get(`Service ${key}`);
  const healthCheck = healthCheckInfo(key, ports, healthChecks);
  return {
    summary,
    ports: ports.map((sp) => portDetail(sp, model, provider, src)),
    kernelReadAt: src.kernelReadAt,
    ...(invalid ? { invalid } : {}),
    ...(healthCheck ? { healthCheck } : {}),
  };
}

/** healthCheckInfo: the Service's health check node port as the node servers hold it (not open when they do not). */
function healthCheckInfo(key: string, ports: readonly ServicePort[], entries: readonly ServiceHealthEntry[]): HealthCheckInfo | null {
  const wanted = ports.find((sp) => sp.healthCheckNodePort > 0 && sp.externalPolicyLocal)?.healthCheckNodePort;
  if (!wanted) return null;
  const e = entries.find((x) => x.service === key && x.port === wanted);
  if (!e) return { port: wanted, open: false, simulated: false, addresses: [], localEndpoints: 0, status: null };
  return { port: e.port, open: true, simulated: e.simulated, addresses: e.addresses, localEndpoints: e.localEndpoints, status: e.status };
}

/** watchedCounters extracts the live counters of a Service page (sent after each kernel read). */
export function watchedCounters(detail: ServiceDetail): WatchedCounters {
  const chains = [];
  for (const p of detail.ports) {
    for (const c of p.chains) {
      if (c.from !== 'kernel') continue;
      chains.push({
        port: p.id,
        table: c.table,
        name: c.name,
        packets: c.packets,
        bytes: c.bytes,
        rules: c.rules.map((r) => [r.packets, r.bytes] as const),
        // IPVS connection counts move between reads like counters do.
        ...(c.ipvs ? { ipvs: c.ipvs, reals: c.rules.map((r) => r.ipvs ?? null) } : {}),
      });
    }
  }
  const relay = detail.ports.flatMap((p) => (p.relay ? [{ port: p.id, facts: p.relay }] : []));
  return { service: detail.summary.key, chains, ...(relay.length ? { relay } : {}) };
}

/**
 * detailShape names a page's kernel objects with their rules' text. Live
 * counters carry numbers only, so when a kernel read changes the shape (a
 * drained IPVS real server deleted by a sweep, drift, the first read after
 * the page showed what kproxy wrote) the page itself must be sent again.
 */
export function detailShape(detail: ServiceDetail): string {
  // The relay's rotation and sockets are shape too (its numbers travel with the counters).
  return detail.ports
    .map(
      (p) =>
        (p.relay ? `${p.relay.sockets.map((s) => `${s.pool}:${s.port}:${s.rotation.join(',')}`).join(';')}|${p.relay.endpoints.map((e) => `${e.key}${e.serving ? '' : '~'}`).join(',')}\u0004` : '') +
        p.chains.map((c) => `${c.table}\u0000${c.name}\u0000${c.from}\u0000${c.missing ? 1 : 0}\u0000${c.rules.map((r) => r.text).join('\u0001')}`).join('\u0002'),
    )
    .join('\u0003');
}

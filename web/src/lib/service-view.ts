import type { ChainView, PortDetail, ServiceDetail, WatchedCounters } from './protocol.ts';

/** withCounters puts live counters into a Service page's chains (matched by port, table and chain). */
export function withCounters(detail: ServiceDetail, counters: WatchedCounters | null): ServiceDetail {
  if (!counters || counters.service !== detail.summary.key) return detail;
  const live = new Map(counters.chains.map((c) => [`${c.port}\u0000${c.table}\u0000${c.name}`, c]));
  // Userspace mode: the relay's figures (connections, bytes, rates, shares) arrive with the counters.
  const relay = new Map((counters.relay ?? []).map((r) => [r.port, r.facts]));
  const ports: PortDetail[] = detail.ports.map((p) => ({
    ...p,
    ...(relay.has(p.id) ? { relay: relay.get(p.id) } : {}),
    chains: p.chains.map((c): ChainView => {
      const l = live.get(`${p.id}\u0000${c.table}\u0000${c.name}`);
      if (!l || l.rules.length !== c.rules.length) return c;
      // IPVS: connection counts, weights and rates move with the counters.
      const ipvs = l.ipvs ? { ipvs: l.ipvs } : {};
      return {
        ...c,
        ...ipvs,
        packets: l.packets,
        bytes: l.bytes,
        rules: c.rules.map((r, i) => {
          const rs = l.reals?.[i];
          return { ...r, packets: l.rules[i][0], bytes: l.rules[i][1], ...(rs ? { ipvs: rs } : {}) };
        }),
      };
    }),
  }));
  return { ...detail, ports };
}

/** endpointState names an endpoint's condition the way kubectl would describe it. */
export function endpointState(e: { ready: boolean; serving: boolean; terminating: boolean }): { label: string; tone: 'ok' | 'warn' | 'bad' } {
  if (e.ready) return { label: 'ready', tone: 'ok' };
  if (e.serving && e.terminating) return { label: 'terminating (serving)', tone: 'warn' };
  if (e.terminating) return { label: 'terminating', tone: 'bad' };
  return { label: 'not ready', tone: 'bad' };
}

export const WARNING_TEXT: Record<string, string> = {
  'no-endpoints': 'no endpoints',
  'no-local-endpoints': 'no local endpoints',
  invalid: 'invalid object',
  'not-programmed': 'not programmed',
};

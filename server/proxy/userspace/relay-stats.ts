import type { Protocol } from '../service-port.ts';

/** Pool says which endpoints a proxy socket balances over: the Cluster policy's or this node's (Local policy). */
export type Pool = 'cluster' | 'local';

/** RefusedReason says why a connection (or a new UDP client) was not relayed. */
export type RefusedReason = 'no_endpoints' | 'connect_failed' | 'limit_total' | 'limit_service' | 'limit_udp_sessions';
export const REFUSED_REASONS: readonly RefusedReason[] = ['no_endpoints', 'connect_failed', 'limit_total', 'limit_service', 'limit_udp_sessions'];

/** EndpointStats are one endpoint's figures for one service port, since it first appeared there. */
export interface EndpointStats {
  /** key: "ip:port". */
  readonly key: string;
  /** active: open TCP connections and UDP sessions now. */
  active: number;
  /** total: connections (sessions) relayed to it. */
  total: number;
  bytesToEndpoint: number;
  bytesToClient: number;
  /** connectFailures: connects to it that failed or timed out (each was retried on the next endpoint). */
  connectFailures: number;
  /** serving: it is in one of the port's rotations now (false: removed, its open connections drain). */
  serving: boolean;
}

/** PortStats are one service port's figures (all its pools). */
export interface PortStats {
  /** id: the service port ("ns/name:port/TCP"). */
  readonly id: string;
  readonly service: string;
  readonly protocol: Protocol;
  active: number;
  total: number;
  bytesToEndpoint: number;
  bytesToClient: number;
  /** retries: connects tried again on the next endpoint after one failed or timed out. */
  retries: number;
  refused: Record<RefusedReason, number>;
  /** udpDropped: datagrams of known sessions dropped (a session's queue full while its socket opens). */
  udpDropped: number;
  /** drainClosed: connections closed by the drain limit after their endpoint left. */
  drainClosed: number;
  readonly endpoints: Map<string, EndpointStats>;
}

/** RelayConnection is one open TCP connection or UDP session, as the dashboard lists it. */
export interface RelayConnection {
  readonly id: number;
  readonly protocol: 'TCP' | 'UDP';
  readonly servicePort: string;
  readonly service: string;
  readonly pool: Pool;
  /** client: "ip:port" as the proxy socket saw it. */
  readonly client: string;
  /** endpoint: "ip:port". */
  readonly endpoint: string;
  /** startedAt: when it was accepted (epoch ms). */
  readonly startedAt: number;
  bytesToEndpoint: number;
  bytesToClient: number;
  /** halfClosed: one direction has finished (FIN), the other goes on. */
  halfClosed: boolean;
  /** drainingSince: its endpoint left the rotation at this time (epoch ms); null while it serves. */
  drainingSince: number | null;
  /** close ends it now (both sides reset), for the drain limit. */
  close(): void;
}

function refusedZero(): Record<RefusedReason, number> {
  return { no_endpoints: 0, connect_failed: 0, limit_total: 0, limit_service: 0, limit_udp_sessions: 0 };
}

/**
 * RelayStats holds the relay's figures: per service port and endpoint
 * counters (bumped on the data path, a few additions per chunk), the open
 * connections, and the totals the limits check. The metrics and the dashboard
 * read it; nothing here allocates per chunk.
 */
export class RelayStats {
  readonly ports = new Map<string, PortStats>();
  readonly connections = new Map<number, RelayConnection>();
  /** activeTcp / activeUdp: open TCP connections (accepted, counted against the limits) and UDP sessions. */
  activeTcp = 0;
  activeUdp = 0;
  readonly #activeByService = new Map<string, number>();
  #nextId = 1;

  port(id: string, service: string, protocol: Protocol): PortStats {
    let p = this.ports.get(id);
    if (!p) {
      p = { id, service, protocol, active: 0, total: 0, bytesToEndpoint: 0, bytesToClient: 0, retries: 0, refused: refusedZero(), udpDropped: 0, drainClosed: 0, endpoints: new Map() };
      this.ports.set(id, p);
    }
    return p;
  }

  endpoint(port: PortStats, key: string): EndpointStats {
    let e = port.endpoints.get(key);
    if (!e) {
      e = { key, active: 0, total: 0, bytesToEndpoint: 0, bytesToClient: 0, connectFailures: 0, serving: false };
      port.endpoints.set(key, e);
    }
    return e;
  }

  /** serviceActive: open TCP connections of one Service ("ns/name"), counted from accept to close. */
  serviceActive(service: string): number {
    return this.#activeByService.get(service) ?? 0;
  }

  /** reserveTcp counts an accepted TCP connection against the limits (before its endpoint is known). */
  reserveTcp(service: string): void {
    this.activeTcp++;
    this.#activeByService.set(service, this.serviceActive(service) + 1);
  }

  releaseTcp(service: string): void {
    this.activeTcp--;
    const n = this.serviceActive(service) - 1;
    if (n > 0) this.#activeByService.set(service, n);
    else this.#activeByService.delete(service);
  }

  nextId(): number {
    return this.#nextId++;
  }

  /**
   * prune forgets service ports no longer programmed and endpoints that left
   * with nothing open, so the figures (and the metric series) follow the
   * cluster instead of growing with every endpoint ever seen.
   */
  prune(live: ReadonlySet<string>): void {
    for (const [id, p] of this.ports) {
      for (const [k, e] of p.endpoints) if (!e.serving && e.active === 0) p.endpoints.delete(k);
      if (!live.has(id) && p.active === 0) this.ports.delete(id);
    }
  }
}

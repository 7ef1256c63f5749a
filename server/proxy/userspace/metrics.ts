import { Counter, Gauge, type Registry } from 'prom-client';
import type { UserspaceBackend } from './proxier.ts';
import { REFUSED_REASONS } from './relay-stats.ts';

/**
 * registerUserspaceMetrics publishes the relay's figures (kube-proxy's
 * userspace proxier exported none; these are kproxy's own). Every value is
 * read from the relay at scrape time, so the data path only adds to plain
 * numbers. Per-endpoint series exist while the endpoint is in a rotation or
 * still has open connections.
 *
 * Labels: service_port is "ns/name:port/PROTOCOL"; endpoint is "ip:port".
 */
export function registerUserspaceMetrics(registry: Registry, backend: UserspaceBackend): void {
  if (registry.getSingleMetric('kproxy_userspace_connections_active')) return;
  const registers = [registry];
  const stats = backend.stats;
  type EndpointFigures = { active: number; total: number; connectFailures: number };
  const eachEndpoint = (fn: (labels: { service_port: string; endpoint: string }, e: EndpointFigures) => void) => {
    for (const p of stats.ports.values()) for (const e of p.endpoints.values()) fn({ service_port: p.id, endpoint: e.key }, e);
  };

  new Gauge({
    name: 'kproxy_userspace_connections_active',
    help: 'Open relayed TCP connections and UDP sessions, per service port and endpoint',
    labelNames: ['service_port', 'endpoint'],
    registers,
    collect() {
      this.reset();
      eachEndpoint((l, e) => this.set(l, e.active));
    },
  });
  new Counter({
    name: 'kproxy_userspace_connections_total',
    help: 'Relayed TCP connections and UDP sessions, per service port and endpoint',
    labelNames: ['service_port', 'endpoint'],
    registers,
    collect() {
      this.reset();
      eachEndpoint((l, e) => e.total && this.inc(l, e.total));
    },
  });
  new Counter({
    name: 'kproxy_userspace_endpoint_connect_failures_total',
    help: 'Connects to an endpoint that were refused or timed out (each was retried on the next endpoint)',
    labelNames: ['service_port', 'endpoint'],
    registers,
    collect() {
      this.reset();
      eachEndpoint((l, e) => e.connectFailures && this.inc(l, e.connectFailures));
    },
  });
  new Counter({
    name: 'kproxy_userspace_bytes_total',
    help: 'Bytes relayed per service port and endpoint; direction to_endpoint (client to endpoint) or to_client',
    labelNames: ['service_port', 'endpoint', 'direction'],
    registers,
    collect() {
      this.reset();
      for (const p of stats.ports.values()) {
        for (const e of p.endpoints.values()) {
          if (e.bytesToEndpoint) this.inc({ service_port: p.id, endpoint: e.key, direction: 'to_endpoint' }, e.bytesToEndpoint);
          if (e.bytesToClient) this.inc({ service_port: p.id, endpoint: e.key, direction: 'to_client' }, e.bytesToClient);
        }
      }
    },
  });
  new Gauge({
    name: 'kproxy_userspace_balancing_share',
    help: "Each endpoint's share of the connections its service port relayed (0..1): the balancing distribution",
    labelNames: ['service_port', 'endpoint'],
    registers,
    collect() {
      this.reset();
      for (const p of stats.ports.values()) {
        let sum = 0;
        for (const e of p.endpoints.values()) sum += e.total;
        if (sum === 0) continue;
        for (const e of p.endpoints.values()) this.set({ service_port: p.id, endpoint: e.key }, e.total / sum);
      }
    },
  });
  new Counter({
    name: 'kproxy_userspace_service_port_connections_total',
    help: 'Relayed TCP connections and UDP sessions per service port (also of endpoints that left)',
    labelNames: ['service_port'],
    registers,
    collect() {
      this.reset();
      for (const p of stats.ports.values()) if (p.total) this.inc({ service_port: p.id }, p.total);
    },
  });
  new Gauge({
    name: 'kproxy_userspace_service_port_connections_active',
    help: 'Open relayed TCP connections and UDP sessions per service port',
    labelNames: ['service_port'],
    registers,
    collect() {
      this.reset();
      for (const p of stats.ports.values()) this.set({ service_port: p.id }, p.active);
    },
  });
  new Counter({
    name: 'kproxy_userspace_connect_retries_total',
    help: 'Connects retried on the next endpoint after one failed or timed out, per service port',
    labelNames: ['service_port'],
    registers,
    collect() {
      this.reset();
      for (const p of stats.ports.values()) if (p.retries) this.inc({ service_port: p.id }, p.retries);
    },
  });
  new Counter({
    name: 'kproxy_userspace_connections_refused_total',
    help: `Connections and new UDP clients not relayed, per service port and reason (${REFUSED_REASONS.join(', ')})`,
    labelNames: ['service_port', 'reason'],
    registers,
    collect() {
      this.reset();
      for (const p of stats.ports.values()) for (const r of REFUSED_REASONS) if (p.refused[r]) this.inc({ service_port: p.id, reason: r }, p.refused[r]);
    },
  });
  new Counter({
    name: 'kproxy_userspace_udp_datagrams_dropped_total',
    help: "Datagrams of a new UDP session dropped while its socket to the endpoint opened (the session's queue was full)",
    labelNames: ['service_port'],
    registers,
    collect() {
      this.reset();
      for (const p of stats.ports.values()) if (p.udpDropped) this.inc({ service_port: p.id }, p.udpDropped);
    },
  });
  new Counter({
    name: 'kproxy_userspace_drain_closed_total',
    help: 'Connections closed by the drain limit after their endpoint left (--userspace-drain-timeout)',
    labelNames: ['service_port'],
    registers,
    collect() {
      this.reset();
      for (const p of stats.ports.values()) if (p.drainClosed) this.inc({ service_port: p.id }, p.drainClosed);
    },
  });
  new Gauge({
    name: 'kproxy_userspace_open',
    help: 'Open TCP connections, UDP sessions, proxy sockets and claimed ports (node ports, local external IPs) now, by kind',
    labelNames: ['kind'],
    registers,
    collect() {
      this.set({ kind: 'tcp_connections' }, stats.activeTcp);
      this.set({ kind: 'udp_sessions' }, stats.activeUdp);
      this.set({ kind: 'proxy_sockets' }, backend.proxySockets());
      this.set({ kind: 'claimed_ports' }, backend.claims());
    },
  });
  new Gauge({
    name: 'kproxy_userspace_limit',
    help: 'The userspace limits (0: none): max_connections, max_connections_per_service, max_udp_sessions',
    labelNames: ['limit'],
    registers,
    collect() {
      const l = backend.limits;
      this.set({ limit: 'max_connections' }, l.maxConnections);
      this.set({ limit: 'max_connections_per_service' }, l.maxConnectionsPerService);
      this.set({ limit: 'max_udp_sessions' }, l.maxUDPSessions);
    },
  });
  new Counter({
    name: 'kproxy_userspace_bind_failures_total',
    help: 'Sockets that could not be bound, by kind: proxy_port (the service port is not relayed), node_port, external_ip (those portals are left out)',
    labelNames: ['kind'],
    registers,
    collect() {
      this.reset();
      for (const [kind, n] of Object.entries(backend.metrics.bindFailures)) this.inc({ kind }, n);
    },
  });
  new Counter({
    name: 'kproxy_userspace_portal_restore_failures_total',
    help: 'iptables-restore runs of the portal chains the kernel refused',
    registers,
    collect() {
      this.reset();
      this.inc(backend.metrics.restoreFailures);
    },
  });
}

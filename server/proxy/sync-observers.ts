import type { FastifyInstance } from 'fastify';
import type { Clock } from '../clock.ts';
import { modeSettings } from '../config/modes.ts';
import type { ProxyConfig } from '../config/types.ts';
import { errorMessage } from '../errors.ts';
import { hostInterfaces, type NetInterfaces } from '../kernel/netif.ts';
import type { Logger } from '../log.ts';
import type { Source } from './source.ts';
import { healthCheckBindAddresses } from './healthcheck/node-addresses.ts';
import { ProxyHealth } from './healthcheck/proxy-health.ts';
import { buildProxyHealthApp } from './healthcheck/proxy-health-server.ts';
import { ProxyReadiness } from './healthcheck/readiness.ts';
import { ServiceHealthServer, type ListenFn, type PortError } from './healthcheck/service-health-server.ts';
import { MemoryRelease, type Collect } from './memory-release.ts';
import { ProxyMetrics } from './metrics/metrics.ts';
import { NodePortAddresses } from './node-port-addresses.ts';
import type { MetaProxier } from './meta-proxier.ts';
import type { SyncObserver } from './sync-loop.ts';

/** SyncObserversDaemon is what the observers need from a daemon (server/daemon.ts satisfies it). */
export interface SyncObserversDaemon {
  readonly config: ProxyConfig;
  readonly nodeName: string;
  readonly logger: Logger;
  readonly clock: Clock;
  /** proxy: the meta proxier (every family's state, the change counts summed). */
  readonly proxy: MetaProxier;
  readonly source: Source;
}

export interface SyncObserversOptions {
  daemon: SyncObserversDaemon;
  /** onPortError: a health check node port could not be opened (the daemon records a Warning Event). */
  onPortError?: (e: PortError) => void;
  /** netInterfaces lists host addresses for --nodeport-addresses (default `ip -j addr`; tests fake it). */
  netInterfaces?: NetInterfaces;
  /** listenHealthCheck opens service health check ports (tests and the bench fake it). */
  listenHealthCheck?: ListenFn;
  /** simulateHealthChecks: --dry-run, which touches nothing on the host: health check node ports are kept and shown, never bound. */
  simulateHealthChecks?: boolean;
  /** processMetrics: process_* and nodejs_* metrics (default true). */
  processMetrics?: boolean;
  /** collect: the memory-reducing collection after big full syncs (default V8's, when exposed; null: none). */
  collect?: Collect | null;
}

/**
 * SyncObservers are the node's health, its metrics and its service health
 * checks, with the two sync observers that keep them current. Add both
 * observers to the daemon's sync loop before it starts (the HTTP layer only
 * serves what they hold: server/http/node-servers.ts opens the listeners for
 * healthzApp and metrics).
 */
export interface SyncObservers {
  readonly metrics: ProxyMetrics;
  readonly health: ProxyHealth;
  /** readiness: /readyz, "has synced" (not ready before the first successful sync). */
  readonly readiness: ProxyReadiness;
  readonly serviceHealth: ServiceHealthServer;
  /** memory gives memory back after big full syncs (MemoryRelease). */
  readonly memory: MemoryRelease;
  readonly observers: { readonly metrics: SyncObserver; readonly health: SyncObserver; readonly memory: SyncObserver };
  /**
   * healthzApp builds the app of the healthz listener (/healthz, /livez,
   * /readyz) over this health and readiness, each answer counted in the
   * metrics (kubeproxy_proxy_healthz_total, kubeproxy_proxy_livez_total,
   * kproxy_proxy_readyz_total).
   */
  healthzApp(): FastifyInstance;
  /** close closes the service health check listeners. */
  close(): Promise<void>;
}

/**
 * createSyncObservers wires what kube-proxy hands its proxier: the proxy
 * health (unhealthy once a queued change waits longer than 2 × syncPeriod),
 * the Prometheus metrics, and one health check listener per LoadBalancer
 * Service with externalTrafficPolicy Local, reconciled after each good sync.
 * kube-proxy marks the proxier updated when its SyncLoop starts, so health and
 * the queued timestamp are measured from the loop's start (onStart), not from
 * the epoch.
 */
export function createSyncObservers(opts: SyncObserversOptions): SyncObservers {
  const { daemon } = opts;
  const { config, proxy, clock } = daemon;
  const primary = proxy.primary.state;
  const logger = daemon.logger.child('healthcheck');

  const health = new ProxyHealth({ clock, healthTimeoutMs: 2 * modeSettings(config).syncPeriodMs, node: () => primary.node });
  const readiness = new ProxyReadiness({ health, families: proxy.families, source: () => daemon.source.status(), node: () => primary.node });
  const metrics = new ProxyMetrics({
    mode: config.mode,
    state: proxy,
    clock,
    logger: daemon.logger.child('metrics'),
    source: () => daemon.source.status(),
    processMetrics: opts.processMetrics,
  });
  const netif = opts.netInterfaces ?? hostInterfaces();
  const serviceHealth = new ServiceHealthServer({
    nodeName: daemon.nodeName,
    logger,
    // "primary" depends on the Node's addresses, which may arrive after start-up; one
    // listener per port serves every family (kube-proxy's metaproxier shares one health server too).
    bindAddresses: () =>
      healthCheckBindAddresses(
        proxy.families.map((f) => new NodePortAddresses(f, config.nodePortAddresses, primary.node.addresses)),
        netif,
        logger,
      ),
    proxyHealthy: () => health.health().healthy,
    onPortError: opts.onPortError,
    ...(opts.listenHealthCheck ? { listen: opts.listenHealthCheck } : {}),
    simulated: opts.simulateHealthChecks === true,
  });
  metrics.attachServiceHealth(() => serviceHealth);
  metrics.attachReadiness(() => readiness.readiness().ready);

  const healthObserver: SyncObserver = {
    onStart(at, family) {
      health.updated(family, at);
    },
    onQueued(at, family) {
      // kube-proxy queues nothing before its informers synced: the initial
      // listing must not count against the health timeout.
      if (proxy.ready) health.queuedUpdate(family, at);
    },
    onSync(record, checkout) {
      readiness.observe(record);
      health.noteNode(checkout.node);
      if (!record.ok) return;
      health.updated(record.family);
      serviceHealth.reconcile(record.family, checkout).catch((err) => logger.error('reconciling service health checks failed', { err: errorMessage(err) }));
    },
  };
  const memory = new MemoryRelease({ clock, logger: daemon.logger.child('memory'), ...(opts.collect !== undefined ? { collect: opts.collect } : {}) });
  return {
    metrics,
    health,
    readiness,
    serviceHealth,
    memory,
    observers: { metrics: metrics.observer, health: healthObserver, memory },
    healthzApp: () =>
      buildProxyHealthApp({
        health,
        readiness,
        onServed: (probe, code) => metrics.probeServed(probe, code),
        onError: (err) => logger.error('the healthz listener failed to answer', { err: errorMessage(err) }),
      }),
    close: () => {
      memory.stop();
      return serviceHealth.close();
    },
  };
}

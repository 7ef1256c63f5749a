import type { AddressInfo } from 'node:net';
import type { Clock } from '../clock.ts';
import type { ProxyConfig } from '../config/types.ts';
import { errorMessage } from '../errors.ts';
import { hostInterfaces, type NetInterfaces } from '../kernel/netif.ts';
import type { Logger } from '../log.ts';
import { buildProxyHealthApp } from '../proxy/healthcheck/proxy-health-server.ts';
import { ProxyHealth } from '../proxy/healthcheck/proxy-health.ts';
import { healthCheckBindAddresses } from '../proxy/healthcheck/node-addresses.ts';
import { ServiceHealthServer, type ListenFn, type PortError } from '../proxy/healthcheck/service-health-server.ts';
import { ProxyMetrics } from '../proxy/metrics/metrics.ts';
import { NodePortAddresses } from '../proxy/node-port-addresses.ts';
import type { ProxyState } from '../proxy/proxy-state.ts';
import type { SyncObserver } from '../proxy/sync-loop.ts';
import type { Source } from '../sources/source.ts';
import { buildMetricsApp, type MetricsAppPlugin } from './app.ts';
import { serve, type Served } from './listen.ts';

/** NodeServersDaemon is what the node servers need from a Daemon (server/daemon.ts satisfies it). */
export interface NodeServersDaemon {
  readonly config: ProxyConfig;
  readonly nodeName: string;
  readonly logger: Logger;
  readonly clock: Clock;
  readonly state: ProxyState;
  readonly loop: { addObserver(o: SyncObserver): void };
  readonly source: Source;
}

export interface NodeServersOptions {
  daemon: NodeServersDaemon;
  /** onPortError: a health check node port could not be opened (the daemon records a Warning Event). */
  onPortError?: (e: PortError) => void;
  /** metricsPlugins are registered on the metrics listener (the dashboard). */
  metricsPlugins?: readonly MetricsAppPlugin[];
  /** netInterfaces lists host addresses for --nodeport-addresses (default `ip -j addr`; tests fake it). */
  netInterfaces?: NetInterfaces;
  /** listenHealthCheck opens service health check ports (tests fake it). */
  listenHealthCheck?: ListenFn;
  /** processMetrics: process_* and nodejs_* metrics (default true). */
  processMetrics?: boolean;
  /** retryMs: wait before retrying a listener that could not bind (kube-proxy: 5 s). */
  retryMs?: number;
}

/** NodeServers are the node-facing servers of one daemon and the state behind them. */
export interface NodeServers {
  readonly metrics: ProxyMetrics;
  readonly health: ProxyHealth;
  readonly serviceHealth: ServiceHealthServer;
  /** observer is already added to the daemon's sync loop. */
  readonly observer: SyncObserver;
  /** healthzAddress/metricsAddress: where the listeners are bound (null: disabled or still retrying). */
  healthzAddress(): AddressInfo | null;
  metricsAddress(): AddressInfo | null;
  close(): Promise<void>;
}

/** syncPeriodMs is the sync period of the configured mode (kube-proxy's health timeout is twice it). */
export function syncPeriodMs(config: ProxyConfig): number {
  return config.mode === 'ipvs' ? config.ipvs.syncPeriodMs : config.mode === 'nftables' ? config.nftables.syncPeriodMs : config.iptables.syncPeriodMs;
}

/**
 * startNodeServers starts what kubelet, cloud load balancers and Prometheus
 * talk to, as kube-proxy does: /healthz and /livez on healthzBindAddress,
 * one health check listener per LoadBalancer service with externalTrafficPolicy
 * Local, and /metrics, /healthz, /proxyMode, /configz on metricsBindAddress.
 * It adds their sync observer to the daemon's loop and stamps the sync loop's
 * start, so call it right before daemon.start(). An empty bind address turns a
 * listener off. With bindAddressHardFail a bind failure rejects (the caller
 * exits 1); without it the listener retries every 5 s.
 */
export async function startNodeServers(opts: NodeServersOptions): Promise<NodeServers> {
  const { daemon } = opts;
  const { config, state, clock } = daemon;
  const logger = daemon.logger.child('http');
  const family = state.family;

  const health = new ProxyHealth({ clock, healthTimeoutMs: 2 * syncPeriodMs(config), node: () => state.node });
  const metrics = new ProxyMetrics({
    mode: config.mode,
    state,
    clock,
    logger: daemon.logger.child('metrics'),
    source: () => daemon.source.status(),
    processMetrics: opts.processMetrics,
  });
  const netif = opts.netInterfaces ?? hostInterfaces();
  const hcLogger = daemon.logger.child('healthcheck');
  const serviceHealth = new ServiceHealthServer({
    nodeName: daemon.nodeName,
    logger: hcLogger,
    // "primary" depends on the Node's addresses, which may arrive after start-up.
    bindAddresses: () => healthCheckBindAddresses(new NodePortAddresses(family, config.nodePortAddresses, state.node.addresses), netif, hcLogger),
    proxyHealthy: () => health.health().healthy,
    onPortError: opts.onPortError,
    ...(opts.listenHealthCheck ? { listen: opts.listenHealthCheck } : {}),
  });
  metrics.attachServiceHealth(() => serviceHealth);

  const observer: SyncObserver = {
    onQueued(at) {
      // kube-proxy queues nothing before its informers synced: the initial
      // listing must not count against the health timeout.
      if (state.ready) health.queuedUpdate(family, at);
      metrics.observer.onQueued?.(at);
    },
    onSync(record, checkout, result) {
      metrics.observer.onSync?.(record, checkout, result);
      health.noteNode(checkout.node);
      if (!record.ok) return;
      health.updated(family);
      serviceHealth.reconcile(checkout).catch((err) => logger.error('reconciling service health checks failed', { err: errorMessage(err) }));
    },
  };
  daemon.loop.addObserver(observer);
  // kube-proxy's SyncLoop marks the proxier updated and a sync queued when it
  // starts, so health is measured from start-up rather than from the epoch.
  health.updated(family);
  metrics.syncLoopStarted();

  const served: Served[] = [];
  const closeAll = async () => {
    const results = await Promise.allSettled([...served.map((s) => s.close()), serviceHealth.close()]);
    for (const r of results) if (r.status === 'rejected') logger.error('closing a node server failed', { err: errorMessage(r.reason) });
  };
  const common = { hardFail: config.bindAddressHardFail, logger, clock, retryMs: opts.retryMs };
  try {
    if (config.healthzBindAddress !== '') {
      const app = buildProxyHealthApp({ health, onServed: (probe, code) => metrics.probeServed(probe, code) });
      served.push(await serve({ name: 'healthz', app, address: config.healthzBindAddress, ...common }));
    }
    if (config.metricsBindAddress !== '') {
      const app = buildMetricsApp({ metrics, config, plugins: opts.metricsPlugins });
      served.push(await serve({ name: 'metrics', app, address: config.metricsBindAddress, ...common }));
    }
  } catch (err) {
    await closeAll();
    throw err;
  }

  const find = (name: string) => served.find((s) => s.name === name)?.address() ?? null;
  return {
    metrics,
    health,
    serviceHealth,
    observer,
    healthzAddress: () => find('healthz'),
    metricsAddress: () => find('metrics'),
    close: closeAll,
  };
}

import type { AddressInfo } from 'node:net';
import type { Clock } from '../clock.ts';
import type { ProxyConfig } from '../config/types.ts';
import { errorMessage } from '../errors.ts';
import type { Logger } from '../log.ts';
import { buildProxyHealthApp } from '../proxy/healthcheck/proxy-health-server.ts';
import type { SyncObservers } from '../proxy/sync-observers.ts';
import { buildMetricsApp, type MetricsAppPlugin } from './app.ts';
import { serve, type Served } from './listen.ts';

export interface NodeServersOptions {
  config: ProxyConfig;
  logger: Logger;
  clock: Clock;
  /** observers hold the health and metrics the listeners serve (server/proxy/sync-observers.ts). */
  observers: Pick<SyncObservers, 'health' | 'metrics'> & Partial<Pick<SyncObservers, 'readiness'>>;
  /** metricsPlugins are registered on the metrics listener (the dashboard). */
  metricsPlugins?: readonly MetricsAppPlugin[];
  /** retryMs: wait before retrying a listener that could not bind (kube-proxy: 5 s). */
  retryMs?: number;
}

/** NodeServers are the node-facing listeners of one daemon. */
export interface NodeServers {
  /** healthzAddress/metricsAddress: where the listeners are bound (null: disabled or still retrying). */
  healthzAddress(): AddressInfo | null;
  metricsAddress(): AddressInfo | null;
  close(): Promise<void>;
}

/**
 * startNodeServers opens what kubelet, cloud load balancers and Prometheus
 * talk to, as kube-proxy does: /healthz and /livez (and kproxy's /readyz) on healthzBindAddress, and
 * /metrics, /healthz, /proxyMode, /configz (and the dashboard's plugins) on
 * metricsBindAddress. It serves and wires nothing of the domain: the health
 * and metrics come from the sync observers. An empty bind address turns a
 * listener off. With bindAddressHardFail a bind failure rejects (the caller
 * exits 1); without it the listener retries every 5 s.
 */
export async function startNodeServers(opts: NodeServersOptions): Promise<NodeServers> {
  const { config, clock } = opts;
  const { health, metrics, readiness } = opts.observers;
  const logger = opts.logger.child('http');
  const served: Served[] = [];
  const closeAll = async () => {
    const results = await Promise.allSettled(served.map((s) => s.close()));
    for (const r of results) if (r.status === 'rejected') logger.error('closing a node server failed', { err: errorMessage(r.reason) });
  };
  const common = { hardFail: config.bindAddressHardFail, logger, clock, retryMs: opts.retryMs };
  try {
    if (config.healthzBindAddress !== '') {
      const app = buildProxyHealthApp({ health, readiness, onServed: (probe, code) => metrics.probeServed(probe, code) });
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
    healthzAddress: () => find('healthz'),
    metricsAddress: () => find('metrics'),
    close: closeAll,
  };
}

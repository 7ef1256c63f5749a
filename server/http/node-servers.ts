import type { Server as HttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Clock } from '../clock.ts';
import type { ProxyConfig } from '../config/types.ts';
import { errorMessage } from '../errors.ts';
import type { Logger } from '../log.ts';
import { buildDashboardApp, buildMetricsApp, type MetricsAppPlugin, type MetricsSource } from './app.ts';
import { serve, type Served } from './listen.ts';
import type { TlsFiles } from './tls.ts';

/** DashboardListener is where the dashboard's plugins are served (server/dashboard/setup.ts decides). */
export interface DashboardListener {
  readonly plugins: readonly MetricsAppPlugin[];
  /** ownAddress: a listener of its own, or null to share the metrics listener. */
  readonly ownAddress: string | null;
  /** tls: the pair its listener serves HTTPS with (followed as the files change), or null. */
  readonly tls: TlsFiles | null;
  /**
   * checkBound judges the listener the dashboard is served on by the addresses
   * it was bound to, and throws to refuse serving there (a non-loopback address
   * without auth: the composition exits 1); null: no check.
   */
  readonly checkBound?: ((bound: readonly AddressInfo[]) => void) | null;
}

/**
 * NodeServed is what the node listeners serve, made by the domain (the sync
 * observers of server/proxy/sync-observers.ts provide both): this layer opens
 * the listeners and knows nothing of proxy health.
 */
export interface NodeServed {
  /** metrics: the Prometheus exposition /metrics serves. */
  readonly metrics: MetricsSource;
  /** healthzApp builds the app healthzBindAddress serves (/healthz, /livez, /readyz). */
  healthzApp(): FastifyInstance;
}

export interface NodeServersOptions {
  config: ProxyConfig;
  logger: Logger;
  clock: Clock;
  /** observers: the health and metrics the listeners serve. */
  observers: NodeServed;
  /** dashboard: the dashboard's plugins and where they go (the metrics listener, or one of their own). */
  dashboard?: DashboardListener;
  /** retryMs: wait before retrying a listener that could not bind (kube-proxy: 5 s). */
  retryMs?: number;
}

/** NodeServers are the node-facing listeners of one daemon. */
export interface NodeServers {
  /** healthzAddress/metricsAddress/dashboardAddress: where the listeners are bound (null: disabled, shared or still retrying). */
  healthzAddress(): AddressInfo | null;
  metricsAddress(): AddressInfo | null;
  dashboardAddress(): AddressInfo | null;
  close(): Promise<void>;
}

/**
 * startNodeServers opens what kubelet, cloud load balancers and Prometheus
 * talk to, as kube-proxy does: /healthz and /livez (and kproxy's /readyz) on healthzBindAddress, and
 * /metrics, /healthz, /proxyMode, /configz on metricsBindAddress; the
 * dashboard there too, or on its own listener (--dashboard-bind-address),
 * over HTTPS when it has a certificate. It serves and wires nothing of the domain: the health
 * and metrics come from the sync observers. An empty bind address turns a
 * listener off. With bindAddressHardFail a bind failure rejects (the caller
 * exits 1); without it the listener retries every 5 s.
 */
export async function startNodeServers(opts: NodeServersOptions): Promise<NodeServers> {
  const { config, clock } = opts;
  const { metrics } = opts.observers;
  const logger = opts.logger.child('http');
  const served: Served[] = [];
  const dash = opts.dashboard;
  const closeAll = async () => {
    dash?.tls?.close();
    const results = await Promise.allSettled(served.map((s) => s.close()));
    for (const r of results) if (r.status === 'rejected') logger.error('closing a node server failed', { err: errorMessage(r.reason) });
  };
  const common = { hardFail: config.bindAddressHardFail, logger, clock, retryMs: opts.retryMs };
  try {
    if (config.healthzBindAddress !== '') {
      const app = opts.observers.healthzApp();
      served.push(await serve({ name: 'healthz', app, address: config.healthzBindAddress, ...common }));
    }
    // HTTPS follows its certificate files; the server takes each new pair as it is loaded.
    const followTls = (app: { server: unknown }) => dash?.tls?.serve(app.server as HttpsServer);
    const shared = dash && dash.ownAddress === null;
    if (config.metricsBindAddress !== '') {
      const app = buildMetricsApp({ metrics, config, plugins: shared ? dash.plugins : [], tls: shared ? dash.tls?.material : undefined });
      served.push(await serve({ name: 'metrics', app, address: config.metricsBindAddress, ...common, ...(shared && dash.checkBound ? { checkBound: dash.checkBound } : {}) }));
      if (shared) followTls(app);
    }
    if (dash && dash.ownAddress !== null && dash.ownAddress !== '' && dash.plugins.length > 0) {
      const app = buildDashboardApp({ plugins: dash.plugins, tls: dash.tls?.material });
      served.push(await serve({ name: 'dashboard', app, address: dash.ownAddress, ...common, ...(dash.checkBound ? { checkBound: dash.checkBound } : {}) }));
      followTls(app);
    }
  } catch (err) {
    await closeAll();
    throw err;
  }

  const find = (name: string) => served.find((s) => s.name === name)?.address() ?? null;
  return {
    healthzAddress: () => find('healthz'),
    metricsAddress: () => find('metrics'),
    dashboardAddress: () => find('dashboard'),
    close: closeAll,
  };
}

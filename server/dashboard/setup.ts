import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Assembled } from '../assemble.ts';
import type { LoadedConfiguration } from '../config/load.ts';
import { packageRoot } from '../config/package-root.ts';
import { errorMessage, FlagInvalidError, InsecureBindError } from '../errors.ts';
import type { MetricsAppPlugin } from '../http/app.ts';
import type { Logger } from '../log.ts';
import type { ProxyHealth } from '../proxy/healthcheck/proxy-health.ts';
import type { ProxyReadiness } from '../proxy/healthcheck/readiness.ts';
import { loadKubeConfig } from '../sources/k8s/kubeconfig.ts';
import { DashboardActions } from './actions.ts';
import { ApiAccessReviewer, type AccessReviewer } from './auth/access-review.ts';
import { DashboardAuth } from './auth/auth.ts';
import { isLoopbackBind } from './auth/request-checks.ts';
import { Dashboard } from './dashboard.ts';
import { dashboardPlugins } from './http/plugin.ts';
import type { Health } from './protocol.ts';
import { ActionRateLimiter } from './rate-limiter.ts';

/** nodeHealth is the Overview's health from the node's ProxyHealth and readiness (/healthz and /readyz). */
export function nodeHealth(h: ProxyHealth, r: ProxyReadiness): Health {
  const st = h.health();
  const ready = r.readiness();
  return { healthy: st.healthy, lastUpdated: st.lastUpdated, nodeEligible: h.nodeEligible(), ready: ready.ready, readyReason: ready.reason };
}

/** readDashboardToken reads --dashboard-token-file: the token is the file's text without surrounding whitespace. */
export async function readDashboardToken(path: string): Promise<string> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new FlagInvalidError(`--dashboard-token-file ${path}: cannot read it: ${errorMessage(err)}`, { cause: err });
  }
  const token = text.trim();
  if (token === '') throw new FlagInvalidError(`--dashboard-token-file ${path} is empty`);
  if (/\s/.test(token)) throw new FlagInvalidError(`--dashboard-token-file ${path} holds whitespace inside the token; a bearer token is one word`);
  return token;
}

/**
 * checkDashboardBind refuses a dashboard reachable from the network without
 * auth (docs/dashboard.md, "Security model"): actions can remove every rule of the node.
 */
export function checkDashboardBind(metricsBindAddress: string, auth: DashboardAuth): void {
  if (auth.enabled || metricsBindAddress === '' || isLoopbackBind(metricsBindAddress)) return;
  throw new InsecureBindError(
    `--metrics-bind-address ${metricsBindAddress} is reachable from the network and the dashboard there has no auth: ` +
      'give it --dashboard-token-file FILE (or run in a cluster, where callers are checked with TokenReview and SubjectAccessReview), or bind 127.0.0.1',
  );
}

export interface SetupDashboardOptions {
  loaded: LoadedConfiguration;
  assembled: Assembled;
  logger: Logger;
  /** health: the node's health (the sync observers' ProxyHealth, server/proxy/sync-observers.ts). */
  health: () => Health | null;
  /** reviewer overrides delegated auth (tests); default: the API server when the source is Kubernetes. */
  reviewer?: AccessReviewer | null;
  webRoot?: string;
}

export interface DashboardSetup {
  readonly plugins: MetricsAppPlugin[];
  readonly dashboard: Dashboard | null;
  readonly auth: DashboardAuth | null;
}

/**
 * setupDashboard builds the dashboard for the metrics listener: the token
 * file, delegated auth when the daemon reads a cluster, the bind check, the
 * backend's kernel view. It throws (the CLI exits 1) on a bad token file or an
 * insecure bind; with the metrics listener off there is no dashboard.
 */
export async function setupDashboard(opts: SetupDashboardOptions): Promise<DashboardSetup> {
  const { loaded, assembled, logger } = opts;
  const { config, run } = loaded;
  const log = logger.child('dashboard');
  if (config.metricsBindAddress === '') return { plugins: [], dashboard: null, auth: null };
  const token = run.dashboardTokenFile ? await readDashboardToken(run.dashboardTokenFile) : null;
  let reviewer = opts.reviewer;
  if (reviewer === undefined) reviewer = run.source ? null : new ApiAccessReviewer(loadKubeConfig({ kubeconfig: run.kubeconfig ?? undefined }).kubeConfig);
  const daemon = assembled.daemon;
  const auth = new DashboardAuth({ token, reviewer, nodeName: daemon.nodeName, clock: daemon.clock });
  checkDashboardBind(config.metricsBindAddress, auth);
  if (!assembled.kernelView) {
    log.warn(`the dashboard has no view of the ${config.mode} mode yet; it is off`);
    return { plugins: [], dashboard: null, auth };
  }
  const provider = assembled.kernelView(log);
  const dashboard = new Dashboard({
    daemon,
    provider,
    // One reader of the conntrack counts per daemon: the metrics' gauges and the dashboard share its cache.
    conntrack: assembled.conntrack?.counts ?? null,
    conntrackSimulated: assembled.conntrack?.simulated ?? false,
    backendDescription: assembled.backendDescription,
    events: assembled.memoryEvents,
    health: opts.health,
  });
  const actions = new DashboardActions({ dashboard, events: daemon.events, limiter: new ActionRateLimiter(daemon.clock), clock: daemon.clock, logger: log });
  if (auth.enabled) log.info('dashboard auth', { mode: auth.mode });
  else log.warn('dashboard auth is OFF: anyone who can reach the loopback listener may view and act (pass --dashboard-token-file to require a token)');
  const webRoot = opts.webRoot ?? join(packageRoot(), 'dist', 'web');
  return { plugins: dashboardPlugins({ dashboard, actions, auth, clock: daemon.clock, webRoot }), dashboard, auth };
}

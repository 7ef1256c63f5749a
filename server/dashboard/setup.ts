import { readFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { LoadedConfiguration } from '../config/load.ts';
import { packageRoot } from '../config/package-root.ts';
import { errorMessage, FlagInvalidError, InsecureBindError, type KproxyError } from '../errors.ts';
import type { EventRecorder } from '../events/event-recorder.ts';
import type { MetricsAppPlugin } from '../http/app.ts';
import { TlsFiles } from '../http/tls.ts';
import type { Logger } from '../log.ts';
import type { ProxyHealth } from '../proxy/healthcheck/proxy-health.ts';
import type { ProxyReadiness } from '../proxy/healthcheck/readiness.ts';
import type { ServiceHealthEntry } from '../proxy/healthcheck/service-health-server.ts';
import { loadKubeConfig } from '../sources/k8s/kubeconfig.ts';
import { DashboardActions } from './actions.ts';
import { ApiAccessReviewer, type AccessReviewer } from './auth/access-review.ts';
import { DashboardAuth, MIN_TOKEN_LENGTH } from './auth/auth.ts';
import { bindHostKind, boundToLoopback } from './auth/request-checks.ts';
import { Dashboard, type DashboardDaemon, type RecentEvents } from './dashboard.ts';
import { dashboardPlugins } from './http/plugin.ts';
import type { KernelViewProvider } from './kernel-view.ts';
import type { PacketTracerFactory } from './packet-tracer.ts';
import type { Health } from './protocol.ts';
import { ActionRateLimiter } from './rate-limiter.ts';
import type { DashboardConntrack } from './service-conntrack.ts';

/** nodeHealth is the Overview's health from the node's ProxyHealth and readiness (/healthz and /readyz). */
export function nodeHealth(h: ProxyHealth, r: ProxyReadiness): Health {
  const st = h.health();
  const ready = r.readiness();
  return { healthy: st.healthy, lastUpdated: st.lastUpdated, nodeEligible: h.nodeEligible(), ready: ready.ready, readyReason: ready.reason };
}

/**
 * readDashboardToken reads --dashboard-token-file: the token is the file's
 * text without surrounding whitespace, at least MIN_TOKEN_LENGTH characters (a
 * shared secret that anyone reaching the port may guess at).
 */
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
  if (token.length < MIN_TOKEN_LENGTH) {
    throw new FlagInvalidError(
      `--dashboard-token-file ${path} holds a token of ${token.length} characters; it must have at least ${MIN_TOKEN_LENGTH} (make one with: head -c 32 /dev/urandom | base64 | tr -d '/+=')`,
    );
  }
  return token;
}

/** DashboardPlacement is where the dashboard is served: its listener's address and flag, and whether it speaks TLS. */
export interface DashboardPlacement {
  /** address: host:port of the listener ("" when the metrics listener is off and the dashboard has none of its own). */
  readonly address: string;
  /** flag: the flag that set the address, for messages. */
  readonly flag: '--metrics-bind-address' | '--dashboard-bind-address';
  readonly tls: boolean;
}

/**
 * checkDashboardBind refuses a dashboard reachable from the network without
 * auth or without TLS (docs/dashboard.md, "Security model"): actions can
 * remove every rule of the node, and bearer tokens must not cross the network
 * in clear text. Before listening it judges what the address says itself: a
 * loopback address passes, any other address (or every address) needs auth
 * and TLS; a host name passes here and is judged on the address it was bound
 * to (checkDashboardBound), never by its spelling.
 */
export function checkDashboardBind(placement: DashboardPlacement, auth: DashboardAuth): void {
  const { address } = placement;
  if (address === '' || bindHostKind(address) !== 'network') return;
  const refusal = insecureBind(placement, auth, `${placement.flag} ${address} is reachable from the network`);
  if (refusal) throw refusal;
}

/**
 * checkDashboardBound judges the listener the dashboard is served on by the
 * addresses it is bound to (server.address() after listen: a host name such
 * as "dash.localhost" counts for what it resolved to, whatever it is called),
 * and throws InsecureBindError when one is not loopback and the dashboard
 * there has no auth or no TLS; the listener is then closed before it serves.
 */
export function checkDashboardBound(placement: DashboardPlacement, auth: DashboardAuth, bound: readonly AddressInfo[]): void {
  if (boundToLoopback(bound)) return;
  const where = bound.map((b) => (b.family === 'IPv6' ? `[${b.address}]:${b.port}` : `${b.address}:${b.port}`)).join(', ');
  const refusal = insecureBind(placement, auth, `${placement.flag} ${placement.address} is bound to ${where}, which is not loopback: it is reachable from the network`);
  if (refusal) throw refusal;
}

function insecureBind(placement: DashboardPlacement, auth: DashboardAuth, reachable: string): KproxyError | null {
  const { flag, tls } = placement;
  const missing = [...(auth.enabled ? [] : ['no auth']), ...(tls ? [] : ['no TLS'])];
  if (missing.length === 0) return null;
  const fixes = [
    ...(auth.enabled ? [] : ['give it --dashboard-token-file FILE (or run in a cluster, where callers are checked with TokenReview and SubjectAccessReview)']),
    ...(tls ? [] : ['serve it over HTTPS with --dashboard-tls-cert-file and --dashboard-tls-private-key-file']),
  ];
  const other = flag === '--metrics-bind-address' ? ', or keep it on loopback with --dashboard-bind-address 127.0.0.1:PORT (the metrics stay where they are)' : ', or bind it to 127.0.0.1';
  return new InsecureBindError(`${reachable} and the dashboard there has ${missing.join(' and ')}: ${fixes.join(', and ')}${other}`);
}

/**
 * DashboardParts are the parts of an assembled daemon the dashboard is built
 * on; server/assemble.ts's Assembled provides them, choosing the kernel view
 * and the packet tracer with the backend.
 */
export interface DashboardParts {
  /** daemon: the daemon the dashboard watches and acts on; its Events recorder audits the actions. */
  readonly daemon: DashboardDaemon & { readonly events: EventRecorder };
  /** memoryEvents: the recent Events the dashboard lists, whatever the source. */
  readonly memoryEvents: RecentEvents;
  readonly backendDescription: string;
  /** conntrack: the daemon's conntrack counts (shared with the metrics), null without. */
  readonly conntrack: { readonly counts: DashboardConntrack; readonly simulated: boolean } | null;
  /** kernelView builds the view of the mode's kernel objects. */
  readonly kernelView: (logger: Logger) => KernelViewProvider;
  /** tracer builds the packet tracer over the dashboard's kernel read (GET /api/v1/trace). */
  readonly tracer: PacketTracerFactory;
}

export interface SetupDashboardOptions {
  loaded: LoadedConfiguration;
  assembled: DashboardParts;
  logger: Logger;
  /** health: the node's health (the sync observers' ProxyHealth, server/proxy/sync-observers.ts). */
  health: () => Health | null;
  /** healthChecks: the service health check node ports (simulated with --dry-run), for the Service page. */
  healthChecks?: () => readonly ServiceHealthEntry[];
  /** reviewer overrides delegated auth (tests); default: the API server when the source is Kubernetes. */
  reviewer?: AccessReviewer | null;
  webRoot?: string;
}

export interface DashboardSetup {
  readonly plugins: MetricsAppPlugin[];
  readonly dashboard: Dashboard | null;
  readonly auth: DashboardAuth | null;
  /** ownAddress: the dashboard's own listener (--dashboard-bind-address), or null when it is on the metrics listener. */
  readonly ownAddress: string | null;
  /** tls: the certificate and key the dashboard's listener serves (followed as they change), or null for plain HTTP. */
  readonly tls: TlsFiles | null;
  /** checkBound judges the dashboard's listener by the addresses it was bound to, before it serves (checkDashboardBound); null without a dashboard. */
  readonly checkBound: ((bound: readonly AddressInfo[]) => void) | null;
}

/**
 * setupDashboard builds the dashboard: the token file, delegated auth when
 * the daemon reads a cluster, the TLS pair, the bind check, the backend's
 * kernel view. It goes on the metrics listener, or on its own with
 * --dashboard-bind-address. It throws (the CLI exits 1) on a bad token file,
 * a TLS pair that does not load or an insecure bind; with its listener off
 * (an empty address) there is no dashboard.
 */
export async function setupDashboard(opts: SetupDashboardOptions): Promise<DashboardSetup> {
  const { loaded, assembled, logger } = opts;
  const { config, run } = loaded;
  const log = logger.child('dashboard');
  const ownAddress = run.dashboardBindAddress;
  const off: DashboardSetup = { plugins: [], dashboard: null, auth: null, ownAddress: null, tls: null, checkBound: null };
  if (ownAddress === null && config.metricsBindAddress === '') return off;
  if (ownAddress === '') return off;
  const token = run.dashboardTokenFile ? await readDashboardToken(run.dashboardTokenFile) : null;
  let reviewer = opts.reviewer;
  if (reviewer === undefined) reviewer = run.source ? null : new ApiAccessReviewer((await loadKubeConfig({ kubeconfig: run.kubeconfig ?? undefined })).api);
  const daemon = assembled.daemon;
  const auth = new DashboardAuth({ token, reviewer, nodeName: daemon.nodeName, clock: daemon.clock, audience: run.dashboardTokenAudience, logger: log.child('auth') });
  const tls =
    run.dashboardTlsCertFile && run.dashboardTlsKeyFile ? new TlsFiles({ certFile: run.dashboardTlsCertFile, keyFile: run.dashboardTlsKeyFile, logger: log.child('tls'), clock: daemon.clock }) : null;
  const placement: DashboardPlacement =
    ownAddress !== null ? { address: ownAddress, flag: '--dashboard-bind-address', tls: tls !== null } : { address: config.metricsBindAddress, flag: '--metrics-bind-address', tls: tls !== null };
  checkDashboardBind(placement, auth);
  // A pair that does not load stops start-up here (exit 1), before anything listens.
  await tls?.load();
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
    auth,
    tlsReloadErrors: () => tls?.reloadErrors ?? 0,
    tracer: assembled.tracer,
    ...(opts.healthChecks ? { healthChecks: opts.healthChecks } : {}),
  });
  const actions = new DashboardActions({ dashboard, events: daemon.events, limiter: new ActionRateLimiter(daemon.clock), clock: daemon.clock, logger: log });
  if (auth.enabled) log.info('dashboard auth', { mode: auth.mode, ...(reviewer ? { audience: auth.audience } : {}), tls: tls ? 'on' : 'off' });
  else log.warn('dashboard auth is OFF: anyone who can reach the loopback listener may view and act (pass --dashboard-token-file to require a token)');
  const webRoot = opts.webRoot ?? join(packageRoot(), 'dist', 'web');
  return {
    plugins: dashboardPlugins({ dashboard, actions, auth, clock: daemon.clock, webRoot }),
    dashboard,
    auth,
    ownAddress,
    tls,
    checkBound: (bound) => checkDashboardBound(placement, auth, bound),
  };
}

import fastifyWebsocket from '@fastify/websocket';
import type { FastifyPluginAsync } from 'fastify';
import type { Clock } from '../../clock.ts';
import type { MetricsAppPlugin } from '../../http/app.ts';
import type { DashboardActions } from '../actions.ts';
import type { DashboardAuth } from '../auth/auth.ts';
import { offersDashboardProtocol } from '../auth/request-checks.ts';
import type { Dashboard } from '../dashboard.ts';
import type { HeavyReads } from '../heavy-reads.ts';
import { WS_SUBPROTOCOL } from '../protocol.ts';
import { MethodNotAllowedError, NotFoundError } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import { apiRoutes, type ApiRoutesOptions } from './api-routes.ts';
import { dashboardErrorHandler } from './error-handler.ts';
import { staticFilesPlugin } from './static-files.ts';
import { wsRoute } from './ws-route.ts';

export interface DashboardPluginOptions {
  dashboard: Dashboard;
  actions: DashboardActions;
  auth: DashboardAuth;
  clock: Clock;
  /** webRoot: the built app (dist/web). */
  webRoot: string;
  pingIntervalMs?: number;
  /** heavy: the limit on expensive API reads running at once (default: 2 running, 8 waiting). */
  heavy?: HeavyReads;
}

/** MAX_CLIENT_MESSAGE: client messages are tiny ({"type":"watch",…}); anything bigger is refused by ws. */
const MAX_CLIENT_MESSAGE = 4096;

/**
 * websocketSupport is @fastify/websocket for the metrics listener. It is
 * registered beside the dashboard plugin, at the listener's root, because it
 * handles the server's upgrade event (and provides injectWS to tests there).
 */
export const websocketSupport: MetricsAppPlugin = {
  plugin: fastifyWebsocket,
  options: {
    options: {
      maxPayload: MAX_CLIENT_MESSAGE,
      // Pick our protocol, never echo the token-carrying one back.
      handleProtocols: (protocols: Set<string>) => (offersDashboardProtocol([...protocols].join(',')) ? WS_SUBPROTOCOL : false),
    },
  },
};

/**
 * dashboardPlugins returns the metrics listener plugins of a dashboard:
 * WebSocket support, then the dashboard itself.
 */
export function dashboardPlugins(options: DashboardPluginOptions): MetricsAppPlugin[] {
  return [
    websocketSupport,
    { plugin: dashboardPlugin, options: options as unknown as Record<string, unknown>, frameworkErrors: apiFrameworkErrors(options.dashboard.daemon.logger.child('dashboard')) },
  ];
}

/**
 * dashboardPlugin is the dashboard on the metrics listener: the app at "/",
 * the API under /api/v1 and the live stream at /ws. It is encapsulated, so
 * its auth hooks never touch kube-proxy's /metrics, /healthz, /proxyMode and
 * /configz beside it.
 */
export const dashboardPlugin: FastifyPluginAsync<DashboardPluginOptions> = async (app, opts) => {
  app.addHook('onClose', async () => opts.dashboard.stop());
  // Routes and hooks throw catalogue errors; this one handler answers them all (and fastify's own 400/413/415).
  app.setErrorHandler(dashboardErrorHandler(opts.dashboard.daemon.logger.child('dashboard')));
  await app.register(staticFilesPlugin, { webRoot: opts.webRoot });
  await app.register(apiPlugin, { prefix: '/api', dashboard: opts.dashboard, actions: opts.actions, auth: opts.auth, heavy: opts.heavy });
  await app.register(wsRoute, { dashboard: opts.dashboard, auth: opts.auth, clock: opts.clock, pingIntervalMs: opts.pingIntervalMs });
};

/**
 * apiPlugin is everything under /api/: the routes of /api/v1, and the answers
 * for what matches none of them, in the API's one error shape and never
 * stored: 405 with Allow for a path that another method serves, 404 else.
 */
const apiPlugin: FastifyPluginAsync<ApiRoutesOptions> = async (api, opts) => {
  const routes: { pattern: RegExp; methods: string[] }[] = [];
  api.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    const pattern = new RegExp(
      `^${route.url
        .replace(/[.+?^${}()|[\]\\]/g, '\\$&')
        .replace(/:[^/]+/g, '[^/]+')
        .replace(/\*/g, '.*')}$`,
    );
    routes.push({ pattern, methods });
  });
  // Answers carry the node's live state (and errors): never kept by a browser or a proxy.
  api.addHook('onSend', async (_req, reply, payload) => {
    reply.header('cache-control', 'no-store');
    return payload;
  });
  api.setNotFoundHandler(async (req, reply) => {
    const path = req.url.split('?')[0];
    const allow = [...new Set(routes.filter((r) => r.pattern.test(path)).flatMap((r) => r.methods))].sort();
    if (allow.length) {
      reply.header('allow', allow.join(', '));
      throw new MethodNotAllowedError(`${req.method} ${path}: this API route answers ${allow.join(', ')}`);
    }
    throw new NotFoundError(`${path}: no such API route`);
  });
  await api.register(apiRoutes, { ...opts, prefix: '/v1' });
};

/**
 * apiFrameworkErrors answers what fastify refuses before routing (a path it
 * cannot decode, FST_ERR_BAD_URL), which no plugin's hooks or error handler
 * see, for /api/ paths: the API's error shape, never stored.
 */
export function apiFrameworkErrors(logger: Logger): NonNullable<MetricsAppPlugin['frameworkErrors']> {
  const handler = dashboardErrorHandler(logger);
  return (err, req, reply) => {
    if (!(req.raw.url ?? '').startsWith('/api/')) return false;
    reply.header('cache-control', 'no-store').header('x-content-type-options', 'nosniff');
    handler(err, req, reply);
    return true;
  };
}

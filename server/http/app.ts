import Fastify, { type FastifyError, type FastifyInstance, type FastifyPluginAsync, type FastifyPluginCallback, type FastifyReply, type FastifyRequest } from 'fastify';
import type { ProxyConfig } from '../config/types.ts';
import { configzDocument } from './configz.ts';
import { limitedServerFactory, METRICS_LIMITS, type ListenerLimits, type TlsMaterial } from './limits.ts';
import { refuseWrites } from './read-only.ts';

/** MetricsSource renders the Prometheus exposition (ProxyMetrics satisfies it). */
export interface MetricsSource {
  readonly contentType: string;
  render(): Promise<string>;
}

/** MetricsAppPlugin is a further plugin for the metrics listener (the dashboard registers /, /api/v1/…, /ws). */
export interface MetricsAppPlugin {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- each plugin has its own options type; `options` below is handed to it as is.
  plugin: FastifyPluginAsync<any> | FastifyPluginCallback<any>;
  options?: Record<string, unknown>;
  /**
   * frameworkErrors answers fastify's own errors raised before routing (a
   * path it cannot decode, FST_ERR_BAD_URL), which no plugin's hooks or error
   * handler see, for the paths the plugin owns; true when it answered.
   */
  frameworkErrors?: (err: FastifyError, req: FastifyRequest, reply: FastifyReply) => boolean;
}

/**
 * frameworkErrorsOf answers fastify's errors before routing: a plugin that
 * owns the path answers in its own way, anything else gets Go's plain-text
 * 400, as kube-proxy's mux answers a request it cannot parse.
 */
function frameworkErrorsOf(plugins: readonly MetricsAppPlugin[]) {
  return (err: FastifyError, req: FastifyRequest, reply: FastifyReply): void => {
    for (const p of plugins) if (p.frameworkErrors?.(err, req, reply)) return;
    reply.code(400).header('x-content-type-options', 'nosniff').type(TEXT).send('400 Bad Request\n');
  };
}

export interface MetricsAppOptions {
  metrics: MetricsSource;
  /** config: the effective configuration, served at /configz. */
  config: ProxyConfig;
  /** plugins are registered after kproxy's own routes, before the app is ready. */
  plugins?: readonly MetricsAppPlugin[];
  /** limits: timeouts and connection caps of the listener (default METRICS_LIMITS). */
  limits?: ListenerLimits;
  /** tls: serve HTTPS with this certificate and key (the dashboard off loopback). */
  tls?: TlsMaterial;
}

/**
 * BODY_LIMIT: the biggest body the metrics listener reads. kube-proxy's routes
 * read none (refuseWrites); the dashboard's actions take {"pause": true}.
 */
const BODY_LIMIT = 16 * 1024;

const TEXT = 'text/plain; charset=utf-8';

const textResponse = { 200: { type: 'string' } } as const;

/**
 * healthzPlugin serves component-base's /healthz as kube-proxy installs it on
 * its metrics listener: one "ping" check, "ok" by default, the check list with
 * ?verbose, and ?exclude=<check> honoured.
 */
const healthzPlugin: FastifyPluginAsync = async (app) => {
  app.all(
    '/healthz',
    {
      onRequest: refuseWrites,
      schema: {
        querystring: {
          type: 'object',
          properties: { verbose: { type: 'string' }, exclude: { anyOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' } }] } },
        },
        response: textResponse,
      },
    },
    async (req, reply) => {
      const q = req.query as { verbose?: string; exclude?: string | string[] };
      const excluded = new Set(q.exclude === undefined ? [] : Array.isArray(q.exclude) ? q.exclude : [q.exclude]);
      let checks = excluded.delete('ping') ? '[+]ping excluded: ok\n' : '[+]ping ok\n';
      if (excluded.size > 0) {
        const quoted = [...excluded]
          .sort()
          .map((e) => JSON.stringify(e))
          .join(',');
        checks += `warn: some health checks cannot be excluded: no matches for ${quoted}\n`;
      }
      reply.type(TEXT);
      return q.verbose === undefined ? 'ok' : `${checks}healthz check passed\n`;
    },
  );
  app.all('/healthz/ping', { onRequest: refuseWrites, schema: { response: textResponse } }, async (_req, reply) => {
    reply.type(TEXT);
    return 'ok';
  });
};

export interface DashboardAppOptions {
  plugins: readonly MetricsAppPlugin[];
  limits?: ListenerLimits;
  tls?: TlsMaterial;
}

/**
 * buildDashboardApp builds the dashboard's own listener (--dashboard-bind-address):
 * the dashboard's plugins only, HTTPS when tls is given, so kube-proxy's
 * /metrics can stay plain HTTP on its address while the dashboard is on
 * loopback or behind TLS.
 */
export function buildDashboardApp(opts: DashboardAppOptions): FastifyInstance {
  const app = Fastify({
    logger: false,
    bodyLimit: BODY_LIMIT,
    serverFactory: limitedServerFactory(opts.limits ?? METRICS_LIMITS, { tls: opts.tls }),
    frameworkErrors: frameworkErrorsOf(opts.plugins),
  });
  app.addHook('onSend', async (_req, reply, payload) => {
    reply.header('x-content-type-options', 'nosniff');
    return payload;
  });
  app.setNotFoundHandler((_req, reply) => {
    reply.code(404).type(TEXT).send('404 page not found\n');
  });
  for (const p of opts.plugins) app.register(p.plugin, p.options ?? {});
  return app;
}

/**
 * buildMetricsApp builds the metrics listener (:10249 by default) with kube-proxy's
 * routes: /metrics (Prometheus text), /healthz, /proxyMode (plain text) and
 * /configz (the effective configuration as JSON), each answering GET and HEAD
 * without a body only. The caller listens; see listen.ts. Further plugins (the
 * dashboard) come through opts.plugins.
 */
export function buildMetricsApp(opts: MetricsAppOptions): FastifyInstance {
  const app = Fastify({
    logger: false,
    bodyLimit: BODY_LIMIT,
    serverFactory: limitedServerFactory(opts.limits ?? METRICS_LIMITS, { tls: opts.tls }),
    frameworkErrors: frameworkErrorsOf(opts.plugins ?? []),
  });

  app.addHook('onSend', async (_req, reply, payload) => {
    reply.header('x-content-type-options', 'nosniff');
    return payload;
  });

  app.all('/metrics', { onRequest: refuseWrites, schema: { response: textResponse } }, async (_req, reply) => {
    const body = await opts.metrics.render();
    reply.header('content-type', opts.metrics.contentType);
    return body;
  });

  app.register(healthzPlugin);

  app.all('/proxyMode', { onRequest: refuseWrites, schema: { response: textResponse } }, async (_req, reply) => {
    reply.type(TEXT);
    return opts.config.mode;
  });

  app.all(
    '/configz',
    {
      onRequest: refuseWrites,
      schema: { response: { 200: { type: 'object', additionalProperties: true } } },
      // kube-proxy answers exactly "application/json"; fastify would add a charset.
      onSend: async (_req, reply, payload) => {
        reply.header('content-type', 'application/json');
        return payload;
      },
    },
    async () => configzDocument(opts.config),
  );

  app.setNotFoundHandler((_req, reply) => {
    reply.code(404).type(TEXT).send('404 page not found\n');
  });

  for (const p of opts.plugins ?? []) app.register(p.plugin, p.options ?? {});
  return app;
}

import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { HEALTH_LIMITS, limitedServerFactory, type ListenerLimits } from '../../http/limits.ts';
import { readOnlyRefusal } from '../../http/read-only.ts';
import { goTimeJSON, type ProxyHealth, type ProxyHealthStatus } from './proxy-health.ts';
import type { ProxyReadiness } from './readiness.ts';

/** HealthProbe names the probes the health listener answers. */
export type HealthProbe = 'healthz' | 'livez' | 'readyz';

export interface ProxyHealthAppOptions {
  health: ProxyHealth;
  /** readiness answers /readyz (absent: no /readyz route). */
  readiness?: ProxyReadiness;
  /** onServed counts each answer (kubeproxy_proxy_healthz_total / kubeproxy_proxy_livez_total / kproxy_proxy_readyz_total). */
  onServed?: (probe: HealthProbe, code: 200 | 503) => void;
  /** limits: timeouts and connection caps of the listener (default HEALTH_LIMITS). */
  limits?: ListenerLimits;
  /** onError: a route failed (a bug); its answer is a fixed 500, the error goes here (the log). */
  onError?: (err: unknown) => void;
}

const TEXT = 'text/plain; charset=utf-8';

const proxierHealthSchema = {
  type: 'object',
  properties: { lastUpdated: { type: 'string' }, healthy: { type: 'boolean' } },
  required: ['lastUpdated', 'healthy'],
} as const;

// Property order is the order of kube-proxy's ProxyHealth struct, which Go's
// encoding/json follows: consumers diffing the two outputs see the same text.
// (No "required" list: fast-json-stringify would move required keys first.)
const healthBodySchema = {
  type: 'object',
  properties: {
    lastUpdated: { type: 'string' },
    currentTime: { type: 'string' },
    nodeEligible: { type: 'boolean' },
    healthy: { type: 'boolean' },
    status: { type: 'object', additionalProperties: proxierHealthSchema },
  },
} as const;

const routeSchema = { response: { 200: healthBodySchema, 503: healthBodySchema } };

// /readyz is kproxy's own: /healthz's body, then whether it is ready, why not, and since when it has synced.
const readyBodySchema = {
  type: 'object',
  properties: {
    ...healthBodySchema.properties,
    ready: { type: 'boolean' },
    reason: { type: 'string' },
    firstSync: { type: 'string' },
  },
} as const;

const readyRouteSchema = { response: { 200: readyBodySchema, 503: readyBodySchema } };

/** healthBody shapes a ProxyHealthStatus like kube-proxy's JSON (nodeEligible only for /healthz). */
export function healthBody(h: ProxyHealthStatus, healthy: boolean, nodeEligible?: boolean): Record<string, unknown> {
  // kube-proxy reports "now" as lastUpdated while healthy: older releases meant
  // "the sync loop ran recently" by it, and clients may still read it that way.
  const body: Record<string, unknown> = {
    lastUpdated: goTimeJSON(healthy ? h.currentTime : h.lastUpdated),
    currentTime: goTimeJSON(h.currentTime),
  };
  if (nodeEligible !== undefined) body.nodeEligible = nodeEligible;
  body.healthy = h.healthy;
  const families = Object.entries(h.status);
  if (families.length > 0) {
    body.status = Object.fromEntries(families.map(([family, s]) => [family, { lastUpdated: goTimeJSON(s.lastUpdated), healthy: s.healthy }]));
  }
  return body;
}

/**
 * buildProxyHealthApp builds the :10256 listener: /healthz (proxy health and
 * node eligibility, what cloud load balancers probe) and /livez (proxy health
 * only, what the kubelet's liveness probe uses), and kproxy's /readyz (has
 * synced: what the DaemonSet's readiness and startup probes use), 503 with a
 * fixed reason (PROBE_REASONS) until the first full sync has succeeded, then
 * as /healthz. Every answer here is fixed text, times and booleans: nothing
 * derived from an error, an object or a rule is served on this port. Unlike
 * kube-proxy's ServeMux handlers, which answer any method, it answers GET and
 * HEAD without a body only (405 and 413 otherwise, before a byte of a body is
 * read): the port is open on every address without auth, and must stay
 * answerable to the kubelet whatever other clients send it.
 */
export function buildProxyHealthApp(opts: ProxyHealthAppOptions): FastifyInstance {
  // Every route here is read-only: refusals are answered before fastify sees the request.
  const app = Fastify({
    logger: false,
    serverFactory: limitedServerFactory(opts.limits ?? HEALTH_LIMITS, { screen: readOnlyRefusal }),
    // A path fastify cannot decode gets Go's plain 400, as kube-proxy's mux answers
    // it: fastify's own body would quote the path back.
    frameworkErrors: (_err: FastifyError, _req: FastifyRequest, reply: FastifyReply) => {
      reply.code(400).header('x-content-type-options', 'nosniff').type(TEXT).send('400 Bad Request\n');
    },
  });
  const served = opts.onServed ?? (() => {});

  app.addHook('onSend', async (_req, reply, payload) => {
    // kube-proxy sends exactly "application/json"; fastify would add a charset.
    if (String(reply.getHeader('content-type') ?? '').startsWith('application/json')) reply.header('content-type', 'application/json');
    reply.header('x-content-type-options', 'nosniff');
    return payload;
  });

  app.all('/healthz', { schema: routeSchema }, async (_req, reply) => {
    const h = opts.health.health();
    const nodeEligible = opts.health.nodeEligible();
    const healthy = h.healthy && nodeEligible;
    const code = healthy ? 200 : 503;
    served('healthz', code);
    return reply.code(code).send(healthBody(h, healthy, nodeEligible));
  });

  app.all('/livez', { schema: routeSchema }, async (_req, reply) => {
    const h = opts.health.health();
    const code = h.healthy ? 200 : 503;
    served('livez', code);
    return reply.code(code).send(healthBody(h, h.healthy));
  });

  const readiness = opts.readiness;
  if (readiness) {
    app.all('/readyz', { schema: readyRouteSchema }, async (_req, reply) => {
      const r = readiness.readiness();
      const h = opts.health.health();
      const code = r.ready ? 200 : 503;
      served('readyz', code);
      const body = { ...healthBody(h, r.ready, opts.health.nodeEligible()), ready: r.ready };
      // The fixed reason only: the detailed one quotes rules, Services and addresses (the log and the dashboard have it).
      if (r.probeReason !== null) Object.assign(body, { reason: r.probeReason });
      if (r.firstSyncAt !== null) Object.assign(body, { firstSync: goTimeJSON(r.firstSyncAt) });
      return reply.code(code).send(body);
    });
  }

  app.setNotFoundHandler((_req, reply) => {
    reply.code(404).type(TEXT).send('404 page not found\n');
  });
  // Nothing an error says reaches this port (fastify's default handler would send its message).
  app.setErrorHandler((err, _req, reply) => {
    opts.onError?.(err);
    reply.code(500).type(TEXT).send('500 Internal Server Error\n');
  });
  return app;
}

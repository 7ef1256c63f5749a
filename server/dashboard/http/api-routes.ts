import { Readable } from 'node:stream';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { IPFamily } from '../../net/ip.ts';
import { NotFoundError, RateLimitedError } from '../../errors.ts';
import { configzDocument } from '../../http/configz.ts';
import type { DashboardActions } from '../actions.ts';
import type { DashboardAuth, Permission } from '../auth/auth.ts';
import type { Dashboard } from '../dashboard.ts';
import type { HeavyReads } from '../heavy-reads.ts';
import { tableRuleCount, type KernelTables } from '../kernel-view.ts';
import type { RowsPage, TableInfo, Viewer } from '../protocol.ts';
import { TableRows } from '../rows.ts';
import { PackedText } from '../packed-text.ts';
import { guard, remoteOf } from './guard.ts';

export interface ApiRoutesOptions {
  dashboard: Dashboard;
  actions: DashboardActions;
  auth: DashboardAuth;
  /** heavy: the limit on expensive reads running at once (default: the dashboard's). */
  heavy?: HeavyReads;
}

declare module 'fastify' {
  interface FastifyRequest {
    dashboardViewer: Viewer | null;
  }
  interface FastifyContextConfig {
    /** permission: what a dashboard route needs ("view" unless said otherwise). */
    permission?: Permission;
  }
}

const anyObject = { type: 'object', additionalProperties: true } as const;
const json = { 200: anyObject } as const;
const nsName = {
  type: 'object',
  properties: { namespace: { type: 'string', maxLength: 63 }, name: { type: 'string', maxLength: 253 } },
  required: ['namespace', 'name'],
} as const;
const tableParam = { type: 'object', properties: { table: { type: 'string', pattern: '^[a-z0-9_-]{1,32}$' } }, required: ['table'] } as const;
const rowsQuery = {
  type: 'object',
  properties: {
    offset: { type: 'integer', minimum: 0, default: 0 },
    limit: { type: 'integer', minimum: 1, maximum: 2000, default: 200 },
    q: { type: 'string', maxLength: 200, default: '' },
    drift: { type: 'boolean', default: false },
  },
} as const;

/** CONNTRACK_RETRY_AFTER_S: a refused count may be retried after this long (the counter's queue drains by then). */
const CONNTRACK_RETRY_AFTER_S = 5;

/** HEAVY_RETRY_AFTER_S: a heavy read refused because the dashboard is busy may be retried after this long. */
const HEAVY_RETRY_AFTER_S = 1;

/** ACTION_BODY_LIMIT: bytes of an action's body (fastify answers 413 past it, before parsing). */
const ACTION_BODY_LIMIT = 1024;

/** ROWS_CACHE: filtered views of tables kept between page requests (a scroll asks for many pages). */
const ROWS_CACHE = 8;

/**
 * apiRoutes is /api/v1: JSON twins of what the live stream carries, the Rules
 * page's paged tables, restore input downloads and the actions. Every route
 * passes guard() first ("view", or "act" for actions).
 */
export const apiRoutes: FastifyPluginAsync<ApiRoutesOptions> = async (app, opts) => {
  const { dashboard, actions, auth } = opts;
  const heavy = opts.heavy ?? dashboard.heavy;
  /** heavily runs an expensive read under the HeavyReads limit (429 with Retry-After when it is full). */
  const heavily = async <T>(reply: FastifyReply, what: string, fn: () => Promise<T>): Promise<T> => {
    try {
      return await heavy.run(what, fn);
    } catch (err) {
      if (err instanceof RateLimitedError && !reply.hasHeader('retry-after')) reply.header('retry-after', String(HEAVY_RETRY_AFTER_S));
      throw err;
    }
  };
  app.decorateRequest('dashboardViewer', null);
  app.addHook('onRequest', async (req) => {
    const permission = req.routeOptions.config?.permission ?? 'view';
    req.dashboardViewer = await guard(req, auth, permission, req.method !== 'GET' && req.method !== 'HEAD');
  });
  // Every answer is marked no-store by the /api plugin around these routes (plugin.ts).
  const viewer = (req: FastifyRequest): Viewer => req.dashboardViewer!;

  app.get('/whoami', { schema: { response: json } }, async (req) => viewer(req));

  app.get('/status', { schema: { response: json } }, async (req) => ({ viewer: viewer(req), overview: dashboard.overview(), lastAction: dashboard.lastAction }));

  app.get('/services', { schema: { querystring: { type: 'object', properties: { q: { type: 'string', maxLength: 200 } } }, response: json } }, async (req, reply) => {
    const q = ((req.query as { q?: string }).q ?? '').trim().toLowerCase();
    const body = await heavily(reply, 'the service list', async () => {
      const list = dashboard.services();
      const services = q ? list.filter((s) => s.key.includes(q) || s.clusterIP.startsWith(q) || s.ips.some((ip) => ip.startsWith(q))) : list;
      // Pre-serialised: 10,000 summaries go faster through JSON.stringify than a generic schema serializer.
      return JSON.stringify({ services });
    });
    return reply.type('application/json').send(body);
  });

  app.get('/services/:namespace/:name', { schema: { params: nsName, response: { 200: anyObject, 404: anyObject } } }, async (req, reply) => {
    const { namespace, name } = req.params as { namespace: string; name: string };
    const detail = await heavily(reply, `the page of service ${namespace}/${name}`, () => dashboard.detail(`${namespace}/${name}`));
    if (!detail) throw new NotFoundError(`no service ${namespace}/${name} on this node`);
    return reply.type('application/json').send(JSON.stringify(detail));
  });

  // The userspace relay's open connections, searched and paged (the Connections page scrolls through them).
  app.get(
    '/connections',
    {
      schema: {
        querystring: {
          type: 'object',
          properties: { offset: { type: 'integer', minimum: 0, default: 0 }, limit: { type: 'integer', minimum: 1, maximum: 500, default: 200 }, q: { type: 'string', maxLength: 200, default: '' } },
        },
        response: { 200: anyObject, 404: anyObject },
      },
    },
    async (req, reply) => {
      const { offset, limit, q } = req.query as { offset: number; limit: number; q: string };
      const provider = dashboard.provider;
      if (!provider.connections) throw new NotFoundError(`the ${provider.kind} mode relays no connections (only the userspace mode does)`);
      const list = provider.connections.bind(provider);
      const page = await heavily(reply, 'the connection list', async () => JSON.stringify(list({ q, offset, limit })));
      return reply.type('application/json').send(page);
    },
  );

  // Counting walks the kernel's conntrack table per frontend: rate-limited by the counter (429), never on a sync's path.
  app.get('/services/:namespace/:name/conntrack', { schema: { params: nsName, response: { 200: anyObject, 404: anyObject, 429: anyObject, 503: anyObject } } }, async (req, reply) => {
    const { namespace, name } = req.params as { namespace: string; name: string };
    const key = `${namespace}/${name}`;
    try {
      const counts = await dashboard.serviceConntrack(key);
      if (!counts) throw new NotFoundError(`no service ${key} on this node`);
      return counts;
    } catch (err) {
      // A failed listing never lands here (it is that frontend's error); anything else goes to the error handler.
      if (!(err instanceof RateLimitedError)) throw err;
      reply.header('retry-after', String(CONNTRACK_RETRY_AFTER_S));
      throw new RateLimitedError(`too many conntrack counts are running on this node; try again in a few seconds (${err.message})`, { cause: err });
    }
  });

  const kernel = async (): Promise<KernelTables | null> => {
    dashboard.touch();
    if (!dashboard.reader.tables) await dashboard.reader.refresh();
    else void dashboard.reader.refresh();
    return dashboard.reader.tables;
  };

  app.get('/tables', { schema: { response: json } }, async (_req, reply) => {
    const tables = await heavily(reply, 'the kernel tables', kernel);
    const info: TableInfo[] = [...(tables?.tables.values() ?? [])].map((t) => {
      return { name: t.name, chains: t.chains.size, rules: tableRuleCount(t) };
    });
    return { kernel: dashboard.reader.status(), tables: info };
  });

  // Promises: requests for the same view while it is being built share that build.
  const cache = new Map<string, Promise<TableRows>>();
  const rowsOf = async (table: string, q: string, driftOnly: boolean): Promise<TableRows | null> => {
    const tables = await kernel();
    const t = tables?.tables.get(table);
    if (!t) return null;
    const key = `${dashboard.reader.readAt}\u0000${table}\u0000${q}\u0000${driftOnly}\u0000${dashboard.reader.drift.count}`;
    let rows = cache.get(key);
    if (!rows) {
      rows = TableRows.build(t, dashboard.reader.drift.byChain(), { q, driftOnly }, dashboard.yieldTurn);
      cache.set(key, rows);
      if (cache.size > ROWS_CACHE) cache.delete(cache.keys().next().value!);
      // A build that failed must not stay cached.
      rows.catch(() => cache.get(key) === rows && cache.delete(key));
    }
    return rows;
  };

  app.get('/tables/:table/rows', { schema: { params: tableParam, querystring: rowsQuery, response: { 200: anyObject, 404: anyObject } } }, async (req, reply) => {
    const { table } = req.params as { table: string };
    const { offset, limit, q, drift } = req.query as { offset: number; limit: number; q: string; drift: boolean };
    const rows = await heavily(reply, `the rows of table ${table}`, () => rowsOf(table, q, drift));
    if (!rows) throw new NotFoundError(`the kernel listing has no table ${table}`);
    const page: RowsPage = { table, readAt: dashboard.reader.readAt, total: rows.total, offset, rows: rows.page(offset, limit) };
    return reply.type('application/json').send(JSON.stringify(page));
  });

  app.get(
    '/tables/:table/chains/:chain',
    {
      schema: {
        params: { type: 'object', properties: { table: tableParam.properties.table, chain: { type: 'string', maxLength: 64 } }, required: ['table', 'chain'] },
        querystring: rowsQuery,
        response: { 200: anyObject, 404: anyObject },
      },
    },
    async (req, reply) => {
      const { table, chain } = req.params as { table: string; chain: string };
      const { q, drift } = req.query as { q: string; drift: boolean };
      const rows = await heavily(reply, `the rows of table ${table}`, () => rowsOf(table, q, drift));
      const row = rows?.chainRow(chain) ?? -1;
      if (row < 0) throw new NotFoundError(`no chain ${chain} in table ${table} (with this filter)`);
      return { table, chain, row };
    },
  );

  // The packet tracer over the same kernel read: a heavy read (a Service page's worth of work), so under the same limit.
  const traceQuery = {
    type: 'object',
    properties: {
      proto: { type: 'string', maxLength: 8 },
      src: { type: 'string', maxLength: 64 },
      dst: { type: 'string', maxLength: 64 },
      from: { type: 'string', maxLength: 16 },
    },
    additionalProperties: false,
  } as const;
  app.get('/trace', { schema: { querystring: traceQuery, response: { 200: anyObject, 400: anyObject, 429: anyObject, 503: anyObject } } }, async (req, reply) => {
    const q = req.query as { proto?: string; src?: string; dst?: string; from?: string };
    const result = await heavily(reply, 'a packet trace', () => dashboard.tracer.trace(q));
    return reply.type('application/json').send(JSON.stringify(result));
  });

  app.get('/drift', { schema: { response: json } }, async (_req, reply) => heavily(reply, 'the drift report', async () => dashboard.reader.drift.report(Infinity)));
  app.get('/syncs', { schema: { response: json } }, async () => ({ syncs: dashboard.history.entries(), failures: dashboard.history.failures }));
  app.get('/events', { schema: { response: json } }, async () => ({ events: dashboard.recentEvents(500) }));
  app.get('/conntrack', { schema: { response: json } }, async () => ({ conntrack: await dashboard.readConntrack() }));
  app.get('/config', { schema: { response: json } }, async () => ({
    node: dashboard.daemon.nodeName,
    mode: dashboard.provider.kind,
    authMode: auth.mode,
    configz: configzDocument(dashboard.daemon.config),
  }));

  // The intended rules are formatted once per version and kept deflated (~34 MB of text, ~5 MB deflated at
  // 10,000 × 10): downloads asked while they are formatted, and later ones while nothing changed, share them.
  let intendedFile: { version: number; file: Promise<PackedText | null> } | null = null;
  const intendedPacked = (): Promise<PackedText | null> => {
    const version = dashboard.provider.intendedVersion();
    if (intendedFile?.version !== version) {
      const file = (async () => {
        const tables = await dashboard.provider.intended();
        return tables ? PackedText.fromPieces(await dashboard.provider.formatIntended(tables)) : null;
      })();
      // A failed formatting is not kept: the next download tries again.
      file.catch(() => {
        if (intendedFile?.file === file) intendedFile = null;
      });
      intendedFile = { version, file };
    }
    return intendedFile.file;
  };

  app.get(
    '/restore-input/:which',
    {
      schema: {
        params: { type: 'object', properties: { which: { type: 'string', enum: ['last', 'failed', 'intended'] } }, required: ['which'] },
        // family: one family's input on a dual-stack node (default: the latest of any family).
        querystring: { type: 'object', properties: { family: { type: 'string', enum: ['IPv4', 'IPv6'] } }, additionalProperties: false },
        response: { 200: { type: 'string' }, 404: anyObject },
      },
    },
    async (req, reply) => {
      const { which } = req.params as { which: 'last' | 'failed' | 'intended' };
      const { family } = req.query as { family?: IPFamily };
      const node = dashboard.daemon.nodeName.replace(/[^A-Za-z0-9._-]/g, '_');
      // nftables mode's files are nft -f input; the other modes' iptables-restore (or ipvsadm) text.
      const ext = dashboard.provider.kind === 'nftables' ? 'nft' : 'rules';
      let packed: PackedText | null = null;
      let note: string | null = null;
      let file = '';
      if (which === 'intended') {
        dashboard.touch();
        packed = await heavily(reply, 'the intended rules', intendedPacked);
        file = `kproxy-${node}-intended.${ext}`;
      } else {
        const input = which === 'last' ? dashboard.provider.lastInput(family) : dashboard.provider.lastFailedInput(family);
        if (input) {
          packed = input.body;
          if (input.error) note = `# sync ${input.seq} failed: ${input.error.replace(/\n/g, '\n# ')}\n`;
          file = `kproxy-${node}-sync-${input.seq}${which === 'failed' ? '-failed' : ''}.${ext}`;
        }
      }
      if (packed === null) throw new NotFoundError(`no ${which} restore input yet`);
      reply.type('text/plain; charset=utf-8').header('content-disposition', `attachment; filename="${file}"`).header('vary', 'accept-encoding');
      // The deflated bytes as they are kept, to a client that takes them (browsers, curl --compressed);
      // to others the text inflated a chunk at a time: never the whole text on the event loop at once.
      const deflated = note === null && acceptsDeflate(req.headers['accept-encoding']) ? await packed.deflated() : null;
      if (deflated) return reply.header('content-encoding', 'deflate').header('content-length', deflated.length).send(deflated);
      return reply.send(note === null ? packed.stream() : Readable.from(prefixed(note, packed.stream())));
    },
  );

  app.post(
    '/actions/:action',
    {
      config: { permission: 'act' },
      // The only body an action takes is {"pause": true}: nothing bigger is read into memory.
      bodyLimit: ACTION_BODY_LIMIT,
      schema: {
        params: { type: 'object', properties: { action: { type: 'string', enum: ['resync', 'cleanup', 'pause', 'resume'] } }, required: ['action'] },
        body: { anyOf: [{ type: 'null' }, { type: 'object', properties: { pause: { type: 'boolean' } }, additionalProperties: false }] },
        response: { 200: anyObject, 409: anyObject, 429: anyObject, 500: anyObject },
      },
    },
    async (req, reply) => {
      const { action } = req.params as { action: 'resync' | 'cleanup' | 'pause' | 'resume' };
      const body = (req.body ?? {}) as { pause?: boolean };
      const out = await actions.run({ action, viewer: viewer(req), remote: remoteOf(req), pause: body.pause === true });
      if ('result' in out) return out.result;
      // Refused or failed: the error handler answers with the code's status (a 5xx without its details).
      if (out.retryAfterMs !== undefined) reply.header('retry-after', String(Math.ceil(out.retryAfterMs / 1000)));
      throw out.error;
    },
  );
};

/** acceptsDeflate: an Accept-Encoding header lists deflate (or *) with a weight above zero. */
export function acceptsDeflate(header: string | undefined): boolean {
  for (const part of (header ?? '').split(',')) {
    const [name, ...params] = part.split(';').map((x) => x.trim().toLowerCase());
    if (name !== 'deflate' && name !== '*') continue;
    const q = params.find((p) => p.startsWith('q='));
    if (q === undefined || Number(q.slice(2)) > 0) return true;
  }
  return false;
}

async function* prefixed(head: string, rest: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  yield Buffer.from(head, 'utf8');
  yield* rest;
}

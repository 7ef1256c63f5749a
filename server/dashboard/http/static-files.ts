import { existsSync } from 'node:fs';
import { join } from 'node:path';
import fastifyStatic from '@fastify/static';
import type { FastifyPluginAsync } from 'fastify';

/**
 * SECURITY_HEADERS go with the app's pages: scripts only from this origin, no
 * framing (the Actions page must not be clickjacked), no referrer to other sites.
 */
const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy': "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
};

const NOT_BUILT = `<!doctype html><meta charset="utf-8"><title>kproxy</title>
<p>The kproxy dashboard is not built. Run <code>npm run build</code> (it writes dist/web) and restart kproxy.
The API answers meanwhile under <a href="api/v1/status">/api/v1/</a>.</p>`;

/**
 * staticFilesPlugin serves the built Svelte app (dist/web) at "/": hashed
 * assets cached for a year, index.html never, so a new kproxy version's app
 * is picked up on the next load.
 */
export const staticFilesPlugin: FastifyPluginAsync<{ webRoot: string }> = async (app, opts) => {
  if (!existsSync(join(opts.webRoot, 'index.html'))) {
    app.get('/', { schema: { response: { 200: { type: 'string' } } } }, async (_req, reply) => {
      for (const [k, v] of Object.entries(SECURITY_HEADERS)) reply.header(k, v);
      return reply.type('text/html; charset=utf-8').send(NOT_BUILT);
    });
    return;
  }
  await app.register(fastifyStatic, {
    root: opts.webRoot,
    prefix: '/',
    // Files are looked up per request, so a rebuilt app is served without a restart.
    wildcard: true,
    index: 'index.html',
    setHeaders(reply, path) {
      for (const [k, v] of Object.entries(SECURITY_HEADERS)) reply.header(k, v);
      reply.header('cache-control', /[\\/]assets[\\/]/.test(path) ? 'public, max-age=31536000, immutable' : 'no-cache');
    },
  });
};

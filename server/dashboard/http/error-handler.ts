import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { errorMessage, InternalError, isKproxyError, KproxyError, MediaTypeUnsupportedError, MethodNotAllowedError, NotFoundError, RequestInvalidError, RequestTooLargeError } from '../../errors.ts';
import type { Logger } from '../../log.ts';

/** ErrorBody is the one shape every dashboard error answers with. */
export interface ErrorBody {
  error: { code: string; message: string };
}

/**
 * asCatalogueError turns whatever a route, a hook or fastify itself threw into
 * a catalogue error: kproxy's own pass through; fastify's request errors
 * (schema validation, bad JSON, a body too large, a content type it cannot
 * parse) get the catalogue code for their status; anything else is a bug and
 * becomes KPROXY_ERR_INTERNAL with the original as its cause.
 */
export function asCatalogueError(err: unknown): KproxyError {
  if (isKproxyError(err)) return err;
  const fe = err as Partial<FastifyError>;
  const status = typeof fe.statusCode === 'number' ? fe.statusCode : 500;
  const message = fe.message ?? String(err);
  if (typeof fe.code === 'string' && fe.code.startsWith('FST_') && status < 500) {
    if (status === 413) return new RequestTooLargeError(message, { cause: err });
    if (status === 415) return new MediaTypeUnsupportedError(message, { cause: err });
    if (status === 404) return new NotFoundError(message, { cause: err });
    if (status === 405) return new MethodNotAllowedError(message, { cause: err });
    return new RequestInvalidError(message, { cause: err });
  }
  return new InternalError(errorMessage(err), { cause: err });
}

/**
 * dashboardErrorHandler is the dashboard's one fastify error handler: a
 * code becomes its status and the {"error":{code,message}} body. A client
 * error (4xx) says what was wrong with the request; a server error (5xx) tells
 * the client only its code and where to look, and the log gets the detail
 * (an API server's address, a command's stderr, a stack), so nothing about
 * the node's internals crosses the network.
 */
export function dashboardErrorHandler(logger: Logger) {
  return (err: unknown, req: FastifyRequest, reply: FastifyReply): FastifyReply => {
    const e = asCatalogueError(err);
    const status = e.statusCode;
    let message = e.message;
    if (status >= 500) {
      logger.error(`dashboard request failed: ${errorMessage(e)}`, { code: e.code, method: req.method, url: req.url, request: req.id, from: req.ip });
      if (e.code === InternalError.code && err instanceof Error && err.stack) logger.debug('stack', { request: req.id, stack: err.stack });
      message = `kproxy could not answer this request (${e.code}); the kproxy log on this node has the details (request ${req.id})`;
    } else if (status === 401 || status === 403 || status === 429) {
      logger.debug('dashboard request refused', { code: e.code, status, method: req.method, url: req.url, from: req.ip, why: e.message });
    }
    if (status === 401) reply.header('www-authenticate', 'Bearer realm="kproxy dashboard"');
    const body: ErrorBody = { error: { code: e.code, message } };
    return reply.code(status).type('application/json; charset=utf-8').send(body);
  };
}

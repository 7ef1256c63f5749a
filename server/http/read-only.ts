import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';

/** READ_METHODS are what health, metrics and health check routes answer. */
export const READ_METHODS = ['GET', 'HEAD'] as const;

const TEXT = 'text/plain; charset=utf-8';

/** hasBody: the request announces a body (a length above 0, or a chunked one). */
export function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

/**
 * readOnlyRefusal says why a request to a read-only route is refused: a
 * method other than GET or HEAD (405), or a body (413); null when it may pass.
 * kube-proxy's ServeMux handlers answer any method and ignore bodies, but an
 * unauthenticated port on every address must not read what it has no use for.
 */
export function readOnlyRefusal(req: IncomingMessage): { status: 405 | 413; text: string } | null {
  if (req.method !== 'GET' && req.method !== 'HEAD') return { status: 405, text: `405 method not allowed: ${READ_METHODS.join(' and ')} only\n` };
  if (hasBody(req)) return { status: 413, text: '413 request entity too large: no body is read here\n' };
  return null;
}

/** Refusal is why a read-only listener will not answer a request. */
export type Refusal = NonNullable<ReturnType<typeof readOnlyRefusal>>;

/**
 * sendRefusal answers a refused request on the raw response and closes the
 * connection, so the rest of a body the client may still send is not read.
 */
export function sendRefusal(res: ServerResponse, refusal: Refusal): void {
  res.writeHead(refusal.status, {
    'Content-Type': TEXT,
    'Content-Length': Buffer.byteLength(refusal.text),
    'X-Content-Type-Options': 'nosniff',
    Connection: 'close',
    ...(refusal.status === 405 ? { Allow: READ_METHODS.join(', ') } : {}),
  });
  res.end(refusal.text);
}

/**
 * refuseWrites is an onRequest hook for read-only routes. It answers before
 * fastify would read a body, and closes the connection, so what the client
 * still sends is never read.
 */
export async function refuseWrites(req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | void> {
  const refusal = readOnlyRefusal(req.raw);
  if (!refusal) return;
  if (refusal.status === 405) reply.header('allow', READ_METHODS.join(', '));
  return reply.code(refusal.status).header('connection', 'close').type(TEXT).send(refusal.text);
}

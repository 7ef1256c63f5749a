import type { FastifyReply, FastifyRequest } from 'fastify';
import { OriginRejectedError, type KproxyError } from '../../errors.ts';
import type { DashboardAuth, Permission } from '../auth/auth.ts';
import { bearerFromHeader } from '../auth/auth.ts';
import { loopbackHostHeader, sameOrigin, tokenFromProtocols } from '../auth/request-checks.ts';
import type { Viewer } from '../protocol.ts';

/** sendError answers with the dashboard's error shape: {"error": {"code", "message"}}. */
export function sendError(reply: FastifyReply, status: number, err: KproxyError): FastifyReply {
  if (status === 401) reply.header('www-authenticate', 'Bearer realm="kproxy dashboard"');
  return reply.code(status).send({ error: { code: err.code, message: err.message } });
}

/** remoteOf names the caller for audit lines. */
export function remoteOf(req: FastifyRequest): string {
  return req.ip ?? req.socket?.remoteAddress ?? 'unknown';
}

/**
 * guard runs the checks every dashboard API request and WebSocket upgrade
 * passes before its handler: with auth off, the Host header must be loopback
 * (DNS rebinding); a browser's Origin must be this host (cross-site requests
 * and WebSockets); then the bearer credential must grant the permission.
 * It answers the request itself and returns null when a check fails.
 */
export async function guard(req: FastifyRequest, reply: FastifyReply, auth: DashboardAuth, permission: Permission, checkOrigin: boolean): Promise<Viewer | null> {
  const host = req.headers.host;
  if (!auth.enabled && !loopbackHostHeader(host)) {
    sendError(reply, 403, new OriginRejectedError(`Host ${JSON.stringify(host ?? '')} is not a loopback name; with dashboard auth off only loopback names are served`));
    return null;
  }
  const origin = req.headers.origin;
  if (checkOrigin && !sameOrigin(origin, host)) {
    sendError(reply, 403, new OriginRejectedError(`Origin ${JSON.stringify(origin)} is not this dashboard (${host ?? 'no Host header'}); cross-site requests are refused`));
    return null;
  }
  const credential = bearerFromHeader(req.headers.authorization) ?? (req.headers.upgrade ? tokenFromProtocols(req.headers['sec-websocket-protocol']) : null);
  const outcome = await auth.check(credential, permission);
  if (!outcome.ok) {
    req.log.debug?.('dashboard request refused');
    sendError(reply, outcome.status, outcome.error);
    return null;
  }
  return outcome.viewer;
}

import type { FastifyRequest } from 'fastify';
import { OriginRejectedError } from '../../errors.ts';
import type { DashboardAuth, Permission } from '../auth/auth.ts';
import { bearerFromHeader } from '../auth/auth.ts';
import { loopbackHostHeader, sameOrigin, tokenFromProtocols } from '../auth/request-checks.ts';
import type { Viewer } from '../protocol.ts';

/** remoteOf names the caller for audit lines. */
export function remoteOf(req: FastifyRequest): string {
  return req.ip ?? req.socket?.remoteAddress ?? 'unknown';
}

/**
 * guard runs the checks every dashboard API request and WebSocket upgrade
 * passes before its handler: with auth off, the Host header must be loopback
 * (DNS rebinding); a browser's Origin must be this host (cross-site requests
 * and WebSockets); then the bearer credential must grant the permission.
 * It returns the viewer, or throws the catalogue error the dashboard's error
 * handler answers with (401, 403, 503).
 */
export async function guard(req: FastifyRequest, auth: DashboardAuth, permission: Permission, checkOrigin: boolean): Promise<Viewer> {
  const host = req.headers.host;
  if (!auth.enabled && !loopbackHostHeader(host)) {
    throw new OriginRejectedError(`Host ${JSON.stringify(host ?? '')} is not a loopback name; with dashboard auth off only loopback names are served`);
  }
  const origin = req.headers.origin;
  if (checkOrigin && !sameOrigin(origin, host)) {
    throw new OriginRejectedError(`Origin ${JSON.stringify(origin)} is not this dashboard (${host ?? 'no Host header'}); cross-site requests are refused`);
  }
  const credential = bearerFromHeader(req.headers.authorization) ?? (req.headers.upgrade ? tokenFromProtocols(req.headers['sec-websocket-protocol']) : null);
  const outcome = await auth.check(credential, permission);
  if (!outcome.ok) throw outcome.error;
  return outcome.viewer;
}

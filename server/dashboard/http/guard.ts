import type { FastifyRequest } from 'fastify';
import { MediaTypeUnsupportedError, OriginRejectedError } from '../../errors.ts';
import type { DashboardAuth, Permission } from '../auth/auth.ts';
import { bearerFromHeader } from '../auth/auth.ts';
import { loopbackHostHeader, sameOrigin, tokenFromProtocols } from '../auth/request-checks.ts';
import type { Viewer } from '../protocol.ts';

/** remoteOf names the caller for audit lines. */
export function remoteOf(req: FastifyRequest): string {
  return req.ip ?? req.socket?.remoteAddress ?? 'unknown';
}

/** credentialOf reads a request's bearer credential: the Authorization header, or on a WebSocket upgrade the subprotocol. */
export function credentialOf(req: FastifyRequest): string | null {
  return bearerFromHeader(req.headers.authorization) ?? (req.headers.upgrade ? tokenFromProtocols(req.headers['sec-websocket-protocol']) : null);
}

/**
 * guard runs the checks every dashboard API request and WebSocket upgrade
 * passes before its handler: with auth off, the Host header must be loopback
 * (DNS rebinding); a browser that says the request comes from another site
 * (Sec-Fetch-Site) or names another Origin is refused; a write must carry a
 * JSON body, which a page of another site cannot send without the browser
 * asking this server first (a CORS preflight it never grants), so a form or an
 * empty text/plain POST cannot ride on an operator's session (checked after
 * the bearer credential, which must grant the permission). It returns the viewer, or throws the
 * catalogue error the dashboard's error handler answers with (401, 403, 415,
 * 429, 503).
 */
export async function guard(req: FastifyRequest, auth: DashboardAuth, permission: Permission, write: boolean): Promise<Viewer> {
  const host = req.headers.host;
  if (!auth.enabled && !loopbackHostHeader(host)) {
    throw new OriginRejectedError(`Host ${JSON.stringify(host ?? '')} is not a loopback name; with dashboard auth off only loopback names are served`);
  }
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin' && site !== 'none') {
    throw new OriginRejectedError(`the browser says this request comes from another site (Sec-Fetch-Site: ${site}); the dashboard answers its own pages only`);
  }
  const origin = req.headers.origin;
  if ((write || req.headers.upgrade) && !sameOrigin(origin, host)) {
    throw new OriginRejectedError(`Origin ${JSON.stringify(origin)} is not this dashboard (${host ?? 'no Host header'}); cross-site requests are refused`);
  }
  const outcome = await auth.check(credentialOf(req), permission, remoteOf(req));
  if (!outcome.ok) throw outcome.error;
  if (write && !isJson(req.headers['content-type'])) {
    throw new MediaTypeUnsupportedError(`an action takes a JSON body: send Content-Type: application/json (the body {} will do), got ${JSON.stringify(req.headers['content-type'] ?? 'none')}`);
  }
  return outcome.viewer;
}

function isJson(contentType: string | undefined): boolean {
  return (contentType ?? '').split(';')[0]!.trim().toLowerCase() === 'application/json';
}

import { parseHostPort } from '../../http/listen.ts';
import { canonicalIP, isLoopbackIP } from '../../net/ip.ts';
import { WS_SUBPROTOCOL, WS_TOKEN_PREFIX } from '../protocol.ts';

/**
 * Checks on where a request comes from, beside the credential check. A
 * browser sends Origin on WebSocket upgrades and on cross-site POSTs; a page
 * of another site must not drive the dashboard with the operator's browser.
 */

/** sameOrigin: no Origin (not a browser), or an Origin naming the host the request was sent to. */
export function sameOrigin(origin: string | undefined, host: string | undefined): boolean {
  if (origin === undefined) return true;
  if (!host) return false;
  try {
    const u = new URL(origin);
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.host.toLowerCase() === host.toLowerCase();
  } catch {
    return false;
  }
}

/** isLoopbackHost: the name or address is this machine's loopback ("localhost", 127.0.0.0/8, ::1). */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  const ip = canonicalIP(h);
  return ip !== null && isLoopbackIP(ip);
}

/**
 * loopbackHostHeader: with auth off, the Host header must name loopback too.
 * Otherwise a site whose DNS name resolves to 127.0.0.1 (DNS rebinding) would
 * be "same origin" with the dashboard in the operator's browser.
 */
export function loopbackHostHeader(host: string | undefined): boolean {
  if (!host) return false;
  const hp = parseHostPort(host);
  return isLoopbackHost(hp ? hp.host : host);
}

/** isLoopbackBind: a --metrics-bind-address that only this machine can reach. */
export function isLoopbackBind(address: string): boolean {
  const hp = parseHostPort(address);
  return hp !== null && hp.host !== '' && isLoopbackHost(hp.host);
}

/**
 * tokenFromProtocols reads the bearer token from Sec-WebSocket-Protocol
 * ("kproxy.dashboard.v1, base64url.bearer.authorization.k8s.io.<base64url>"),
 * the way the Kubernetes API server accepts it on WebSockets.
 */
export function tokenFromProtocols(header: string | undefined): string | null {
  for (const p of (header ?? '').split(',')) {
    const v = p.trim();
    if (!v.startsWith(WS_TOKEN_PREFIX)) continue;
    const encoded = v.slice(WS_TOKEN_PREFIX.length);
    if (!/^[A-Za-z0-9_-]+$/.test(encoded)) return null;
    return Buffer.from(encoded, 'base64url').toString('utf8');
  }
  return null;
}

/** offersDashboardProtocol: the client speaks this protocol version. */
export function offersDashboardProtocol(header: string | undefined): boolean {
  return (header ?? '').split(',').some((p) => p.trim() === WS_SUBPROTOCOL);
}

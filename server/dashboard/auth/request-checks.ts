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

/**
 * BindHostKind is what a bind address's host says before anything listens:
 * a loopback address, an address reachable from the network (another address,
 * or every address), or a host name, which only says where it listens once
 * listen() resolved it ("*.localhost" may resolve to anything /etc/hosts says).
 */
export type BindHostKind = 'loopback' | 'network' | 'name';

/** bindHostKind reads a --metrics-bind-address or --dashboard-bind-address (host:port) before it is bound. */
export function bindHostKind(address: string): BindHostKind {
  const hp = parseHostPort(address);
  if (hp === null || hp.host === '') return 'network';
  const ip = canonicalIP(hp.host);
  if (ip === null) return 'name';
  return isLoopbackIP(ip) ? 'loopback' : 'network';
}

/** isLoopbackBind: a bind address that names a loopback address itself (never a host name: see bindHostKind). */
export function isLoopbackBind(address: string): boolean {
  return bindHostKind(address) === 'loopback';
}

/** boundToLoopback: every address a listener is bound to (server.address(), after listen) is loopback. */
export function boundToLoopback(bound: readonly { readonly address: string }[]): boolean {
  return (
    bound.length > 0 &&
    bound.every((b) => {
      const ip = canonicalIP(b.address);
      return ip !== null && isLoopbackIP(ip);
    })
  );
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

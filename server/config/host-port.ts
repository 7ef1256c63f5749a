import { canonicalIP } from '../net/ip.ts';

/**
 * splitHostPort splits "host:port" or "[v6]:port" like Go's net.SplitHostPort,
 * which kube-proxy uses for healthzBindAddress and metricsBindAddress: an IPv6
 * host must be in brackets, and the port may be any text (validated apart).
 * Returns null when the text has no port or is malformed.
 */
export function splitHostPort(text: string): { host: string; port: string } | null {
  if (text.startsWith('[')) {
    const end = text.indexOf(']');
    if (end < 0 || text[end + 1] !== ':') return null;
    const host = text.slice(1, end);
    if (host.includes('[') || host.includes(']')) return null;
    return { host, port: text.slice(end + 2) };
  }
  const colon = text.lastIndexOf(':');
  if (colon < 0) return null;
  const host = text.slice(0, colon);
  if (host.includes(':') || host.includes('[') || host.includes(']')) return null;
  return { host, port: text.slice(colon + 1) };
}

/**
 * appendPortIfNeeded adds the default port to a bare IP ("0.0.0.0" ->
 * "0.0.0.0:10256", "::" -> "[::]:10256"), as kube-proxy's defaulting does;
 * anything else is returned unchanged for validation to judge.
 */
export function appendPortIfNeeded(addr: string, port: number): string {
  if (splitHostPort(addr)) return addr;
  const ip = canonicalIP(addr);
  if (!ip) return addr;
  return ip.includes(':') ? `[${addr}]:${port}` : `${addr}:${port}`;
}

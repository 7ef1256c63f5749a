/**
 * Endpoint is one backend address:port of one service port, with the conditions
 * and placement kube-proxy reads from EndpointSlices (BaseEndpointInfo).
 */
export interface Endpoint {
  readonly ip: string;
  readonly port: number;
  /** key is "ip:port" ("[ip]:port" for IPv6), kube-proxy's Endpoint.String(). */
  readonly key: string;
  /** isLocal: the endpoint runs on this node (its nodeName is this node's name). */
  readonly isLocal: boolean;
  readonly ready: boolean;
  readonly serving: boolean;
  readonly terminating: boolean;
  readonly nodeName: string;
  readonly zone: string;
  /** zoneHints is empty when the endpoint carries no zone hints. */
  readonly zoneHints: readonly string[];
  /** nodeHints is empty when the endpoint carries no node hints. */
  readonly nodeHints: readonly string[];
}

/** endpointKey renders ip:port the way Go's net.JoinHostPort does. */
export function endpointKey(ip: string, port: number): string {
  return ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/** sameEndpoint compares two endpoints field by field. */
export function sameEndpoint(a: Endpoint, b: Endpoint): boolean {
  return (
    a.key === b.key &&
    a.isLocal === b.isLocal &&
    a.ready === b.ready &&
    a.serving === b.serving &&
    a.terminating === b.terminating &&
    a.nodeName === b.nodeName &&
    a.zone === b.zone &&
    a.zoneHints.join(',') === b.zoneHints.join(',') &&
    a.nodeHints.join(',') === b.nodeHints.join(',')
  );
}

/** sameEndpointList compares two endpoint lists in order. */
export function sameEndpointList(a: readonly Endpoint[] | undefined, b: readonly Endpoint[] | undefined): boolean {
  if (a === b) return true;
  if (!a || !b || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!sameEndpoint(a[i], b[i])) return false;
  return true;
}

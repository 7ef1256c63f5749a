import { createServer as createHttpServer, type IncomingMessage, type RequestListener, type Server, type ServerOptions, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import type { SecureContextOptions } from 'node:tls';
import { sendRefusal, type Refusal } from './read-only.ts';

/**
 * ListenerLimits bound what one client can cost a listener. Every server
 * kproxy opens takes them: :10256 (no auth, on every address, probed by the
 * kubelet and load balancers), the metrics listener with the dashboard, and
 * each service's health check node port. Without them a client that opens
 * hundreds of connections, or trickles a request one byte at a time, holds
 * sockets and buffers for minutes (Node's own defaults: 60 s for headers,
 * 5 min per request, no cap on connections).
 */
export interface ListenerLimits {
  /** maxConnections: open connections in total; more are closed as they arrive. */
  readonly maxConnections: number;
  /** maxConnectionsPerClient: open connections from one address; more are closed as they arrive. */
  readonly maxConnectionsPerClient: number;
  /** headersTimeoutMs: a request's headers must arrive within this long. */
  readonly headersTimeoutMs: number;
  /** requestTimeoutMs: a whole request (headers and body) must arrive within this long. */
  readonly requestTimeoutMs: number;
  /** keepAliveTimeoutMs: an idle kept-alive connection is closed after this long. */
  readonly keepAliveTimeoutMs: number;
  /** idleTimeoutMs: a connection with no traffic at all is closed after this long (0: never; WebSockets turn it off). */
  readonly idleTimeoutMs: number;
  /** checkIntervalMs: how often the header and request timeouts are checked (Node's default is 30 s). */
  readonly checkIntervalMs: number;
  /** maxHeaderBytes: the request line and headers together. */
  readonly maxHeaderBytes: number;
}

/**
 * HEALTH_LIMITS are for :10256 and the service health check ports: requests
 * there are a GET without a body, answered in microseconds. The kubelet's
 * probe timeout is 1 s by default (5 s in deploy/daemonset.yaml), so headers
 * that take seconds are no probe. Kubelets and load balancers open a few
 * connections at a time; the per-address cap keeps one noisy client from
 * taking the total, and the total is well above what sixteen such clients
 * can hold, so the kubelet still gets in (an idle connection costs a few KiB).
 */
export const HEALTH_LIMITS: ListenerLimits = {
  maxConnections: 1024,
  maxConnectionsPerClient: 64,
  headersTimeoutMs: 5_000,
  requestTimeoutMs: 10_000,
  keepAliveTimeoutMs: 5_000,
  idleTimeoutMs: 30_000,
  checkIntervalMs: 1_000,
  maxHeaderBytes: 16 * 1024,
};

/**
 * METRICS_LIMITS are for the metrics listener and the dashboard: a scrape or
 * an API read is small too, but a dashboard keeps up to 16 WebSockets and a
 * browser opens several connections per tab.
 */
export const METRICS_LIMITS: ListenerLimits = {
  maxConnections: 256,
  maxConnectionsPerClient: 64,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  keepAliveTimeoutMs: 5_000,
  idleTimeoutMs: 120_000,
  checkIntervalMs: 1_000,
  maxHeaderBytes: 16 * 1024,
};

/** TlsFiles are the certificate and key a listener serves HTTPS with (PEM text). */
export interface TlsMaterial {
  readonly cert: string | Buffer;
  readonly key: string | Buffer;
}

/** LimitedServer is a node:http or node:https server with the limits applied. */
export type LimitedServer = Server | HttpsServer;

/** ServerExtras: HTTPS material, and a screen that refuses requests before the app sees them. */
export interface ServerExtras {
  readonly tls?: TlsMaterial & SecureContextOptions;
  /**
   * screen answers a request on the raw response when it returns a refusal
   * (readOnlyRefusal on a listener whose every route is read-only): a flood of
   * refused requests then costs no fastify request, reply or hook each.
   */
  readonly screen?: (req: IncomingMessage) => Refusal | null;
}

/**
 * createLimitedServer makes the server for a listener: HTTP, or HTTPS when
 * extras.tls is given, with every limit of `limits` applied. Connections beyond
 * the caps are destroyed on arrival, before a byte of them is parsed.
 */
export function createLimitedServer(limits: ListenerLimits, app: RequestListener, extras: ServerExtras = {}): LimitedServer {
  const { tls, screen } = extras;
  const handler: RequestListener = screen
    ? (req, res) => {
        const refusal = screen(req);
        if (refusal) sendRefusal(res, refusal);
        else app(req, res);
      }
    : app;
  const options: ServerOptions = {
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    connectionsCheckingInterval: limits.checkIntervalMs,
    maxHeaderSize: limits.maxHeaderBytes,
  };
  const server: LimitedServer = tls ? createHttpsServer({ ...options, ...tls }, handler) : createHttpServer(options, handler);
  server.maxConnections = limits.maxConnections;
  server.setTimeout(limits.idleTimeoutMs);
  capPerClient(server, limits.maxConnectionsPerClient);
  return server;
}

/** capPerClient closes a new connection when its address already holds `max` open ones. */
function capPerClient(server: LimitedServer, max: number): void {
  const open = new Map<string, number>();
  // HTTPS servers see the TCP connection as 'connection' too, before the TLS handshake.
  server.on('connection', (socket) => {
    const addr = socket.remoteAddress ?? '';
    const n = open.get(addr) ?? 0;
    if (n >= max) {
      socket.destroy();
      return;
    }
    open.set(addr, n + 1);
    socket.once('close', () => {
      const left = (open.get(addr) ?? 1) - 1;
      if (left <= 0) open.delete(addr);
      else open.set(addr, left);
    });
  });
}

/**
 * limitedServerFactory is createLimitedServer as fastify's serverFactory
 * (fastify then sets no timeouts of its own: these are the only ones).
 */
export function limitedServerFactory(limits: ListenerLimits, extras: ServerExtras = {}) {
  return (handler: (req: IncomingMessage, res: ServerResponse) => void) => createLimitedServer(limits, handler, extras);
}

import type { IncomingMessage, RequestListener, Server, ServerOptions, ServerResponse } from 'node:http';
import type { Server as HttpsServer } from 'node:https';

/**
 * http, https: the built-in modules themselves, not imported as ES modules:
 * importing node:http builds its ES module namespace, which reads every export
 * and so loads the fetch implementation (undici) behind its lazy ones: about
 * 110 ms of every start (kproxy, which never uses them, pays it before its
 * first log line).
 */
const http = process.getBuiltinModule('node:http');
const https = process.getBuiltinModule('node:https');
import type { Socket } from 'node:net';
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
  /** maxConnections: open connections in total; past it an idle one is closed to make room, or the newcomer is. */
  readonly maxConnections: number;
  /** maxConnectionsPerClient: open connections from one address; past it that address's oldest idle one is closed, or the newcomer is. */
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
 * taking the total, and a listener whose caps are reached makes room by
 * closing an idle connection of the address holding the most (see
 * admitConnections), so the kubelet's probe still gets in.
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
 * extras.tls is given, with every limit of `limits` applied. A connection
 * beyond a cap makes room by closing an idle one (admitConnections), or is
 * destroyed on arrival, before a byte of it is parsed.
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
  const server: LimitedServer = tls ? https.createServer({ ...options, ...tls }, handler) : http.createServer(options, handler);
  // A backstop only: admitConnections keeps the count at the cap, but a connection it
  // closed to make room counts in Node's own tally until its close event.
  server.maxConnections = 2 * limits.maxConnections;
  server.setTimeout(limits.idleTimeoutMs);
  admitConnections(server, limits);
  return server;
}

/**
 * admitConnections enforces the connection caps as connections arrive. A cap
 * that only refused newcomers would let a few clients fill a listener with
 * idle connections (16 addresses hold :10256's 1024) and refuse the kubelet's
 * probe. So when a cap is reached the oldest idle connection (no request being
 * answered, not upgraded to a WebSocket) is closed to make room: of the same
 * address for the per-address cap, of the address holding the most for the
 * total. An idle connection costs its client nothing to reopen; a request in
 * flight is never cut. Only when every candidate is busy is the newcomer closed.
 */
function admitConnections(server: LimitedServer, limits: ListenerLimits): void {
  /** byAddress: each address's open connections, oldest first (a Set keeps insertion order). */
  const byAddress = new Map<string, Set<Socket>>();
  /** inFlight: requests being answered per connection (pipelined ones count each). */
  const inFlight = new Map<Socket, number>();
  const upgraded = new WeakSet<Socket>();
  /**
   * byPeer finds a request's TCP connection by its peer's address and port: an
   * HTTPS request's socket is the TLS socket over the one 'connection' gave.
   */
  const byPeer = new Map<string, Socket>();
  const peer = (s: Socket) => `${s.remoteAddress}|${s.remotePort}`;
  const connectionOf = (s: Socket) => byPeer.get(peer(s)) ?? s;
  let total = 0;

  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const socket = connectionOf(req.socket);
    inFlight.set(socket, (inFlight.get(socket) ?? 0) + 1);
    res.once('close', () => {
      const n = (inFlight.get(socket) ?? 1) - 1;
      if (n <= 0) inFlight.delete(socket);
      else inFlight.set(socket, n);
    });
  });
  // Upgrades are watched only once the server has a listener of its own for them (the
  // dashboard's WebSockets): with none, Node answers an upgrade request as a plain request.
  let watchingUpgrades = false;
  server.on('newListener', (event) => {
    if (event !== 'upgrade' || watchingUpgrades) return;
    watchingUpgrades = true;
    // (A test's injected upgrade, fastify-websocket's injectWS, comes without a socket.)
    server.prependListener('upgrade', (req: IncomingMessage) => req.socket && upgraded.add(connectionOf(req.socket)));
  });

  const forget = (addr: string, key: string, socket: Socket): boolean => {
    const set = byAddress.get(addr);
    if (!set?.delete(socket)) return false;
    if (set.size === 0) byAddress.delete(addr);
    if (byPeer.get(key) === socket) byPeer.delete(key);
    inFlight.delete(socket);
    total--;
    return true;
  };
  const idleOf = (set: ReadonlySet<Socket> | undefined): Socket | undefined => {
    for (const s of set ?? []) if (!inFlight.has(s) && !upgraded.has(s)) return s;
    return undefined;
  };
  /** makeRoom closes the oldest idle connection of `addr`, or of the address holding the most; false when all are busy. */
  const makeRoom = (addr: string | null): boolean => {
    const order = addr !== null ? [addr] : [...byAddress.keys()].sort((a, b) => byAddress.get(b)!.size - byAddress.get(a)!.size);
    for (const a of order) {
      const victim = idleOf(byAddress.get(a));
      if (!victim) continue;
      forget(a, peer(victim), victim);
      victim.destroy();
      return true;
    }
    return false;
  };

  // HTTPS servers see the TCP connection as 'connection' too, before the TLS handshake.
  server.on('connection', (socket: Socket) => {
    const addr = socket.remoteAddress ?? '';
    if ((byAddress.get(addr)?.size ?? 0) >= limits.maxConnectionsPerClient && !makeRoom(addr)) return void socket.destroy();
    if (total >= limits.maxConnections && !makeRoom(null)) return void socket.destroy();
    let set = byAddress.get(addr);
    if (!set) byAddress.set(addr, (set = new Set()));
    set.add(socket);
    const key = peer(socket);
    byPeer.set(key, socket);
    total++;
    socket.once('close', () => forget(addr, key, socket));
  });
}

/**
 * limitedServerFactory is createLimitedServer as fastify's serverFactory
 * (fastify then sets no timeouts of its own: these are the only ones).
 */
export function limitedServerFactory(limits: ListenerLimits, extras: ServerExtras = {}) {
  return (handler: (req: IncomingMessage, res: ServerResponse) => void) => createLimitedServer(limits, handler, extras);
}

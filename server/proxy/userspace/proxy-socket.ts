import type { Clock, TimerHandle } from '../../clock.ts';
import { errorMessage } from '../../errors.ts';
import type { SocketAddress, Sockets, TcpListener, TcpStream, UdpSocket } from '../../kernel/sockets.ts';
import type { Logger } from '../../log.ts';
import type { Endpoint } from '../endpoint.ts';
import type { ServicePort } from '../service-port.ts';
import { RoundRobin, type Random } from './balancer.ts';
import type { Pool, PortStats, RefusedReason, RelayConnection, RelayStats } from './relay-stats.ts';
import { relayTcp } from './tcp-relay.ts';
import { UdpRelay } from './udp-relay.ts';

/** CONNECT_TIMEOUTS_MS: kube-proxy's userspace endpointDialTimeout, one attempt each, the next endpoint after a failure. */
export const CONNECT_TIMEOUTS_MS: readonly number[] = [250, 500, 1000, 2000];

/** RelayLimits are the userspace mode's limits (0: none). */
export interface RelayLimits {
  readonly maxConnections: number;
  readonly maxConnectionsPerService: number;
  readonly maxUDPSessions: number;
  readonly udpIdleTimeoutMs: number;
  readonly drainTimeoutMs: number;
}

/** RelayContext is what every proxy socket shares: the sockets, the clock, the figures and the limits. */
export interface RelayContext {
  readonly sockets: Sockets;
  readonly clock: Clock;
  readonly log: Logger;
  readonly stats: RelayStats;
  readonly limits: RelayLimits;
  readonly random?: Random;
  /** refused counts and logs (rate-limited) a connection or UDP client that was not relayed. */
  refused(port: PortStats, reason: RefusedReason, detail: Record<string, unknown>): void;
}

interface Target {
  readonly ip: string;
  readonly port: number;
}

/**
 * ProxySocket is one socket kproxy listens on for a service port: kube-proxy's
 * userspace ServiceInfo with its ProxySocket. The portals redirect the
 * service's addresses to it; it picks an endpoint (round robin, ClientIP
 * affinity) and relays. A service port has one for its Cluster-policy
 * endpoints and, when a traffic policy is Local, one for this node's
 * endpoints; each balances on its own.
 */
export class ProxySocket {
  sp: ServicePort;
  readonly pool: Pool;
  readonly balancer: RoundRobin;
  readonly #ctx: RelayContext;
  readonly #stats: PortStats;
  readonly #targets = new Map<string, Target>();
  readonly #open = new Map<number, RelayConnection>();
  readonly #drainTimers = new Set<TimerHandle>();
  #listener: TcpListener | null = null;
  #udp: UdpSocket | null = null;
  #udpRelay: UdpRelay | null = null;
  #address: SocketAddress = { address: '', port: 0 };
  #closed = false;

  private constructor(ctx: RelayContext, sp: ServicePort, pool: Pool) {
    this.#ctx = ctx;
    this.sp = sp;
    this.pool = pool;
    this.balancer = new RoundRobin({ clock: ctx.clock, random: ctx.random });
    this.balancer.setAffinity(sp.stickyMaxAgeSeconds);
    this.#stats = ctx.stats.port(sp.id, sp.service, sp.protocol);
  }

  /** open binds a proxy socket for a TCP or UDP service port; it rejects with the bind error. */
  static async open(ctx: RelayContext, sp: ServicePort, pool: Pool, host: string, port: number): Promise<ProxySocket> {
    const ps = new ProxySocket(ctx, sp, pool);
    if (sp.protocol === 'TCP') {
      ps.#listener = await ctx.sockets.listenTcp(
        host,
        port,
        (c) => ps.#accept(c),
        (err) => ctx.log.error('accepting a connection failed', { servicePort: sp.id, pool, err: errorMessage(err) }),
      );
      ps.#address = ps.#listener.address;
    } else {
      const relay = new UdpRelay({
        sockets: ctx.sockets,
        clock: ctx.clock,
        idleTimeoutMs: ctx.limits.udpIdleTimeoutMs,
        reply: (data, client) => ps.#udp?.send(data, client.port, client.address),
        open: (client) => ps.#openSession(client),
        onError: (client, endpoint, err) => ctx.log.debug('UDP session failed', { servicePort: sp.id, client: `${client.address}:${client.port}`, endpoint, err: errorMessage(err) }),
      });
      ps.#udpRelay = relay;
      ps.#udp = await ctx.sockets.bindUdp(host, port, {
        message: (data, from) => relay.datagram(data, from),
        error: (err) => ctx.log.error('UDP proxy socket error', { servicePort: sp.id, pool, err: errorMessage(err) }),
      });
      ps.#address = ps.#udp.address;
    }
    return ps;
  }

  /** port: the node port the socket listens on (what the portals redirect to). */
  get port(): number {
    return this.#address.port;
  }

  get address(): SocketAddress {
    return this.#address;
  }

  /** openConnections: TCP connections and UDP sessions of this socket now. */
  get openConnections(): number {
    return this.#open.size;
  }

  /**
   * update takes the service port's new settings and this pool's endpoints. New
   * connections go to the new endpoints at once; open connections to endpoints
   * that left keep running, marked draining, and with a drain limit are closed
   * when it passes (unless their endpoint came back).
   */
  update(sp: ServicePort, endpoints: readonly Endpoint[]): void {
    this.sp = sp;
    this.balancer.setAffinity(sp.stickyMaxAgeSeconds);
    this.#targets.clear();
    for (const ep of endpoints) this.#targets.set(ep.key, { ip: ep.ip, port: ep.port });
    this.balancer.setEndpoints([...this.#targets.keys()]);
    this.#markDraining();
  }

  /** serving: the endpoints of this socket's rotation now. */
  serving(): Iterable<string> {
    return this.#targets.keys();
  }

  /**
   * close stops accepting (the portals were removed first). Open TCP
   * connections keep running and drain as if their endpoints had left;
   * UDP sessions end with the socket, as upstream's.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#listener?.close();
    this.#udpRelay?.closeAll('proxy socket closed');
    this.#udp?.close();
    this.#targets.clear();
    this.#markDraining();
  }

  #markDraining(): void {
    const now = this.#ctx.clock.now();
    const newly: RelayConnection[] = [];
    for (const c of this.#open.values()) {
      const serving = this.#targets.has(c.endpoint);
      if (serving) c.drainingSince = null;
      else if (c.drainingSince === null) {
        c.drainingSince = now;
        newly.push(c);
      }
    }
    const limit = this.#ctx.limits.drainTimeoutMs;
    if (newly.length === 0 || limit <= 0) return;
    const timer = this.#ctx.clock.setTimeout(() => {
      this.#drainTimers.delete(timer);
      for (const c of newly) {
        // Still open, and its endpoint did not come back: the drain limit ends it.
        if (!this.#open.has(c.id) || c.drainingSince === null) continue;
        this.#stats.drainClosed++;
        this.#ctx.log.info('closing a connection whose endpoint left (drain limit)', { servicePort: this.sp.id, client: c.client, endpoint: c.endpoint, drainMs: limit });
        c.close();
      }
    }, limit);
    this.#drainTimers.add(timer);
  }

  // ------------------------------------------------------------------ TCP

  #limitReached(): RefusedReason | null {
    const { maxConnections, maxConnectionsPerService } = this.#ctx.limits;
    const stats = this.#ctx.stats;
    if (maxConnections > 0 && stats.activeTcp >= maxConnections) return 'limit_total';
    if (maxConnectionsPerService > 0 && stats.serviceActive(this.sp.service) >= maxConnectionsPerService) return 'limit_service';
    return null;
  }

  #accept(client: TcpStream): void {
    const clientKey = `${client.remoteAddress}:${client.remotePort}`;
    // Until the relay takes over, an error only ends the client's side (closed below).
    client.on('error', () => {});
    if (this.#closed) {
      client.resetAndDestroy();
      return;
    }
    const limit = this.#limitReached();
    if (limit) {
      this.#ctx.refused(this.#stats, limit, { client: clientKey, limits: this.#ctx.limits });
      client.resetAndDestroy();
      return;
    }
    const service = this.sp.service;
    this.#ctx.stats.reserveTcp(service);
    void this.#connect(client).then(
      (r) => {
        if ('reason' in r) {
          this.#ctx.stats.releaseTcp(service);
          // A client that left while kproxy connected was not refused.
          if (client.destroyed) return;
          this.#ctx.refused(this.#stats, r.reason, { client: clientKey, ...r.detail });
          client.resetAndDestroy();
          return;
        }
        if (client.destroyed) {
          // The client gave up while kproxy connected.
          r.stream.destroy();
          this.#ctx.stats.releaseTcp(service);
          return;
        }
        this.#relay(client, clientKey, r.endpoint, r.stream, service);
      },
      (err: unknown) => {
        // #connect reports failures as results; a throw is a bug, which must not leave the client hanging.
        this.#ctx.stats.releaseTcp(service);
        this.#ctx.log.error('relaying a connection failed', { servicePort: this.sp.id, client: clientKey, err: errorMessage(err) });
        if (!client.destroyed) client.resetAndDestroy();
      },
    );
  }

  /**
   * #connect tries an endpoint with each of CONNECT_TIMEOUTS_MS in turn: a
   * refused or timed-out attempt is counted and the next endpoint tried, with
   * the client's affinity reset (upstream's tryConnect).
   */
  async #connect(client: TcpStream): Promise<{ endpoint: string; stream: TcpStream } | { reason: RefusedReason; detail: Record<string, unknown> }> {
    const clientIP = client.remoteAddress ?? '';
    const errors: string[] = [];
    for (const [attempt, timeoutMs] of CONNECT_TIMEOUTS_MS.entries()) {
      const key = this.balancer.next(clientIP, attempt > 0);
      const target = key === null ? undefined : this.#targets.get(key);
      if (key === null || !target) return { reason: 'no_endpoints', detail: { pool: this.pool } };
      if (attempt > 0) this.#stats.retries++;
      const pending = this.#ctx.sockets.connectTcp(target.ip, target.port);
      let timer: TimerHandle | null = null;
      const timedOut = new Promise<'timeout'>((resolve) => {
        timer = this.#ctx.clock.setTimeout(() => resolve('timeout'), timeoutMs);
      });
      const onClientGone = () => pending.abort();
      client.once('close', onClientGone);
      try {
        const r = await Promise.race([pending.connected, timedOut]);
        if (r !== 'timeout') return { endpoint: key, stream: r };
        pending.abort();
        errors.push(`${key}: no answer within ${timeoutMs} ms`);
      } catch (err) {
        errors.push(`${key}: ${errorMessage(err)}`);
      } finally {
        if (timer) this.#ctx.clock.clearTimeout(timer);
        client.off('close', onClientGone);
      }
      // A client that left while kproxy connected says nothing about the endpoint.
      if (client.destroyed) return { reason: 'connect_failed', detail: { attempts: errors } };
      this.#ctx.stats.endpoint(this.#stats, key).connectFailures++;
    }
    return { reason: 'connect_failed', detail: { attempts: errors } };
  }

  #relay(client: TcpStream, clientKey: string, endpoint: string, stream: TcpStream, service: string): void {
    const stats = this.#ctx.stats;
    const port = this.#stats;
    const ep = stats.endpoint(port, endpoint);
    stream.on('error', () => {});
    client.setKeepAlive?.(true, 300_000);
    stream.setKeepAlive?.(true, 300_000);
    let relay: { close(): void } | null = null;
    const conn: RelayConnection = {
      id: stats.nextId(),
      protocol: 'TCP',
      servicePort: this.sp.id,
      service,
      pool: this.pool,
      client: clientKey,
      endpoint,
      startedAt: this.#ctx.clock.now(),
      bytesToEndpoint: 0,
      bytesToClient: 0,
      halfClosed: false,
      drainingSince: this.#targets.has(endpoint) ? null : this.#ctx.clock.now(),
      close: () => relay?.close(),
    };
    ep.active++;
    ep.total++;
    port.active++;
    port.total++;
    stats.connections.set(conn.id, conn);
    this.#open.set(conn.id, conn);
    relay = relayTcp(
      client,
      stream,
      {
        toEndpoint: (n) => {
          conn.bytesToEndpoint += n;
          ep.bytesToEndpoint += n;
          port.bytesToEndpoint += n;
        },
        toClient: (n) => {
          conn.bytesToClient += n;
          ep.bytesToClient += n;
          port.bytesToClient += n;
        },
        halfClosed: () => (conn.halfClosed = true),
      },
      () => {
        ep.active--;
        port.active--;
        stats.connections.delete(conn.id);
        this.#open.delete(conn.id);
        stats.releaseTcp(service);
      },
    );
  }

  // ------------------------------------------------------------------ UDP

  #openSession(client: SocketAddress): ReturnType<ConstructorParameters<typeof UdpRelay>[0]['open']> {
    const clientKey = `${client.address}:${client.port}`;
    const max = this.#ctx.limits.maxUDPSessions;
    const stats = this.#ctx.stats;
    if (max > 0 && stats.activeUdp >= max) {
      this.#ctx.refused(this.#stats, 'limit_udp_sessions', { client: clientKey, maxUDPSessions: max });
      return { refused: 'limit_udp_sessions' };
    }
    const key = this.balancer.next(client.address);
    const target = key === null ? undefined : this.#targets.get(key);
    if (key === null || !target) {
      this.#ctx.refused(this.#stats, 'no_endpoints', { client: clientKey, pool: this.pool });
      return { refused: 'no_endpoints' };
    }
    const port = this.#stats;
    const ep = stats.endpoint(port, key);
    const conn: RelayConnection = {
      id: stats.nextId(),
      protocol: 'UDP',
      servicePort: this.sp.id,
      service: this.sp.service,
      pool: this.pool,
      client: clientKey,
      endpoint: key,
      startedAt: this.#ctx.clock.now(),
      bytesToEndpoint: 0,
      bytesToClient: 0,
      halfClosed: false,
      drainingSince: null,
      close: () => this.#udpRelay?.close(`${client.address}|${client.port}`, 'drain limit'),
    };
    ep.active++;
    ep.total++;
    port.active++;
    port.total++;
    stats.activeUdp++;
    stats.connections.set(conn.id, conn);
    this.#open.set(conn.id, conn);
    return {
      endpoint: { ip: target.ip, port: target.port, key },
      track: {
        toEndpoint: (n) => {
          conn.bytesToEndpoint += n;
          ep.bytesToEndpoint += n;
          port.bytesToEndpoint += n;
        },
        toClient: (n) => {
          conn.bytesToClient += n;
          ep.bytesToClient += n;
          port.bytesToClient += n;
        },
        dropped: () => port.udpDropped++,
        closed: () => {
          ep.active--;
          port.active--;
          stats.activeUdp--;
          stats.connections.delete(conn.id);
          this.#open.delete(conn.id);
        },
      },
    };
  }
}

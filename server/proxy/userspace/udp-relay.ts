import type { Clock, TimerHandle } from '../../clock.ts';
import { errorMessage } from '../../errors.ts';
import type { ConnectedUdp, SocketAddress, Sockets } from '../../kernel/sockets.ts';
import type { RefusedReason } from './relay-stats.ts';

/** SessionTrack is what the relay reports about one session (its connection entry and counters). */
export interface SessionTrack {
  toEndpoint(n: number): void;
  toClient(n: number): void;
  /** dropped: a datagram was dropped (the session's queue was full while its socket opened). */
  dropped(): void;
  /** closed: the session ended (idle, error, drain, socket closed); why, for the log. */
  closed(why: string): void;
}

export interface UdpRelayOptions {
  sockets: Sockets;
  clock: Clock;
  /** idleTimeoutMs: a session with no datagram either way for this long ends (udpIdleTimeout). */
  idleTimeoutMs: number;
  /** reply sends an endpoint's datagram back to the client through the proxy socket. */
  reply(data: Buffer, client: SocketAddress): void;
  /**
   * open decides about a new client: an endpoint ("ip:port" and its parts) and
   * the tracking of the session, or why it is refused (limits, no endpoint).
   */
  open(client: SocketAddress): { endpoint: { ip: string; port: number; key: string }; track: SessionTrack } | { refused: RefusedReason };
  /** onError: a session's socket could not be opened or failed (logged by the owner). */
  onError(client: SocketAddress, endpoint: string, err: unknown): void;
}

/** MAX_QUEUED: datagrams (and bytes) a new session holds while its socket to the endpoint opens. */
export const MAX_QUEUED = { datagrams: 64, bytes: 256 * 1024 };

interface Session {
  readonly key: string;
  readonly client: SocketAddress;
  readonly endpoint: string;
  readonly track: SessionTrack;
  upstream: ConnectedUdp | null;
  queue: Buffer[];
  queuedBytes: number;
  lastActivity: number;
  timer: TimerHandle | null;
  closed: boolean;
}

/**
 * UdpRelay is the UDP half of a proxy socket, as kube-proxy's userspace
 * udpProxySocket: one session per client address ("ip:port"), each with its
 * own socket connected to the endpoint chosen for it; the endpoint's answers
 * go back to the client from the proxy socket (so conntrack undoes the
 * portal's REDIRECT/DNAT and the client sees the service address). A session
 * ends after idleTimeoutMs without a datagram either way, on a socket error
 * (an ICMP port unreachable from the endpoint), or with the proxy socket.
 * Idle checks use one timer per session that is pushed back lazily, not reset
 * per datagram.
 */
export class UdpRelay {
  readonly #o: UdpRelayOptions;
  readonly #sessions = new Map<string, Session>();

  constructor(opts: UdpRelayOptions) {
    this.#o = opts;
  }

  get size(): number {
    return this.#sessions.size;
  }

  /** datagram relays one datagram from a client. */
  datagram(data: Buffer, from: SocketAddress): void {
    const key = `${from.address}|${from.port}`;
    let s = this.#sessions.get(key);
    if (!s) {
      const opened = this.#o.open(from);
      if ('refused' in opened) return;
      s = this.#start(key, from, opened.endpoint, opened.track);
    }
    s.lastActivity = this.#o.clock.monotonic();
    s.track.toEndpoint(data.length);
    if (s.upstream) {
      s.upstream.send(data);
      return;
    }
    if (s.queue.length >= MAX_QUEUED.datagrams || s.queuedBytes + data.length > MAX_QUEUED.bytes) {
      s.track.dropped();
      return;
    }
    s.queue.push(data);
    s.queuedBytes += data.length;
  }

  #start(key: string, client: SocketAddress, endpoint: { ip: string; port: number; key: string }, track: SessionTrack): Session {
    const s: Session = { key, client, endpoint: endpoint.key, track, upstream: null, queue: [], queuedBytes: 0, lastActivity: this.#o.clock.monotonic(), timer: null, closed: false };
    this.#sessions.set(key, s);
    this.#arm(s, this.#o.idleTimeoutMs);
    this.#o.sockets
      .connectUdp(endpoint.ip, endpoint.port, {
        message: (data) => {
          if (s.closed) return;
          s.lastActivity = this.#o.clock.monotonic();
          s.track.toClient(data.length);
          this.#o.reply(data, client);
        },
        error: (err) => {
          this.#o.onError(client, endpoint.key, err);
          this.#end(s, `socket error: ${errorMessage(err)}`);
        },
      })
      .then(
        (up) => {
          if (s.closed) return up.close();
          s.upstream = up;
          for (const d of s.queue) up.send(d);
          s.queue = [];
          s.queuedBytes = 0;
        },
        (err: unknown) => {
          this.#o.onError(client, endpoint.key, err);
          this.#end(s, `cannot open a socket to the endpoint: ${errorMessage(err)}`);
        },
      );
    return s;
  }

  #arm(s: Session, ms: number): void {
    s.timer = this.#o.clock.setTimeout(() => {
      s.timer = null;
      if (s.closed) return;
      const idle = this.#o.clock.monotonic() - s.lastActivity;
      if (idle >= this.#o.idleTimeoutMs) this.#end(s, 'idle');
      else this.#arm(s, this.#o.idleTimeoutMs - idle);
    }, ms);
  }

  #end(s: Session, why: string): void {
    if (s.closed) return;
    s.closed = true;
    this.#sessions.delete(s.key);
    if (s.timer) this.#o.clock.clearTimeout(s.timer);
    s.timer = null;
    s.upstream?.close();
    s.queue = [];
    s.track.closed(why);
  }

  /** close ends one client's session ("ip|port"), for the drain limit. */
  close(key: string, why: string): void {
    const s = this.#sessions.get(key);
    if (s) this.#end(s, why);
  }

  /** closeAll ends every session (the proxy socket is closing). */
  closeAll(why: string): void {
    for (const s of [...this.#sessions.values()]) this.#end(s, why);
  }
}

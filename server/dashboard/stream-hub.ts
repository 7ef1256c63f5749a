import { SlowClientError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { Viewer } from './protocol.ts';

/** HubSocket is what the hub needs of a WebSocket (ws.WebSocket satisfies it; tests fake it). */
export interface HubSocket {
  /** bufferedAmount: bytes queued for the peer and not yet handed to the kernel. */
  readonly bufferedAmount: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

/** Close codes the dashboard uses (4000-4999 are the application's own). */
export const CLOSE_SLOW_CLIENT = 4008;
export const CLOSE_TOO_MANY = 1013;
export const CLOSE_GOING_AWAY = 1001;
/** CLOSE_POLICY: the client broke the stream's rules (it sent far more messages than its budget). */
export const CLOSE_POLICY = 1008;
/** CLOSE_UNAUTHORIZED is part of the wire format (protocol.ts): the browser reacts to it. */
export { CLOSE_UNAUTHORIZED } from './protocol.ts';

/** Delivery: essential messages (snapshots) are always queued; droppable ones are skipped for a lagging client. */
export type Delivery = 'essential' | 'droppable';

/** StreamClient is one dashboard connection. */
export class StreamClient {
  readonly id: number;
  readonly viewer: Viewer;
  readonly remote: string;
  readonly socket: HubSocket;
  /** seq: the last sequence number given to a message for this client (sent or skipped). */
  seq = 0;
  /** watch: the service ("ns/name") whose page is open, for its live counters. */
  watch: string | null = null;
  skipped = 0;
  closed = false;

  constructor(id: number, socket: HubSocket, viewer: Viewer, remote: string) {
    this.id = id;
    this.socket = socket;
    this.viewer = viewer;
    this.remote = remote;
  }
}

export interface StreamHubOptions {
  logger: Logger;
  /** maxClients: connections beyond this are refused (each may hold up to hardLimitBytes). */
  maxClients?: number;
  /** maxPerUser: connections of one user beyond this are refused, so one viewer cannot take them all (default 6). */
  maxPerUser?: number;
  /** softLimitBytes: above this backlog a client misses droppable messages (and re-snapshots on the gap). */
  softLimitBytes?: number;
  /** hardLimitBytes: above this backlog a client is disconnected. */
  hardLimitBytes?: number;
}

/**
 * StreamHub numbers and delivers the dashboard's messages. Every message a
 * client is meant to get takes the next seq of that client, whether it is sent
 * or not: a client whose backlog passed the soft limit misses deltas and
 * counters and sees a hole in seq, which makes it ask for a snapshot; one whose
 * backlog passed the hard limit is disconnected with CLOSE_SLOW_CLIENT. So a
 * client costs at most hardLimitBytes plus one message of server memory.
 * Bodies are serialised once per broadcast; seq is spliced in per client.
 */
export class StreamHub {
  readonly #log: Logger;
  readonly #max: number;
  readonly #maxPerUser: number;
  readonly #perUser = new Map<string, number>();
  readonly #soft: number;
  readonly #hard: number;
  readonly #clients = new Set<StreamClient>();
  #nextId = 1;
  /** slowDropped counts clients disconnected for falling behind. */
  slowDropped = 0;

  constructor(opts: StreamHubOptions) {
    this.#log = opts.logger;
    this.#max = opts.maxClients ?? 16;
    this.#maxPerUser = opts.maxPerUser ?? 6;
    this.#soft = opts.softLimitBytes ?? 512 * 1024;
    this.#hard = opts.hardLimitBytes ?? 8 * 1024 * 1024;
  }

  get size(): number {
    return this.#clients.size;
  }

  get full(): boolean {
    return this.#clients.size >= this.#max;
  }

  /** fullFor: the user already holds maxPerUser connections. */
  fullFor(user: string): boolean {
    return (this.#perUser.get(user) ?? 0) >= this.#maxPerUser;
  }

  get maxPerUser(): number {
    return this.#maxPerUser;
  }

  clients(): Iterable<StreamClient> {
    return this.#clients;
  }

  /** add registers a connection; null (and the socket closed) when the hub, or the user's share of it, is full. */
  add(socket: HubSocket, viewer: Viewer, remote: string): StreamClient | null {
    if (this.full || this.fullFor(viewer.user)) {
      socket.close(CLOSE_TOO_MANY, this.full ? `too many dashboard connections (${this.#max})` : `too many dashboard connections of user ${viewer.user} (${this.#maxPerUser})`);
      return null;
    }
    const c = new StreamClient(this.#nextId++, socket, viewer, remote);
    this.#clients.add(c);
    this.#perUser.set(viewer.user, (this.#perUser.get(viewer.user) ?? 0) + 1);
    return c;
  }

  remove(c: StreamClient): void {
    c.closed = true;
    if (!this.#clients.delete(c)) return;
    const left = (this.#perUser.get(c.viewer.user) ?? 1) - 1;
    if (left <= 0) this.#perUser.delete(c.viewer.user);
    else this.#perUser.set(c.viewer.user, left);
  }

  /** send gives a message to one client; body must be a JSON object whose first key is "type". */
  send(c: StreamClient, body: object, delivery: Delivery): boolean {
    return this.sendText(c, JSON.stringify(body), delivery);
  }

  /** sendText is send() with the body already serialised. */
  sendText(c: StreamClient, json: string, delivery: Delivery): boolean {
    return this.#deliver(c, json, delivery);
  }

  /** broadcast gives one message to every client (serialised once). */
  broadcast(body: object, delivery: Delivery): void {
    if (this.#clients.size === 0) return;
    const json = JSON.stringify(body);
    for (const c of [...this.#clients]) this.#deliver(c, json, delivery);
  }

  /** close says goodbye to every client (daemon stopping). */
  closeAll(code = CLOSE_GOING_AWAY, reason = 'kproxy is stopping'): void {
    for (const c of [...this.#clients]) {
      this.remove(c);
      c.socket.close(code, reason);
    }
  }

  #deliver(c: StreamClient, json: string, delivery: Delivery): boolean {
    if (c.closed) return false;
    const seq = ++c.seq;
    const backlog = c.socket.bufferedAmount;
    if (backlog > this.#hard) {
      this.slowDropped++;
      const err = new SlowClientError(`dashboard client ${c.remote} (${c.viewer.user}) fell ${Math.round(backlog / 1024)} KiB behind; disconnected`);
      this.#log.warn(err.message, { code: err.code, dropped: this.slowDropped });
      this.remove(c);
      c.socket.close(CLOSE_SLOW_CLIENT, `${err.code}: too far behind, reconnect`);
      return false;
    }
    if (delivery === 'droppable' && backlog > this.#soft) {
      c.skipped++;
      return false;
    }
    c.socket.send(`{"seq":${seq},${json.slice(1)}`);
    return true;
  }
}

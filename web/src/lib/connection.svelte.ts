import { CLOSE_UNAUTHORIZED, WS_SUBPROTOCOL, WS_TOKEN_PREFIX, type ClientMessage, type ServerMessage } from './protocol.ts';

/** ConnState is what the connection indicator shows. */
export type ConnState = 'connecting' | 'live' | 'reconnecting' | 'stale';

/** SocketLike is what the connection needs of a WebSocket (tests pass a fake). */
export interface SocketLike {
  readonly readyState: number;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

export interface Timers {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(h: unknown): void;
}

export interface ConnectionOptions {
  url: string;
  token: () => string | null;
  onMessage: (m: ServerMessage) => void;
  /** onRefused: the server closed the stream because the credential no longer grants viewing, or the socket keeps failing before it opens. */
  onRefused?: () => void;
  socket?: (url: string, protocols: string[]) => SocketLike;
  timers?: Timers;
  /** staleAfterMs: no message for this long while open means the stream is stale (server sends counters every 5 s). */
  staleAfterMs?: number;
}

const OPEN = 1;
const browserTimers: Timers = { now: () => Date.now(), setTimeout: (fn, ms) => setTimeout(fn, ms), clearTimeout: (h) => clearTimeout(h as number) };

/** encodeToken puts a token into the subprotocol form the server reads (base64url, as Kubernetes does). */
export function tokenProtocol(token: string): string {
  const bytes = new TextEncoder().encode(token);
  let bin = '';
  for (const b of bytes) bin += String.fromCharCode(b);
  return WS_TOKEN_PREFIX + btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/**
 * Connection keeps the live stream open: it reconnects with backoff, checks
 * that seq numbers follow each other, and on a gap (the server skipped
 * messages for a slow client) drops everything until a fresh snapshot, which
 * it asks for itself. Messages are handed on only in order and complete.
 */
export class Connection {
  state = $state<ConnState>('connecting');
  /** lastMessageAt: when the last message arrived (the indicator shows the age when stale). */
  lastMessageAt = $state(0);
  /** gaps: how many times seq jumped (each made the client re-snapshot). */
  gaps = $state(0);
  readonly #o: Required<Omit<ConnectionOptions, 'onRefused'>> & Pick<ConnectionOptions, 'onRefused'>;
  #socket: SocketLike | null = null;
  #expected = 1;
  #awaitingSnapshot = true;
  #attempt = 0;
  #failuresBeforeOpen = 0;
  #timer: unknown = null;
  #staleTimer: unknown = null;
  #stopped = false;

  constructor(opts: ConnectionOptions) {
    this.#o = {
      socket: (url, protocols) => new WebSocket(url, protocols) as unknown as SocketLike,
      timers: browserTimers,
      staleAfterMs: 15_000,
      ...opts,
    };
  }

  start(): void {
    this.#stopped = false;
    this.#open();
  }

  stop(): void {
    this.#stopped = true;
    const t = this.#o.timers;
    if (this.#timer) t.clearTimeout(this.#timer);
    if (this.#staleTimer) t.clearTimeout(this.#staleTimer);
    this.#socket?.close(1000, 'bye');
    this.#socket = null;
  }

  send(m: ClientMessage): void {
    if (this.#socket?.readyState === OPEN) this.#socket.send(JSON.stringify(m));
  }

  #open(): void {
    const token = this.#o.token();
    const protocols = [WS_SUBPROTOCOL, ...(token ? [tokenProtocol(token)] : [])];
    const s = this.#o.socket(this.#o.url, protocols);
    this.#socket = s;
    let opened = false;
    this.#expected = 1;
    this.#awaitingSnapshot = true;
    s.onopen = () => {
      opened = true;
      this.#failuresBeforeOpen = 0;
    };
    s.onmessage = (ev) => {
      if (this.#socket !== s) return;
      this.#receive(String(ev.data));
    };
    s.onclose = (ev) => {
      if (this.#socket !== s) return;
      this.#socket = null;
      // The server re-checked the credential and it no longer grants viewing: say so now rather than after failed retries.
      if (ev.code === CLOSE_UNAUTHORIZED) this.#o.onRefused?.();
      else if (!opened && ++this.#failuresBeforeOpen >= 2) this.#o.onRefused?.();
      this.#retry();
    };
    s.onerror = () => {
      // onclose follows and schedules the retry.
    };
  }

  #retry(): void {
    if (this.#stopped) return;
    this.state = 'reconnecting';
    const delay = Math.min(15_000, 500 * 2 ** Math.min(this.#attempt++, 5));
    this.#timer = this.#o.timers.setTimeout(() => this.#open(), delay);
  }

  #receive(text: string): void {
    let m: ServerMessage;
    try {
      m = JSON.parse(text) as ServerMessage;
    } catch {
      return;
    }
    this.lastMessageAt = this.#o.timers.now();
    this.#armStale();
    if (m.type === 'snapshot') {
      this.#awaitingSnapshot = false;
      this.#expected = m.seq + 1;
      this.#attempt = 0;
      this.state = 'live';
      this.#o.onMessage(m);
      return;
    }
    if (this.#awaitingSnapshot) {
      this.#expected = m.seq + 1;
      return;
    }
    if (m.seq !== this.#expected) {
      // Something was skipped: our copy may be missing a delta. Start over from a snapshot.
      this.gaps++;
      this.#awaitingSnapshot = true;
      this.#expected = m.seq + 1;
      this.send({ type: 'snapshot' });
      return;
    }
    this.#expected++;
    if (this.state !== 'live') this.state = 'live';
    this.#o.onMessage(m);
  }

  #armStale(): void {
    const t = this.#o.timers;
    if (this.#staleTimer) t.clearTimeout(this.#staleTimer);
    this.#staleTimer = t.setTimeout(() => {
      if (this.#socket && this.state === 'live') this.state = 'stale';
    }, this.#o.staleAfterMs);
  }
}

import dgram from 'node:dgram';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { ipFamilyOf } from '../net/ip.ts';
import { LISTEN_BACKLOG } from '../net/listen.ts';
import { LentReader, type LentChunk } from './lent-reads.ts';

/**
 * Sockets is the OS boundary of the userspace mode: the TCP listeners and UDP
 * sockets kproxy binds on the node and the connections it opens to endpoints.
 * The real implementation below uses node:net and node:dgram; the simulated
 * one (sockets-simulated.ts) is an in-memory network that --dry-run binds
 * (nothing on the host) and the unit tests drive.
 */
export interface Sockets {
  /** simulated: nothing is bound on the host (--dry-run, tests). */
  readonly simulated: boolean;
  /**
   * listenTcp binds and listens on host:port (port 0: a free port the kernel
   * picks) and hands every accepted connection to onConnection. It rejects
   * with the bind error (EADDRINUSE, EACCES, EADDRNOTAVAIL) and reports later
   * failures (EMFILE on accept) through onError; the listener stays open.
   */
  listenTcp(host: string, port: number, onConnection: (conn: TcpStream) => void, onError: (err: Error) => void): Promise<TcpListener>;
  /** bindUdp binds a UDP socket on host:port (port 0: a free port) and hands it every datagram. */
  bindUdp(host: string, port: number, handlers: UdpHandlers): Promise<UdpSocket>;
  /** connectTcp starts a connection to address:port; abort() gives it up (the caller owns the timeout). */
  connectTcp(address: string, port: number): PendingConnect;
  /** connectUdp opens a UDP socket on a free port, connected to address:port (one client session). */
  connectUdp(address: string, port: number, handlers: UdpHandlers): Promise<ConnectedUdp>;
}

export interface SocketAddress {
  readonly address: string;
  readonly port: number;
}

/**
 * TcpStream is one TCP connection: a duplex byte stream (half-close with
 * end(); reading and writing follow Node's stream back-pressure) and its ends.
 */
export interface TcpStream extends Duplex {
  readonly remoteAddress?: string;
  readonly remotePort?: number;
  readonly localAddress?: string;
  readonly localPort?: number;
  /** resetAndDestroy closes with a TCP RST instead of a FIN (the peer sees ECONNRESET). */
  resetAndDestroy(): this;
  /** setKeepAlive turns on TCP keepalive probes (absent in the simulation). */
  setKeepAlive?(enable: boolean, initialDelayMs: number): this;
  /**
   * lendReads, where present (the host's connections to endpoints), is how
   * the stream is read: its bytes come to onChunk in buffers kproxy lends
   * (lent-reads.ts), not as 'data' events, and reading starts at this call.
   * A chunk is valid until its release() (call it when the write passing it
   * on has completed); onChunk returning false pauses the stream until
   * resume(). 'end', 'error' and 'close' are emitted as usual.
   */
  lendReads?(onChunk: LentChunk): void;
}

export interface TcpListener {
  readonly address: SocketAddress;
  /** close stops accepting; connections accepted before stay open. */
  close(): void;
}

export interface UdpHandlers {
  message(data: Buffer, from: SocketAddress): void;
  /** error: a send or receive failed (an ICMP port unreachable on a connected socket, EMFILE...). */
  error(err: Error): void;
}

export interface UdpSocket {
  readonly address: SocketAddress;
  send(data: Buffer, port: number, address: string): void;
  close(): void;
}

export interface ConnectedUdp {
  readonly address: SocketAddress;
  send(data: Buffer): void;
  close(): void;
}

export interface PendingConnect {
  readonly connected: Promise<TcpStream>;
  abort(): void;
}

function udpType(host: string): 'udp4' | 'udp6' {
  return ipFamilyOf(host) === 'IPv6' ? 'udp6' : 'udp4';
}

/** closeOnce closes a dgram socket once (a second close() throws ERR_SOCKET_DGRAM_NOT_RUNNING). */
function closeOnce(sock: dgram.Socket): () => void {
  let closed = false;
  return () => {
    if (closed) return;
    closed = true;
    sock.close();
  };
}

/**
 * hostSockets is the real Sockets. Listeners and connections allow half-open
 * streams (one direction can finish while the other goes on) and disable
 * Nagle's algorithm, so a relayed small request is not held back waiting for
 * an acknowledgement. IPv6 wildcard sockets are IPv6 only: each IP family's
 * proxier binds its own.
 */
export function hostSockets(): Sockets {
  return {
    simulated: false,
    listenTcp(host, port, onConnection, onError) {
      return new Promise((resolve, reject) => {
        const server = net.createServer({ allowHalfOpen: true, noDelay: true });
        const failed = (err: Error) => reject(err);
        server.once('error', failed);
        server.listen({ host, port, backlog: LISTEN_BACKLOG, exclusive: true, ipv6Only: host === '::' }, () => {
          server.off('error', failed);
          // After listening, errors are accept failures (EMFILE): reported, the listener stays.
          server.on('error', onError);
          server.on('connection', (s) => onConnection(s as TcpStream));
          const a = server.address() as net.AddressInfo;
          resolve({ address: { address: a.address, port: a.port }, close: () => server.close() });
        });
      });
    },
    bindUdp(host, port, handlers) {
      return new Promise((resolve, reject) => {
        const sock = dgram.createSocket({ type: udpType(host), ipv6Only: host === '::' });
        const failed = (err: Error) => {
          sock.close();
          reject(err);
        };
        sock.once('error', failed);
        sock.bind({ address: host, port, exclusive: true }, () => {
          sock.off('error', failed);
          sock.on('error', handlers.error);
          sock.on('message', (msg, rinfo) => handlers.message(msg, { address: rinfo.address, port: rinfo.port }));
          const a = sock.address();
          resolve({
            address: { address: a.address, port: a.port },
            send: (data, p, addr) => sock.send(data, p, addr, (err) => err && handlers.error(err)),
            close: closeOnce(sock),
          });
        });
      });
    },
    connectTcp(address, port) {
      // The endpoint side carries responses and downloads: read it into lent buffers (lent-reads.ts),
      // paused until the relay takes it (a server that speaks first must not be read before then).
      const reader = new LentReader();
      const s = net.connect({ host: address, port, allowHalfOpen: true, noDelay: true, onread: reader.onread }) as net.Socket & TcpStream;
      s.pause();
      s.once('close', () => reader.close());
      s.lendReads = (onChunk) => {
        reader.deliver = (chunk, release) => {
          if (onChunk(chunk, release)) return true;
          // Socket.pause() stops the handle's reads when onread is in use; resume() restarts them.
          s.pause();
          return true;
        };
        s.resume();
      };
      const connected = new Promise<TcpStream>((resolve, reject) => {
        s.once('connect', () => {
          s.off('error', reject);
          resolve(s as TcpStream);
        });
        s.once('error', reject);
      });
      return { connected, abort: () => s.destroy() };
    },
    connectUdp(address, port, handlers) {
      return new Promise((resolve, reject) => {
        const sock = dgram.createSocket({ type: udpType(address) });
        const failed = (err: Error) => {
          sock.close();
          reject(err);
        };
        sock.once('error', failed);
        sock.connect(port, address, () => {
          sock.off('error', failed);
          sock.on('error', handlers.error);
          sock.on('message', (msg, rinfo) => handlers.message(msg, { address: rinfo.address, port: rinfo.port }));
          const a = sock.address();
          resolve({
            address: { address: a.address, port: a.port },
            send: (data) => sock.send(data, (err) => err && handlers.error(err)),
            close: closeOnce(sock),
          });
        });
      });
    },
  };
}

import { duplexPair } from 'node:stream';
import { ipFamilyOf } from '../net/ip.ts';
import type { ConnectedUdp, PendingConnect, SocketAddress, Sockets, TcpListener, TcpStream, UdpHandlers, UdpSocket } from './sockets.ts';

/**
 * SimulatedSockets is an in-memory network standing in for the node's
 * sockets: what --dry-run binds (nothing reaches the host) and what the unit
 * tests drive. Listeners and UDP sockets are kept by address and port, a
 * connection to a listener is a pair of in-memory streams, and a datagram
 * goes to the socket bound at its destination (or is lost, as UDP would).
 * Tests add endpoints by listening on their addresses, and clients with
 * connectFrom and bindUdp at a client address.
 */
export class SimulatedSockets implements Sockets {
  readonly simulated = true;
  /** nodeAddress: the source address of connections kproxy opens (connectTcp, connectUdp). */
  readonly nodeAddress: string;
  readonly #tcp = new Map<string, { address: SocketAddress; onConnection: (c: TcpStream) => void }>();
  readonly #udp = new Map<string, { address: SocketAddress; handlers: UdpHandlers }>();
  readonly #used = new Set<number>();
  readonly #blackholes = new Set<string>();
  #nextPort: number;
  /** connectAttempts: every connection kproxy or a test started, in order ("10.244.0.5:8080"). */
  readonly connectAttempts: string[] = [];

  constructor(opts: { nodeAddress?: string; firstEphemeralPort?: number } = {}) {
    this.nodeAddress = opts.nodeAddress ?? '10.0.0.10';
    this.#nextPort = opts.firstEphemeralPort ?? 32768;
  }

  /** listening lists the bound sockets, sorted: what --dry-run shows it would open. */
  listening(): { protocol: 'TCP' | 'UDP'; address: string; port: number }[] {
    const out = [
      ...[...this.#tcp.values()].map((l) => ({ protocol: 'TCP' as const, ...l.address })),
      ...[...this.#udp.values()].filter((u) => !u.address.address.startsWith('ephemeral:')).map((u) => ({ protocol: 'UDP' as const, ...u.address })),
    ];
    return out.sort((a, b) => a.port - b.port || a.protocol.localeCompare(b.protocol) || a.address.localeCompare(b.address));
  }

  /** blackhole makes connections to an address (or "address:port") hang until aborted, like a host that drops SYNs. */
  blackhole(target: string): void {
    this.#blackholes.add(target);
  }

  #ephemeral(): number {
    while (this.#used.has(this.#nextPort)) this.#nextPort++;
    return this.#nextPort++;
  }

  #inUse(map: Map<string, { address: SocketAddress }>, host: string, port: number): boolean {
    const wildcard = ipFamilyOf(host) === 'IPv6' ? '::' : '0.0.0.0';
    for (const { address } of map.values()) {
      if (address.port !== port) continue;
      if (address.address === host || address.address === wildcard || host === wildcard) return true;
    }
    return false;
  }

  #find<T extends { address: SocketAddress }>(map: Map<string, T>, address: string, port: number): T | undefined {
    return map.get(`${address}|${port}`) ?? map.get(`${ipFamilyOf(address) === 'IPv6' ? '::' : '0.0.0.0'}|${port}`);
  }

  listenTcp(host: string, port: number, onConnection: (c: TcpStream) => void, _onError?: (err: Error) => void): Promise<TcpListener> {
    if (port !== 0 && this.#inUse(this.#tcp, host, port)) return Promise.reject(addrError('EADDRINUSE', `listen EADDRINUSE: address already in use ${host}:${port}`));
    const p = port || this.#ephemeral();
    this.#used.add(p);
    const key = `${host}|${p}`;
    const address = { address: host, port: p };
    this.#tcp.set(key, { address, onConnection });
    return Promise.resolve({
      address,
      close: () => {
        this.#tcp.delete(key);
        this.#used.delete(p);
      },
    });
  }

  connectTcp(address: string, port: number): PendingConnect {
    return this.connectFrom(this.nodeAddress, address, port);
  }

  /** connectFrom connects from a given source address (a client in a test). */
  connectFrom(source: string, address: string, port: number): PendingConnect {
    this.connectAttempts.push(`${address}:${port}`);
    let aborted = false;
    let abort: () => void = () => {};
    const connected = new Promise<TcpStream>((resolve, reject) => {
      abort = () => {
        aborted = true;
        reject(addrError('ECONNABORTED', `connect aborted ${address}:${port}`));
      };
      if (this.#blackholes.has(address) || this.#blackholes.has(`${address}:${port}`)) return;
      setImmediate(() => {
        if (aborted) return;
        const listener = this.#find(this.#tcp, address, port);
        if (!listener) return reject(addrError('ECONNREFUSED', `connect ECONNREFUSED ${address}:${port}`));
        const [client, server] = duplexPair({ allowHalfOpen: true });
        const sourcePort = this.#ephemeral();
        const c = decorate(client, server, { address: source, port: sourcePort }, { address, port });
        const s = decorate(server, client, { address, port }, { address: source, port: sourcePort });
        listener.onConnection(s);
        resolve(c);
      });
    });
    return { connected, abort: () => abort() };
  }

  bindUdp(host: string, port: number, handlers: UdpHandlers): Promise<UdpSocket> {
    if (port !== 0 && this.#inUse(this.#udp, host, port)) return Promise.reject(addrError('EADDRINUSE', `bind EADDRINUSE ${host}:${port}`));
    const p = port || this.#ephemeral();
    this.#used.add(p);
    const key = `${host}|${p}`;
    const address = { address: host, port: p };
    this.#udp.set(key, { address, handlers });
    return Promise.resolve({
      address,
      send: (data, toPort, toAddress) => this.#deliver(data, source(address, toAddress, this.nodeAddress), toAddress, toPort),
      close: () => {
        this.#udp.delete(key);
        this.#used.delete(p);
      },
    });
  }

  connectUdp(address: string, port: number, handlers: UdpHandlers): Promise<ConnectedUdp> {
    const p = this.#ephemeral();
    this.#used.add(p);
    const local = { address: this.nodeAddress, port: p };
    const key = `${this.nodeAddress}|${p}`;
    // Only the connected peer's datagrams reach a connected socket.
    this.#udp.set(key, {
      address: local,
      handlers: { message: (d, from) => from.address === address && from.port === port && handlers.message(d, from), error: handlers.error },
    });
    return Promise.resolve({
      address: local,
      send: (data) => this.#deliver(data, local, address, port),
      close: () => {
        this.#udp.delete(key);
        this.#used.delete(p);
      },
    });
  }

  #deliver(data: Buffer, from: SocketAddress, address: string, port: number): void {
    const copy = Buffer.from(data);
    setImmediate(() => this.#find(this.#udp, address, port)?.handlers.message(copy, from));
  }
}

/** source: a wildcard-bound socket answers from the address it was reached at; the simulation uses the node's. */
function source(bound: SocketAddress, _to: string, nodeAddress: string): SocketAddress {
  return bound.address === '0.0.0.0' || bound.address === '::' ? { address: nodeAddress, port: bound.port } : bound;
}

function addrError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

function decorate(stream: import('node:stream').Duplex, peer: import('node:stream').Duplex, local: SocketAddress, remote: SocketAddress): TcpStream {
  return Object.assign(stream, {
    localAddress: local.address,
    localPort: local.port,
    remoteAddress: remote.address,
    remotePort: remote.port,
    resetAndDestroy(this: TcpStream) {
      peer.destroy(addrError('ECONNRESET', 'read ECONNRESET'));
      this.destroy();
      return this;
    },
  }) as TcpStream;
}

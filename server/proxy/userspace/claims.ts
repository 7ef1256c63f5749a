import { errorMessage } from '../../errors.ts';
import type { Sockets } from '../../kernel/sockets.ts';
import type { Logger } from '../../log.ts';
import type { Protocol } from '../service-port.ts';

/** Claim is a port kproxy holds open so no other program takes it (a node port, a local external IP's port). */
interface Claim {
  readonly owner: string;
  close(): void;
}

/** ClaimResult says whether a service port holds a port now, and why not. */
export type ClaimResult = { ok: true } | { ok: false; error: string; conflict: boolean };

function key(host: string, port: number, protocol: Protocol): string {
  return `${host.includes(':') ? `[${host}]` : host}:${port}/${protocol}`;
}

/**
 * PortClaims holds node ports and the ports of external IPs that are this
 * node's addresses, as kube-proxy's userspace claimNodePort did: a listening
 * socket (TCP) or a bound one (UDP) keeps the port from other programs, so
 * the portal rules never steal traffic meant for them. Nothing is relayed on
 * a claim (the portals redirect first); a connection that reaches one anyway
 * is reset at once. A claim belongs to one service port; another asking for
 * the same port is a conflict.
 */
export class PortClaims {
  readonly #sockets: Sockets;
  readonly #log: Logger;
  readonly #held = new Map<string, Claim>();

  constructor(sockets: Sockets, log: Logger) {
    this.#sockets = sockets;
    this.#log = log;
  }

  get size(): number {
    return this.#held.size;
  }

  /** owners lists the service ports holding claims. */
  owners(): string[] {
    return [...new Set([...this.#held.values()].map((c) => c.owner))];
  }

  /** keys lists the claims held by one owner (or all). */
  keys(owner?: string): string[] {
    return [...this.#held].filter(([, c]) => owner === undefined || c.owner === owner).map(([k]) => k);
  }

  /** claim holds host:port for owner (idempotent for the same owner). */
  async claim(host: string, port: number, protocol: Protocol, owner: string): Promise<ClaimResult> {
    const k = key(host, port, protocol);
    const held = this.#held.get(k);
    if (held) return held.owner === owner ? { ok: true } : { ok: false, conflict: true, error: `port conflict on ${k}: held for ${held.owner}` };
    try {
      let close: () => void;
      if (protocol === 'TCP') {
        const l = await this.#sockets.listenTcp(
          host,
          port,
          (c) => {
            c.on('error', () => {});
            c.resetAndDestroy();
          },
          (err) => this.#log.debug('claimed port: accept failed', { port: k, err: errorMessage(err) }),
        );
        close = () => l.close();
      } else {
        const u = await this.#sockets.bindUdp(host, port, { message: () => {}, error: () => {} });
        close = () => u.close();
      }
      // Another claim for the same key may have completed while this one bound.
      if (this.#held.has(k)) {
        close();
        return this.claim(host, port, protocol, owner);
      }
      this.#held.set(k, { owner, close });
      this.#log.debug('claimed local port', { port: k, for: owner });
      return { ok: true };
    } catch (err) {
      return { ok: false, conflict: false, error: `cannot open ${k}: ${errorMessage(err)}` };
    }
  }

  /** releaseExcept closes an owner's claims that are not in keep. */
  releaseExcept(owner: string, keep: ReadonlySet<string>): void {
    for (const [k, c] of this.#held) {
      if (c.owner !== owner || keep.has(k)) continue;
      c.close();
      this.#held.delete(k);
    }
  }

  /** releaseOwner closes every claim of a service port. */
  releaseOwner(owner: string): void {
    this.releaseExcept(owner, new Set());
  }

  closeAll(): void {
    for (const c of this.#held.values()) c.close();
    this.#held.clear();
  }

  static key = key;
}

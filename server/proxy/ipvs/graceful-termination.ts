import type { Clock } from '../../clock.ts';
import { realServerKey, virtualServerKey, type IpvsProtocol, type IpvsRealServer, type IpvsService, type IpvsVirtualServer } from '../../kernel/ipvs-batch.ts';

/**
 * Graceful termination of real servers (kube-proxy's
 * pkg/proxy/ipvs/graceful_termination.go): a real server whose endpoint went
 * away first gets weight 0, so no new connection picks it, and is deleted once
 * its active and inactive connections are gone, or after a timeout. UDP and
 * SCTP real servers go at once: IPVS tracks no useful connection state for
 * them, and expire_nodest_conn=1 drops their entries on the next packet.
 */

/** RS_CHECK_INTERVAL_MS: how often draining real servers are checked (kube-proxy: 1 minute). */
export const RS_CHECK_INTERVAL_MS = 60_000;
/** RS_GRACEFUL_TIMEOUT_MS: a draining real server is deleted after this long whatever its connections. */
export const RS_GRACEFUL_TIMEOUT_MS = 15 * 60_000;

/** gracefulTerminationNeeded is kube-proxy's IsRsGracefulTerminationNeeded. */
export function gracefulTerminationNeeded(protocol: IpvsProtocol): boolean {
  return protocol !== 'UDP' && protocol !== 'SCTP';
}

/** DrainingRealServer is a real server waiting for its connections to end. */
export interface DrainingRealServer {
  readonly vsKey: string;
  readonly vs: Pick<IpvsVirtualServer, 'protocol' | 'address' | 'port'>;
  readonly rs: Pick<IpvsRealServer, 'address' | 'port'>;
  /** since: epoch ms when it got weight 0. */
  readonly since: number;
  /** activeConns/inactiveConns: at the last check (undefined before one). */
  readonly activeConns?: number;
  readonly inactiveConns?: number;
}

/** Deletion is a draining real server the sweep decided to delete, and why. */
export interface Deletion {
  readonly vs: DrainingRealServer['vs'];
  readonly rs: DrainingRealServer['rs'];
  readonly reason: 'drained' | 'timeout';
}

export interface GracefulTerminationOptions {
  clock: Clock;
  checkIntervalMs?: number;
  timeoutMs?: number;
}

/**
 * GracefulTermination keeps the draining real servers between syncs. It does
 * no I/O: the proxier asks due() whether this sync should list connection
 * counts (`ipvsadm -Ln`), hands the listing to sweep(), and writes the
 * deletions it returns into the sync's one ipvsadm batch.
 */
export class GracefulTermination {
  readonly #clock: Clock;
  readonly #interval: number;
  readonly #timeout: number;
  readonly #draining = new Map<string, DrainingRealServer>();
  #lastCheck = -Infinity;

  constructor(opts: GracefulTerminationOptions) {
    this.#clock = opts.clock;
    this.#interval = opts.checkIntervalMs ?? RS_CHECK_INTERVAL_MS;
    this.#timeout = opts.timeoutMs ?? RS_GRACEFUL_TIMEOUT_MS;
  }

  static key(vsKey: string, rsKey: string): string {
    return `${vsKey}/${rsKey}`;
  }

  get size(): number {
    return this.#draining.size;
  }

  has(vsKey: string, rsKey: string): boolean {
    return this.#draining.has(GracefulTermination.key(vsKey, rsKey));
  }

  /** add starts draining a real server now (it has just been given weight 0). */
  add(vs: DrainingRealServer['vs'], rs: DrainingRealServer['rs']): void {
    const vsKey = virtualServerKey(vs);
    const key = GracefulTermination.key(vsKey, realServerKey(rs));
    if (!this.#draining.has(key)) this.#draining.set(key, { vsKey, vs, rs, since: this.#clock.now() });
  }

  /** cancel stops draining (the endpoint came back, or the real server is gone). */
  cancel(vsKey: string, rsKey: string): void {
    this.#draining.delete(GracefulTermination.key(vsKey, rsKey));
  }

  /** dropVirtualServer forgets every draining real server of a deleted virtual server. */
  dropVirtualServer(vsKey: string): void {
    for (const [k, d] of this.#draining) if (d.vsKey === vsKey) this.#draining.delete(k);
  }

  /** due: something is draining and the last check is at least the check interval ago. */
  due(): boolean {
    return this.#draining.size > 0 && this.#clock.now() - this.#lastCheck >= this.#interval;
  }

  /**
   * sweep checks every draining real server against a listing with connection
   * counts: those without connections, or draining longer than the timeout,
   * are returned for deletion and forgotten; those no longer listed are
   * forgotten. If the batch deleting them fails they stay in the kernel with
   * weight 0, unwanted, and the next full sync starts draining them again.
   */
  sweep(listing: ReadonlyMap<string, IpvsService>): Deletion[] {
    const now = this.#clock.now();
    this.#lastCheck = now;
    const out: Deletion[] = [];
    for (const [k, d] of this.#draining) {
      const rs = listing.get(d.vsKey)?.reals.find((r) => r.address === d.rs.address && r.port === d.rs.port);
      if (!rs) {
        this.#draining.delete(k);
        continue;
      }
      const conns = (rs.activeConns ?? 0) + (rs.inactiveConns ?? 0);
      if (conns === 0 || now - d.since >= this.#timeout) {
        out.push({ vs: d.vs, rs: d.rs, reason: conns === 0 ? 'drained' : 'timeout' });
        this.#draining.delete(k);
      } else {
        this.#draining.set(k, { ...d, activeConns: rs.activeConns, inactiveConns: rs.inactiveConns });
      }
    }
    return out;
  }

  /** list returns the draining real servers (for logs and the dashboard). */
  list(): DrainingRealServer[] {
    return [...this.#draining.values()];
  }
}

import type { IpvsCounters } from '../../kernel/ipvs-listing.ts';
import type { IpvsRates } from '../protocol.ts';

/**
 * RateTracker turns IPVS's cumulative counters (`ipvsadm -Ln --stats
 * --exact`: connections, packets and bytes since the object was created) into
 * per-second rates between two kernel reads. ipvsadm's own `--rate` columns
 * are the kernel's 2-second estimator; differences over the dashboard's read
 * interval say what happened since the operator last looked, and cost no
 * third listing. A read runs begin(), rate() per object, then end(); a read
 * that fails half way never calls end(), so the next one compares against the
 * last complete read.
 */
export class RateTracker {
  #prev = new Map<string, IpvsCounters>();
  #prevAt: number | null = null;
  #next = new Map<string, IpvsCounters>();
  #at = 0;

  /** begin starts a read taken at `at` (monotonic ms). */
  begin(at: number): void {
    this.#at = at;
    this.#next = new Map();
  }

  /** rate records an object's counters and returns its rates since the previous read, or null. */
  rate(key: string, c: IpvsCounters): IpvsRates | null {
    this.#next.set(key, c);
    const p = this.#prev.get(key);
    if (!p || this.#prevAt === null) return null;
    const seconds = (this.#at - this.#prevAt) / 1000;
    if (seconds <= 0) return null;
    const conns = c.conns - p.conns;
    const packets = c.inPackets + c.outPackets - (p.inPackets + p.outPackets);
    const bytes = c.inBytes + c.outBytes - (p.inBytes + p.outBytes);
    // Counters that went down belong to an object deleted and created again: no rate this time.
    if (conns < 0 || packets < 0 || bytes < 0) return null;
    return { conns: conns / seconds, packets: packets / seconds, bytes: bytes / seconds };
  }

  /** end makes this read the base of the next one; objects not seen in it are forgotten. */
  end(): void {
    this.#prev = this.#next;
    this.#prevAt = this.#at;
    this.#next = new Map();
  }
}

import type { Clock } from '../clock.ts';
import { errorMessage } from '../errors.ts';
import type { Sysctl } from '../kernel/sysctl.ts';
import type { ConntrackInfo } from './protocol.ts';

export const SYSCTL_CONNTRACK_COUNT = 'net/netfilter/nf_conntrack_count';
export const SYSCTL_CONNTRACK_MAX = 'net/netfilter/nf_conntrack_max';

/**
 * ConntrackCounter reads the conntrack table's fill level: two small files in
 * /proc/sys (no conntrack -L, which would list every entry). Reads are cached
 * for minIntervalMs so any number of dashboards cost one read per interval.
 */
export class ConntrackCounter {
  readonly #sysctl: Sysctl;
  readonly #clock: Clock;
  readonly #minIntervalMs: number;
  #last: ConntrackInfo | null = null;
  #reading: Promise<ConntrackInfo> | null = null;

  constructor(opts: { sysctl: Sysctl; clock: Clock; minIntervalMs?: number }) {
    this.#sysctl = opts.sysctl;
    this.#clock = opts.clock;
    this.#minIntervalMs = opts.minIntervalMs ?? 1000;
  }

  get last(): ConntrackInfo | null {
    return this.#last;
  }

  async read(): Promise<ConntrackInfo> {
    if (this.#last && this.#clock.now() - this.#last.readAt < this.#minIntervalMs) return this.#last;
    this.#reading ??= this.#read().finally(() => (this.#reading = null));
    return this.#reading;
  }

  async #read(): Promise<ConntrackInfo> {
    const at = this.#clock.now();
    const [count, max] = await Promise.allSettled([this.#sysctl.read(SYSCTL_CONNTRACK_COUNT), this.#sysctl.read(SYSCTL_CONNTRACK_MAX)]);
    const num = (r: PromiseSettledResult<string>) => (r.status === 'fulfilled' && /^\d+$/.test(r.value) ? Number(r.value) : null);
    const failed = [count, max].find((r) => r.status === 'rejected') as PromiseRejectedResult | undefined;
    // Without the nf_conntrack module the files do not exist: the overview shows "not available" and why.
    this.#last = { count: num(count), max: num(max), readAt: at, ...(failed ? { error: errorMessage(failed.reason) } : {}) };
    return this.#last;
  }
}

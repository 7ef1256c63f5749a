import type { Clock } from '../clock.ts';
import { errorMessage } from '../errors.ts';
import type { Logger } from '../log.ts';

/**
 * FirstSyncHousekeeping runs a backend's one-off work once its first sync has
 * succeeded: removing what the other proxy modes (kproxy's or kube-proxy's)
 * left on the node. kube-proxy does the same at start (platformCleanup in
 * cmd/kube-proxy/app/server_linux.go); kproxy does it after the first sync, so
 * the old rules keep answering until the new ones are in. Backends run it
 * from Backend.afterSync, which the SyncLoop calls once the sync has been
 * recorded: its time is not the sync's, and readiness does not wait for it.
 * Best effort: a failure is logged and never fails the sync.
 */
export class FirstSyncHousekeeping {
  readonly #work: (() => Promise<unknown>) | undefined;
  readonly #log: Logger;
  readonly #clock: Clock;
  #done = false;

  constructor(work: (() => Promise<unknown>) | undefined, log: Logger, clock: Clock) {
    this.#work = work;
    this.#log = log;
    this.#clock = clock;
  }

  /** afterSuccessfulSync runs the work after the first successful sync only; it returns the milliseconds spent (0 afterwards). */
  async afterSuccessfulSync(): Promise<number> {
    if (this.#done) return 0;
    this.#done = true;
    if (!this.#work) return 0;
    const t = this.#clock.monotonic();
    // What stays behind keeps its rules in the kernel (another mode's DNAT may still catch packets): say so loudly.
    await this.#work().catch((err: unknown) => this.#log.warn("removing other modes' leftovers failed", { err: errorMessage(err) }));
    const ms = this.#clock.monotonic() - t;
    this.#log.info("other modes' leftovers checked", { ms: Math.round(ms) });
    return ms;
  }
}

import type { Logger } from '../log.ts';
import type { Endpoint } from './endpoint.ts';
import type { ServicePort } from './service-port.ts';

/**
 * SkippedServicePorts is a backend's record of the service ports it leaves
 * out, with why ("ns/name:port/PROTO" -> reason). Every successful sync
 * reports it (the dashboard shows it; the daemon turns a new reason into a
 * Warning Event on the Service), and a port's warning is logged once per
 * reason, not at every sync. A port the state no longer has is forgotten.
 *
 * It also holds refusals: a service port whose objects the kernel refused
 * (nftables mode blames the lines of a refused transaction on them) stays
 * out until its Service or endpoints change, so that one Service the kernel
 * will not take does not fail every later sync.
 */
export class SkippedServicePorts {
  readonly #log: Logger;
  readonly #why = new Map<string, string>();
  readonly #refused = new Map<string, { readonly sp: ServicePort; readonly eps: readonly Endpoint[] | undefined; readonly reason: string }>();

  constructor(log: Logger) {
    this.#log = log;
  }

  /** skip leaves a service port out for why, logging message (a warning) when the reason is new for it. */
  skip(id: string, why: string, message: string): void {
    if (this.#why.get(id) !== why) this.#log.warn(message, { servicePort: id, why });
    this.#why.set(id, why);
  }

  /** programmed: the service port is programmed; returns whether it was skipped until now. */
  programmed(id: string): boolean {
    return this.#why.delete(id);
  }

  /** why: the reason a service port is left out, or undefined. */
  why(id: string): string | undefined {
    return this.#why.get(id);
  }

  /** forgetGone drops the ports (and refusals) of service ports the state no longer has. */
  forgetGone(services: ReadonlyMap<string, unknown>): void {
    for (const id of this.#why.keys()) if (!services.has(id)) this.#why.delete(id);
    for (const id of this.#refused.keys()) if (!services.has(id)) this.#refused.delete(id);
  }

  /** snapshot: a copy for a sync's result. */
  snapshot(): ReadonlyMap<string, string> {
    return new Map(this.#why);
  }

  /** refuse records that the kernel refused a service port's objects as built from sp and eps. */
  refuse(id: string, sp: ServicePort, eps: readonly Endpoint[] | undefined, reason: string): void {
    this.#refused.set(id, { sp, eps, reason });
  }

  /**
   * refusal: why the kernel refused this service port, while its Service and
   * endpoints are the ones it refused; a change (or a new Service under the
   * same port) forgets the refusal and gets another try.
   */
  refusal(id: string, sp: ServicePort, eps: readonly Endpoint[] | undefined): string | undefined {
    const r = this.#refused.get(id);
    if (!r) return undefined;
    if (r.sp === sp && r.eps === eps) return r.reason;
    this.#refused.delete(id);
    return undefined;
  }
}

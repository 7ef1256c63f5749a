import { RuleBuildError } from '../errors.ts';
import type { Endpoint } from './endpoint.ts';
import type { ServicePort } from './service-port.ts';

/** ServicePortBuild is one service port's kernel objects as a sync built them (a mode's T), or why they could not be built. */
export interface ServicePortBuild<T> {
  readonly sp: ServicePort;
  readonly eps: readonly Endpoint[] | undefined;
  /** objects: null when the builder refused the port (error says why). */
  readonly objects: T | null;
  readonly error: string | null;
}

/**
 * ServicePortCache keeps the last successful sync's build of every service
 * port, under the build context it was made in, so a sync rebuilds only the
 * ports whose Service or endpoints changed: the trackers hand out the same
 * ServicePort and endpoint list objects while nothing changed, so identity is
 * the test. A sync that fails leaves the cache as it was, which is what the
 * kernel still holds.
 */
export class ServicePortCache<T> {
  #builds: ReadonlyMap<string, ServicePortBuild<T>> = new Map();
  #contextKey: string | null = null;

  /** builds: the last successful sync's builds by service port id. */
  get builds(): ReadonlyMap<string, ServicePortBuild<T>> {
    return this.#builds;
  }

  get(id: string): ServicePortBuild<T> | undefined {
    return this.#builds.get(id);
  }

  /** sameContext: the last builds were made in the build context of this key (node addresses, masquerade mark, ...). */
  sameContext(contextKey: string): boolean {
    return this.#contextKey === contextKey;
  }

  /** unchanged returns the last build of a service port when the context, its Service and its endpoints are the same. */
  unchanged(id: string, sp: ServicePort, eps: readonly Endpoint[] | undefined, contextKey: string): ServicePortBuild<T> | undefined {
    if (!this.sameContext(contextKey)) return undefined;
    const prev = this.#builds.get(id);
    return prev && prev.sp === sp && prev.eps === eps ? prev : undefined;
  }

  /** commit makes a successful sync's builds the ones the kernel holds. */
  commit(builds: ReadonlyMap<string, ServicePortBuild<T>>, contextKey: string): void {
    this.#builds = builds;
    this.#contextKey = contextKey;
  }

  /** clear forgets every build (after a cleanup, the kernel holds none of them). */
  clear(): void {
    this.#builds = new Map();
    this.#contextKey = null;
  }
}

/**
 * buildServicePort runs a mode's pure builder for one service port; a
 * RuleBuildError (a value that cannot be written safely) becomes the build's
 * error, so that port is skipped and every other is programmed. Any other
 * error is a bug and fails the sync.
 */
export function buildServicePort<T>(sp: ServicePort, eps: readonly Endpoint[] | undefined, build: () => T): ServicePortBuild<T> {
  try {
    return { sp, eps, objects: build(), error: null };
  } catch (err) {
    if (!(err instanceof RuleBuildError)) throw err;
    return { sp, eps, objects: null, error: err.message };
  }
}

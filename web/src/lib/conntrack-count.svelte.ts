import { ApiError, type Api } from './api.ts';
import type { ServiceConntrack } from './protocol.ts';

/** ConntrackCountError is why a count was not answered; rateLimited: the node refused it for now (429). */
export interface ConntrackCountError {
  readonly code: string;
  readonly message: string;
  readonly rateLimited: boolean;
}

/** conntrackPath is the API path of a service's conntrack counts ("ns/name" -> services/ns/name/conntrack). */
export function conntrackPath(serviceKey: string): string {
  const slash = serviceKey.indexOf('/');
  const ns = serviceKey.slice(0, slash);
  const name = serviceKey.slice(slash + 1);
  return `services/${encodeURIComponent(ns)}/${encodeURIComponent(name)}/conntrack`;
}

/**
 * ConntrackCount asks the node, on request only, how many conntrack entries
 * each frontend of one service has. The server lists the kernel table for it
 * (rate-limited there), so the page never polls: one click, one request. A
 * failed request keeps the last answer beside the error.
 */
export class ConntrackCount {
  counting = $state(false);
  result = $state.raw<ServiceConntrack | null>(null);
  error = $state.raw<ConntrackCountError | null>(null);
  readonly serviceKey: string;
  readonly #api: Api;

  constructor(api: Api, serviceKey: string) {
    this.#api = api;
    this.serviceKey = serviceKey;
  }

  async count(): Promise<void> {
    if (this.counting) return;
    this.counting = true;
    this.error = null;
    try {
      this.result = await this.#api.get<ServiceConntrack>(conntrackPath(this.serviceKey));
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError(0, 'UNKNOWN', (err as Error).message);
      this.error = { code: e.code, message: e.message, rateLimited: e.status === 429 };
    } finally {
      this.counting = false;
    }
  }
}

import type { Clock } from '../../clock.ts';

/** Random returns a number in [0, 1); injected so tests choose the shuffle. */
export type Random = () => number;

interface Affinity {
  endpoint: string;
  lastUsed: number;
}

/**
 * RoundRobin picks endpoints for one proxy socket the way kube-proxy's
 * userspace LoadBalancerRR did (pkg/proxy/userspace/roundrobin.go): the
 * endpoints in a shuffled order, each new connection takes the next one; with
 * ClientIP affinity a client keeps its endpoint while it comes back within
 * the timeout (whole seconds since its last use, as upstream), and a failed
 * connect resets it (the retry takes the next endpoint and pins the client
 * there). A new endpoint list is shuffled again and the order restarts; the
 * clients pinned to endpoints that left are forgotten.
 */
export class RoundRobin {
  readonly #clock: Clock;
  readonly #random: Random;
  #endpoints: readonly string[] = [];
  #index = 0;
  #affinitySeconds = 0;
  readonly #affinity = new Map<string, Affinity>();

  constructor(opts: { clock: Clock; random?: Random }) {
    this.#clock = opts.clock;
    this.#random = opts.random ?? Math.random;
  }

  /** endpoints: the current rotation ("ip:port"), in the order new connections get them. */
  get endpoints(): readonly string[] {
    return this.#endpoints;
  }

  /** affinityClients: clients pinned to an endpoint (expired ones are dropped by sweep()). */
  get affinityClients(): number {
    return this.#affinity.size;
  }

  /**
   * setAffinity sets ClientIP affinity (0: none). Turning it off or changing
   * the timeout forgets the pinned clients, as a changed Service did upstream.
   */
  setAffinity(seconds: number): void {
    if (seconds === this.#affinitySeconds) return;
    this.#affinitySeconds = seconds;
    this.#affinity.clear();
  }

  /**
   * setEndpoints replaces the rotation. The same set in any order changes
   * nothing (the rotation goes on); another set is shuffled, the index starts
   * over, and clients pinned to endpoints no longer in it are forgotten.
   */
  setEndpoints(keys: readonly string[]): void {
    if (sameSet(keys, this.#endpoints)) return;
    const next = new Set(keys);
    for (const [client, a] of this.#affinity) if (!next.has(a.endpoint)) this.#affinity.delete(client);
    this.#endpoints = shuffle([...keys].sort(), this.#random);
    this.#index = 0;
  }

  /**
   * next returns the endpoint for a new connection from clientIP, or null when
   * there is none. resetAffinity (a retry after a failed connect) skips the
   * client's pinned endpoint and pins it to the next one.
   */
  next(clientIP: string, resetAffinity = false): string | null {
    const n = this.#endpoints.length;
    if (n === 0) return null;
    const now = this.#clock.monotonic();
    const sticky = this.#affinitySeconds > 0;
    if (sticky && !resetAffinity) {
      const a = this.#affinity.get(clientIP);
      if (a && Math.floor((now - a.lastUsed) / 1000) < this.#affinitySeconds) {
        a.lastUsed = now;
        return a.endpoint;
      }
    }
    const endpoint = this.#endpoints[this.#index % n]!;
    this.#index = (this.#index + 1) % n;
    if (sticky) this.#affinity.set(clientIP, { endpoint, lastUsed: now });
    return endpoint;
  }

  /** sweep forgets clients whose affinity expired (upstream's CleanupStaleStickySessions, once per sync). */
  sweep(): void {
    if (this.#affinitySeconds === 0) return;
    const now = this.#clock.monotonic();
    for (const [client, a] of this.#affinity) if (Math.floor((now - a.lastUsed) / 1000) >= this.#affinitySeconds) this.#affinity.delete(client);
  }
}

function sameSet(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false;
  const s = new Set(b);
  return a.every((k) => s.has(k));
}

/** shuffle is Fisher-Yates over a copy (upstream shuffles so every node does not start on the same endpoint). */
function shuffle(keys: string[], random: Random): string[] {
  for (let i = keys.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [keys[i], keys[j]] = [keys[j]!, keys[i]!];
  }
  return keys;
}

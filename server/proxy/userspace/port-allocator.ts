import type { PortRange } from '../../config/port-range.ts';
import type { Random } from './balancer.ts';

/**
 * PortAllocator hands out the node ports proxy sockets listen on, as kube-proxy's
 * userspace port_allocator.go did: without a range every socket asks the kernel
 * for a free port (port 0); with `portRange` a random free port of the range,
 * else the next free one after it. A port stays taken until released, also one
 * that could not be bound because another program holds it (it is not tried
 * again for every socket).
 */
export class PortAllocator {
  readonly range: PortRange | null;
  readonly #random: Random;
  readonly #used = new Set<number>();

  constructor(range: PortRange | null, random: Random = Math.random) {
    this.range = range;
    this.#random = random;
  }

  /** inUse: ports of the range taken now. */
  get inUse(): number {
    return this.#used.size;
  }

  /** allocate returns a port to bind: 0 without a range, null when the range is exhausted. */
  allocate(): number | null {
    const r = this.range;
    if (!r) return 0;
    if (this.#used.size >= r.size) return null;
    const start = Math.floor(this.#random() * r.size);
    for (let k = 0; k < r.size; k++) {
      const port = r.base + ((start + k) % r.size);
      if (!this.#used.has(port)) {
        this.#used.add(port);
        return port;
      }
    }
    return null;
  }

  /** release gives a port back (a port outside the range, e.g. one the kernel chose, is ignored). */
  release(port: number): void {
    this.#used.delete(port);
  }
}

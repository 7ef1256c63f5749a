/**
 * Lent reads: how kproxy reads the connections it opens to endpoints (the
 * direction that carries responses and downloads) without a fresh allocation
 * and a stream event per read.
 *
 * By default Node allocates a 64 KiB buffer for every read of a socket,
 * shrinks it to what was read and pushes it through the stream machinery.
 * For a relay that passes each chunk straight to another socket, that is
 * most of its cost: a bulk download through the userspace mode ran at 0.35
 * of the kernel's DNAT path with it. Node's `onread` option reads into
 * buffers the caller supplies instead, and this module decides which:
 *
 * - **small reads** land in one buffer shared by every connection
 *   (SHARED_BYTES) and are copied out at once into a buffer of their own
 *   size. The copy happens inside the read callback, before any other
 *   socket can read, so sharing is safe; an idle connection holds no buffer
 *   of its own (10,000 idle connections cost nothing here);
 * - **a read that filled the shared buffer** means a stream is flowing: the
 *   connection's next reads go into a LARGE_BYTES buffer of its own, lent to
 *   the consumer without a copy. The consumer releases it when the write
 *   that passes it on has completed (the kernel took the bytes, or the write
 *   failed), and it goes back to a small free list (KEEP_LARGE buffers) for
 *   the next read of any connection. A read of SHARED_BYTES or less goes back
 *   to the shared buffer.
 *
 * A lent buffer must not be touched after release(): release() is idempotent
 * and a buffer that is never released is only left to the garbage collector
 * (it is never handed out twice).
 */

/** SHARED_BYTES: the shared buffer small reads land in (a read that fills it switches the connection to its own). */
export const SHARED_BYTES = 16 * 1024;
/** LARGE_BYTES: a flowing connection's read size (256 KiB reads measured ~5% faster than 64 KiB, no faster at 1 MiB). */
export const LARGE_BYTES = 256 * 1024;
/** KEEP_LARGE: free buffers kept for reuse (4 MiB); more in flight at once are left to the collector when released. */
export const KEEP_LARGE = 16;

/** LentChunk receives one read: chunk is valid until release(); returning false asks for the stream to pause. */
export type LentChunk = (chunk: Buffer, release: () => void) => boolean;

const shared = Buffer.allocUnsafeSlow(SHARED_BYTES);
const free: Buffer[] = [];

/** poolStats is for tests: the free list's length. */
export function poolStats(): { free: number } {
  return { free: free.length };
}

function takeLarge(): Buffer {
  return free.pop() ?? Buffer.allocUnsafeSlow(LARGE_BYTES);
}

function giveBack(buf: Buffer): void {
  if (free.length < KEEP_LARGE) free.push(buf);
}

const noRelease = () => {};

/**
 * LentReader is one connection's side of it: `onread` is the option to give
 * net.connect, `deliver` the consumer (set before reading starts), `close()`
 * returns the buffer the connection holds for its next read.
 */
export class LentReader {
  /** next: the buffer the next read lands in (the shared one, or this connection's own). */
  #next: Buffer = shared;
  /** deliver: the consumer; reading must not start before it is set. */
  deliver: LentChunk | null = null;

  readonly onread = {
    buffer: (): Buffer => this.#next,
    callback: (n: number, buf: Buffer): boolean => this.#read(n, buf),
  };

  #read(n: number, buf: Buffer): boolean {
    const deliver = this.deliver;
    if (buf === shared) {
      // Copied out before anything else can read into the shared buffer.
      const own = Buffer.allocUnsafe(n);
      shared.copy(own, 0, 0, n);
      this.#next = n === SHARED_BYTES ? takeLarge() : shared;
      return deliver ? deliver(own, noRelease) : true;
    }
    // This connection's own buffer: lent as it is; the next read gets another one (or the shared one).
    this.#next = n > SHARED_BYTES ? takeLarge() : shared;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      giveBack(buf);
    };
    return deliver ? deliver(buf.subarray(0, n), release) : (release(), true);
  }

  /** close gives back the buffer held for the next read (the connection will read no more). */
  close(): void {
    const next = this.#next;
    this.#next = shared;
    if (next !== shared) giveBack(next);
  }
}

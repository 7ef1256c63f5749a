import { createHash } from 'node:crypto';

/**
 * bulk-data is the byte stream of the kernel tier's bulk transfers: the
 * backends' bulk port sends `bytes` of it, and a test checks what arrived
 * against bulkDigest (the same bytes, hashed here) instead of holding them.
 */
export const BULK_BLOCK: Buffer = (() => {
  const b = Buffer.alloc(64 * 1024);
  // Not a repeating short pattern: a relay that dropped or duplicated a block would change the digest.
  let x = 0x9e3779b9;
  for (let i = 0; i < b.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    b[i] = x & 0xff;
  }
  return b;
})();

/** bulkChunk is the stream's bytes from `offset`, at most `max` of them. */
export function bulkChunk(offset: number, max: number): Buffer {
  const at = offset % BULK_BLOCK.length;
  return BULK_BLOCK.subarray(at, Math.min(BULK_BLOCK.length, at + max));
}

/** bulkDigest is the sha256 of the stream's first `bytes` bytes. */
export function bulkDigest(bytes: number): string {
  const h = createHash('sha256');
  for (let off = 0; off < bytes;) {
    const c = bulkChunk(off, bytes - off);
    h.update(c);
    off += c.length;
  }
  return h.digest('hex');
}

import { describe, expect, it } from 'vitest';
import { KEEP_LARGE, LARGE_BYTES, LentReader, poolStats, SHARED_BYTES } from './lent-reads.ts';

/** read plays the kernel and Node: fills the reader's next buffer with n bytes of `byte` and calls back. */
function read(r: LentReader, n: number, byte: number): void {
  const buf = r.onread.buffer();
  expect(n).toBeLessThanOrEqual(buf.length);
  buf.fill(byte, 0, n);
  r.onread.callback(n, buf);
}

interface Got {
  chunk: Buffer;
  release: () => void;
}

function reader(): { r: LentReader; got: Got[] } {
  const r = new LentReader();
  const got: Got[] = [];
  r.deliver = (chunk, release) => {
    got.push({ chunk, release });
    return true;
  };
  return { r, got };
}

describe('LentReader', () => {
  it('copies a small read out of the shared buffer, so the next read of any connection cannot overwrite it', () => {
    const a = reader();
    const b = reader();
    read(a.r, 100, 0x61);
    // b's read lands in the same shared buffer.
    expect(b.r.onread.buffer()).toBe(a.r.onread.buffer());
    read(b.r, 100, 0x62);
    expect(a.got[0]!.chunk.toString()).toBe('a'.repeat(100));
    expect(b.got[0]!.chunk.toString()).toBe('b'.repeat(100));
  });

  it('moves a connection whose read filled the shared buffer to buffers of its own, lent without a copy', () => {
    const { r, got } = reader();
    read(r, SHARED_BYTES, 0x61);
    const own = r.onread.buffer();
    expect(own.length).toBe(LARGE_BYTES);
    read(r, LARGE_BYTES, 0x62);
    // Lent: the chunk is the read buffer's own memory.
    expect(got[1]!.chunk.buffer).toBe(own.buffer);
    expect(got[1]!.chunk.length).toBe(LARGE_BYTES);
    // The next read goes into another buffer: the lent one is still the consumer's.
    expect(r.onread.buffer()).not.toBe(own);
    got[1]!.release();
    r.close();
  });

  it('goes back to the shared buffer after a read that would have fitted in it', () => {
    const { r } = reader();
    read(r, SHARED_BYTES, 0x61);
    read(r, SHARED_BYTES, 0x62);
    expect(r.onread.buffer().length).toBe(SHARED_BYTES);
  });

  it('never hands a lent buffer out again before its release, and takes a released one only once however often it is released', () => {
    const { r, got } = reader();
    read(r, SHARED_BYTES, 0x61);
    const lent = new Set<ArrayBufferLike>();
    for (let i = 0; i < 8; i++) {
      const next = r.onread.buffer();
      expect(lent.has(next.buffer)).toBe(false);
      read(r, LARGE_BYTES, 0x30 + i);
      lent.add(got.at(-1)!.chunk.buffer);
    }
    // Each chunk still holds what was read into it: none was reused while lent.
    for (let i = 1; i <= 8; i++) expect(got[i]!.chunk[LARGE_BYTES - 1]).toBe(0x30 + i - 1);
    const before = poolStats().free;
    got[1]!.release();
    got[1]!.release();
    expect(poolStats().free).toBe(before + 1);
    for (const g of got.slice(2)) g.release();
    r.close();
    expect(poolStats().free).toBeLessThanOrEqual(KEEP_LARGE);
  });

  it('keeps at most KEEP_LARGE free buffers', () => {
    const readers = Array.from({ length: KEEP_LARGE + 8 }, () => reader());
    for (const { r } of readers) read(r, SHARED_BYTES, 0x61);
    for (const { r } of readers) read(r, LARGE_BYTES, 0x62);
    for (const { got } of readers) got[1]!.release();
    for (const { r } of readers) r.close();
    expect(poolStats().free).toBe(KEEP_LARGE);
  });
});

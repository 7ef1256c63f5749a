import { describe, expect, it } from 'vitest';
import { textPieces } from './text-pieces.ts';

describe('textPieces', () => {
  it('cuts a text into pieces of at most the size, whole again when joined', () => {
    expect([...textPieces('abcdefg', 3)]).toEqual(['abc', 'def', 'g']);
    expect([...textPieces('', 3)]).toEqual([]);
    expect([...textPieces('abc', 10)]).toEqual(['abc']);
  });

  it('never cuts between the two halves of a surrogate pair: each piece encodes to the same bytes as its part of the text', () => {
    const text = `ab😀c😀😀d${'é'.repeat(5)}😀`;
    for (const size of [1, 2, 3, 4, 5, 7]) {
      const pieces = [...textPieces(text, size)];
      expect(pieces.join('')).toBe(text);
      expect(Buffer.concat(pieces.map((p) => Buffer.from(p, 'utf8')))).toEqual(Buffer.from(text, 'utf8'));
      for (const p of pieces) expect(p.length).toBeLessThanOrEqual(Math.max(size, 2));
    }
  });
});

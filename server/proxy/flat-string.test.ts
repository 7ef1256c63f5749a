import { describe, expect, it } from 'vitest';
import { flatString } from './flat-string.ts';

describe('flatString', () => {
  it('returns the same text', () => {
    const parts = ['10.64.0.10', ':', String(8080)];
    const s = parts[0] + parts[1] + parts[2];
    expect(flatString(s)).toBe('10.64.0.10:8080');
    expect(flatString('')).toBe('');
  });
});

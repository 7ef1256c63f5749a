import { describe, expect, it } from 'vitest';
import { masqueradeMark } from './masquerade-mark.ts';

describe('masqueradeMark', () => {
  it('renders the masquerade mark like Go "%#08x"', () => {
    expect(masqueradeMark(14)).toBe('0x00004000');
    expect(masqueradeMark(0)).toBe('0x00000001');
    expect(masqueradeMark(31)).toBe('0x80000000');
    expect(() => masqueradeMark(32)).toThrow(/0\.\.31/);
  });
});

import { describe, expect, it } from 'vitest';
import { execFile } from './exec.ts';

describe('execFile', () => {
  it('feeds a long input whole, in pieces, without splitting a character', async () => {
    // Over three pieces of 2^20 characters, with a surrogate pair across each boundary.
    const piece = 'x'.repeat((1 << 20) - 1);
    const input = `${piece}😀${piece}é😀${piece}\n`;
    const res = await execFile('cat', []);
    expect(res.stdout).toBe('');
    const long = await execFile('cat', [], { stdin: input });
    expect(long.code).toBe(0);
    expect(long.stdout).toBe(input);
  });

  it('ends a long input quietly when the process stops reading early', async () => {
    const res = await execFile('head', ['-c', '10'], { stdin: 'y'.repeat(5 << 20) });
    expect(res.code).toBe(0);
    expect(res.stdout).toBe('yyyyyyyyyy');
  });
});

import { readdirSync } from 'node:fs';
import { getPriority, tmpdir } from 'node:os';
import { describe, expect, it } from 'vitest';
import { BACKGROUND_NICE, execFile } from './exec.ts';

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

  it('hands a long input to the process as an unlinked file, and a short one through a pipe', async () => {
    // What the process's stdin is, then the input as the process read it.
    const script = 'readlink /proc/self/fd/0; cat';
    const long = `${'é'.repeat(3 << 20)}😀${'z'.repeat(2 << 20)}\n`;
    const fromFile = await execFile('sh', ['-c', script], { stdin: long });
    const [what, ...rest] = fromFile.stdout.split('\n');
    expect(what).toMatch(new RegExp(`^${tmpdir()}/kproxy-stdin-${process.pid}-\\d+ \\(deleted\\)$`));
    expect(rest.join('\n')).toBe(long);
    expect(readdirSync(tmpdir()).filter((f) => f.startsWith(`kproxy-stdin-${process.pid}-`))).toEqual([]);
    const short = await execFile('sh', ['-c', script], { stdin: 'short\n' });
    expect(short.stdout).toMatch(/^socket:\[\d+\]\nshort\n$/); // Node.js pipes are socket pairs
  });

  it('falls back to a pipe when the temporary directory cannot take the file', async () => {
    const saved = process.env.TMPDIR;
    process.env.TMPDIR = '/nonexistent-kproxy-tmp';
    try {
      const long = `${'y'.repeat(5 << 20)}\n`;
      const res = await execFile('sh', ['-c', 'readlink /proc/self/fd/0; cat'], { stdin: long });
      expect(res.stdout).toMatch(/^socket:\[\d+\]\n/);
      expect(res.stdout.slice(res.stdout.indexOf('\n') + 1)).toBe(long);
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
    }
  });

  it('collects output through an unlinked file when asked (stdoutFile), whole and undamaged, and through a pipe otherwise', async () => {
    // What the process's stdout is, then 6 MB of text with multi-byte characters.
    const script = `readlink /proc/self/fd/1; yes 'é😀 rule' | head -c 6000000`;
    const fromFile = await execFile('sh', ['-c', script], { stdoutFile: true });
    const [what, ...rest] = fromFile.stdout.split('\n');
    expect(what).toMatch(new RegExp(`^${tmpdir()}/kproxy-stdout-${process.pid}-\\d+ \\(deleted\\)$`));
    const body = rest.join('\n');
    expect(Buffer.byteLength(body)).toBe(6_000_000);
    expect(body.startsWith('é😀 rule\né😀 rule\n')).toBe(true);
    expect(readdirSync(tmpdir()).filter((f) => f.startsWith(`kproxy-stdout-${process.pid}-`))).toEqual([]);
    const piped = await execFile('sh', ['-c', 'readlink /proc/self/fd/1']);
    expect(piped.stdout).toMatch(/^socket:\[\d+\]\n$/);
  });

  it('refuses output past maxOutputBytes from a file too, and falls back to a pipe without a temporary directory', async () => {
    await expect(execFile('sh', ['-c', 'head -c 2000000 /dev/zero'], { stdoutFile: true, maxOutputBytes: 1_000_000 })).rejects.toThrow(/more than 1000000 bytes/);
    const saved = process.env.TMPDIR;
    process.env.TMPDIR = '/nonexistent-kproxy-tmp';
    try {
      const res = await execFile('sh', ['-c', 'readlink /proc/self/fd/1; echo ok'], { stdoutFile: true });
      expect(res.stdout).toMatch(/^socket:\[\d+\]\nok\n$/);
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
    }
  });

  it('ends a long input quietly when the process stops reading early, through a pipe and from a file', async () => {
    // 3 Mi characters go through the pipe in pieces, 5 Mi through a file.
    for (const n of [3 << 20, 5 << 20]) {
      const res = await execFile('head', ['-c', '10'], { stdin: 'y'.repeat(n) });
      expect(res.code).toBe(0);
      expect(res.stdout).toBe('yyyyyyyyyy');
    }
  });

  it('runs a background process at a lower CPU priority, and others at its own', async () => {
    // The shell waits, so kproxy has set the priority by the time nice(1) reports the one it inherited.
    const background = await execFile('sh', ['-c', 'sleep 0.3; nice'], { background: true });
    expect(background.stdout.trim()).toBe(String(BACKGROUND_NICE));
    const plain = await execFile('sh', ['-c', 'sleep 0.3; nice']);
    expect(plain.stdout.trim()).toBe(String(getPriority()));
    expect(BACKGROUND_NICE).toBeGreaterThan(getPriority());
  });
});

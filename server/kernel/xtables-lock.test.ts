import { mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { describeHolder, deviceText, lockHolder, waitingForLock, watchLockWait, xtablesLockPath } from './xtables-lock.ts';

/** A made-up /proc: one process blocked in flock() on fd 3 (the lock file), one running, and /proc/locks. */
let root: string;
let proc: string;
let lockFile: string;

function processEntry(pid: number, syscall: string, fds: Record<string, string>, extra: Record<string, string> = {}): void {
  mkdirSync(join(proc, String(pid), 'fd'), { recursive: true });
  writeFileSync(join(proc, String(pid), 'syscall'), syscall);
  for (const [name, text] of Object.entries(extra)) writeFileSync(join(proc, String(pid), name), text);
  for (const [fd, target] of Object.entries(fds)) symlinkSync(target, join(proc, String(pid), 'fd', fd));
}

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'kproxy-xtables-lock-'));
  proc = join(root, 'proc');
  lockFile = join(root, 'xtables.lock');
  writeFileSync(lockFile, '');
  // x86-64: flock is system call 73; its first argument is the file descriptor.
  processEntry(100, '73 0x3 0x2 0x0 0x1b6 0x7ffd 0x0 0x7ffd 0x7fb7\n', { '3': lockFile, '4': '/dev/null' }, { wchan: 'locks_lock_inode_wait' });
  processEntry(101, 'running\n', { '3': lockFile });
  processEntry(102, '73 0x4 0x2 0x0 0x0 0x0 0x0 0x0 0x0\n', { '3': lockFile, '4': '/dev/null' });
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

describe('waitingForLock', () => {
  it('finds a process blocked in flock() on the lock file, and no other', async () => {
    expect(await waitingForLock(100, lockFile, { proc, arch: 'x64' })).toBe(true);
    expect(await waitingForLock(101, lockFile, { proc, arch: 'x64' })).toBe(false);
    // flock() on another file (fd 4).
    expect(await waitingForLock(102, lockFile, { proc, arch: 'x64' })).toBe(false);
    // On arm64 flock is 32: 73 is something else.
    expect(await waitingForLock(100, lockFile, { proc, arch: 'arm64' })).toBe(false);
    // Gone.
    expect(await waitingForLock(999, lockFile, { proc, arch: 'x64' })).toBe(false);
  });

  it("uses the kernel's wait channel where it does not know the architecture's flock number", async () => {
    expect(await waitingForLock(100, lockFile, { proc, arch: 'mips' })).toBe(true);
    expect(await waitingForLock(101, lockFile, { proc, arch: 'mips' })).toBe(false);
  });
});

describe('lockHolder', () => {
  it('names the process /proc/locks shows holding the lock file, not a waiter', async () => {
    const st = statSync(lockFile);
    const here = deviceText(Number(st.dev), Number(st.ino));
    writeFileSync(
      join(proc, 'locks'),
      [
        `1: POSIX  ADVISORY  WRITE 55 ${here} 0 EOF`,
        `2: FLOCK  ADVISORY  WRITE 77 00:19:123 0 EOF`,
        `3: FLOCK  ADVISORY  WRITE 88 ${here} 0 EOF`,
        `3: -> FLOCK  ADVISORY  WRITE 100 ${here} 0 EOF`,
        '',
      ].join('\n'),
    );
    mkdirSync(join(proc, '88'));
    writeFileSync(join(proc, '88', 'comm'), 'firewalld\n');
    const h = await lockHolder(lockFile, { proc });
    expect(h).toEqual({ pid: 88, command: 'firewalld' });
    expect(describeHolder(h)).toBe('held by pid 88 (firewalld)');
  });

  it('says when the holder cannot be seen', async () => {
    writeFileSync(join(proc, 'locks'), '');
    expect(await lockHolder(lockFile, { proc })).toBeNull();
    expect(describeHolder(null)).toBe('held by a process kproxy cannot see (another PID namespace, e.g. the host or another container)');
  });

  it("prints a device as /proc/locks does: the kernel's major and minor in hex", () => {
    // glibc's dev_t for 254:0 and for 0:300 (minor bits above 8 live from bit 20).
    expect(deviceText(0xfe00, 12)).toBe('fe:00:12');
    expect(deviceText(0x2c + (0x1 << 20), 5)).toBe('00:12c:5');
  });
});

describe('watchLockWait', () => {
  it('reports a wait once, with the holder, and stops looking', async () => {
    let looks = 0;
    const seen: unknown[] = [];
    const w = watchLockWait(7, (h) => seen.push(h), {
      waiting: async () => ++looks >= 3,
      holder: async () => ({ pid: 9, command: 'iptables' }),
      firstCheckMs: 1,
      everyMs: 1,
    });
    await new Promise((r) => setTimeout(r, 60));
    w.stop();
    expect(seen).toEqual([{ pid: 9, command: 'iptables' }]);
    expect(looks).toBe(3);
    expect(w.waited).toBe(true);
  });

  it('reports nothing once stopped', async () => {
    const seen: unknown[] = [];
    const w = watchLockWait(7, (h) => seen.push(h), { waiting: async () => true, holder: async () => null, firstCheckMs: 20 });
    w.stop();
    await new Promise((r) => setTimeout(r, 40));
    expect(seen).toEqual([]);
    expect(w.waited).toBe(false);
  });
});

describe('xtablesLockPath', () => {
  it('is /run/xtables.lock unless XTABLES_LOCKFILE names another, as in iptables', () => {
    expect(xtablesLockPath({})).toBe('/run/xtables.lock');
    expect(xtablesLockPath({ XTABLES_LOCKFILE: '/tmp/other.lock' })).toBe('/tmp/other.lock');
    expect(xtablesLockPath({ XTABLES_LOCKFILE: '' })).toBe('/run/xtables.lock');
  });
});

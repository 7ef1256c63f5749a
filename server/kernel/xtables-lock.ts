import { readdir, readFile, readlink, realpath, stat } from 'node:fs/promises';

/**
 * The xtables lock: /run/xtables.lock (XTABLES_LOCKFILE overrides it, as in
 * iptables itself), a file legacy iptables flock()s around every command and
 * restore, so that two programs never replace the same table at once. It is
 * per mount namespace, not per network namespace: a program holding it on the
 * node delays kproxy's legacy iptables in every namespace. iptables-nft takes
 * no such lock (nf_tables transactions are atomic in the kernel).
 *
 * kproxy passes kube-proxy's wait flags (`-w 5 -W 100000`: wait up to 5 s),
 * and while a restore runs it looks whether the process is blocked on the
 * lock (its current system call, in /proc), so the log says so while it
 * waits instead of only when the wait ran out.
 */

/** XTABLES_LOCK_PATH: the lock file of iptables 1.6 and later. */
export const XTABLES_LOCK_PATH = '/run/xtables.lock';

/** xtablesLockPath: the lock file iptables uses in this environment. */
export function xtablesLockPath(env: NodeJS.ProcessEnv = process.env): string {
  return env.XTABLES_LOCKFILE || XTABLES_LOCK_PATH;
}

/** FLOCK_SYSCALL: flock(2)'s number per architecture (the first field of /proc/PID/syscall). */
const FLOCK_SYSCALL: Readonly<Record<string, number>> = { x64: 73, arm64: 32, riscv64: 32, loong64: 32, ia32: 143, arm: 143, ppc64: 143, s390x: 143 };

/** LockHolder: who holds the lock, as far as /proc/locks shows (a process outside kproxy's PID namespace shows no PID). */
export interface LockHolder {
  readonly pid: number | null;
  readonly command: string | null;
}

export interface LockProbeOptions {
  /** proc: where procfs is mounted (tests: a made-up tree). */
  proc?: string;
  /** arch: process.arch, for the system call number. */
  arch?: string;
}

/**
 * waitingForLock says whether process pid is blocked in flock() on the lock
 * file at lockPath: /proc/PID/syscall names flock on a file descriptor that
 * is the lock file (where the architecture's number is unknown, /proc/PID/wchan
 * naming the kernel's lock wait stands for it). Best effort: a process that
 * is gone or cannot be read is not waiting.
 */
export async function waitingForLock(pid: number, lockPath: string, opts: LockProbeOptions = {}): Promise<boolean> {
  const proc = opts.proc ?? '/proc';
  const want = await realpath(lockPath).catch(() => lockPath);
  const flock = FLOCK_SYSCALL[opts.arch ?? process.arch];
  try {
    if (flock !== undefined) {
      const fields = (await readFile(`${proc}/${pid}/syscall`, 'utf8')).trim().split(' ');
      if (Number(fields[0]) !== flock || fields.length < 2) return false;
      return (await readlink(`${proc}/${pid}/fd/${parseInt(fields[1], 16)}`)) === want;
    }
    const wchan = await readFile(`${proc}/${pid}/wchan`, 'utf8');
    if (!/lock/.test(wchan)) return false;
    for (const fd of await readdir(`${proc}/${pid}/fd`)) if ((await readlink(`${proc}/${pid}/fd/${fd}`).catch(() => '')) === want) return true;
    return false;
  } catch {
    return false;
  }
}

/**
 * lockHolder finds the process holding the lock in /proc/locks (an FLOCK
 * WRITE lock on the lock file's device and inode, not a waiter's "->" line)
 * and names its command. null when none is listed: the holder may live in
 * another PID namespace, whose locks /proc/locks does not show.
 */
export async function lockHolder(lockPath: string, opts: LockProbeOptions = {}): Promise<LockHolder | null> {
  const proc = opts.proc ?? '/proc';
  try {
    const st = await stat(lockPath);
    const dev = deviceText(Number(st.dev), Number(st.ino));
    for (const line of (await readFile(`${proc}/locks`, 'utf8')).split('\n')) {
      const f = line.trim().split(/\s+/);
      // "1: FLOCK  ADVISORY  WRITE 15413 fe:00:2146433 0 EOF"; waiters read "1: -> FLOCK …".
      if (f[1] !== 'FLOCK' || f[3] !== 'WRITE' || !sameDevice(f[5], dev)) continue;
      const pid = Number(f[4]);
      if (!(pid > 0)) return { pid: null, command: null };
      const command = (await readFile(`${proc}/${pid}/comm`, 'utf8').catch(() => '')).trim() || null;
      return { pid, command };
    }
  } catch {
    // No lock file, or no /proc/locks: nobody to name.
  }
  return null;
}

/** deviceText: a stat() device and inode as /proc/locks prints them ("maj:min:inode", glibc's dev_t split into the kernel's numbers). */
export function deviceText(dev: number, ino: number): string {
  const major = Math.floor(dev / 0x100) % 0x1000;
  const minor = (dev % 0x100) + (Math.floor(dev / 0x1000) % 0x100000) - (Math.floor(dev / 0x1000) % 0x100);
  return `${major.toString(16).padStart(2, '0')}:${minor.toString(16).padStart(2, '0')}:${ino}`;
}

/** sameDevice compares "maj:min:inode" as /proc/locks prints it (hex device numbers, of varying width) with ours. */
function sameDevice(listed: string | undefined, ours: string): boolean {
  if (!listed) return false;
  const a = listed.split(':');
  const b = ours.split(':');
  return a.length === 3 && parseInt(a[0], 16) === parseInt(b[0], 16) && parseInt(a[1], 16) === parseInt(b[1], 16) && a[2] === b[2];
}

/** describeHolder: "held by pid 1234 (iptables)", or where the holder cannot be seen, a sentence that says so. */
export function describeHolder(h: LockHolder | null): string {
  if (!h || h.pid === null) return 'held by a process kproxy cannot see (another PID namespace, e.g. the host or another container)';
  return `held by pid ${h.pid}${h.command ? ` (${h.command})` : ''}`;
}

/** LOCK_BUSY: what iptables prints when it gave up waiting for the lock (it exits 4, RESOURCE_PROBLEM). */
export const LOCK_BUSY = /Another app is currently holding the xtables lock/;

/** XtablesLockWaits: restores that found the lock held (seen waiting, or given up), by how they ended. */
export interface XtablesLockWaits {
  /** acquired: waited, then got the lock (the restore went on). */
  readonly acquired: number;
  /** timedOut: gave up after the wait (the restore failed, nothing written). */
  readonly timedOut: number;
}

export interface LockWatchOptions {
  /** waiting says whether process pid is blocked on the lock (default: waitingForLock on xtablesLockPath()). */
  waiting?: (pid: number) => Promise<boolean>;
  /** holder names who holds the lock (default: lockHolder on xtablesLockPath()). */
  holder?: () => Promise<LockHolder | null>;
  /** firstCheckMs: when the running process is first looked at; everyMs: how often after that. */
  firstCheckMs?: number;
  everyMs?: number;
}

/**
 * watchLockWait looks at a running iptables process (first after
 * firstCheckMs, then every everyMs) until it is found blocked on the xtables
 * lock, which it reports once through onWait with the holder, or until
 * stop(). It reads /proc only: nothing is locked or signalled.
 */
export function watchLockWait(pid: number, onWait: (holder: LockHolder | null) => void, opts: LockWatchOptions = {}): { stop(): void; readonly waited: boolean } {
  const path = xtablesLockPath();
  const waiting = opts.waiting ?? ((p: number) => waitingForLock(p, path));
  const holder = opts.holder ?? (() => lockHolder(path));
  let stopped = false;
  let waited = false;
  let timer: NodeJS.Timeout | null = null;
  const check = async () => {
    timer = null;
    if (stopped) return;
    if (await waiting(pid)) {
      waited = true;
      const h = await holder();
      if (!stopped) onWait(h);
      return;
    }
    if (!stopped) timer = setTimeout(check, opts.everyMs ?? 1000);
  };
  timer = setTimeout(check, opts.firstCheckMs ?? 250);
  return {
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
    get waited() {
      return waited;
    },
  };
}

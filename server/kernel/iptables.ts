import { CommandFailedError, RestoreFailedError, SaveFailedError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { IPFamily } from '../net/ip.ts';
import { execFile, timeoutForInput, type ExecFn, type ExecResult } from './exec.ts';
import { countSaveText, type IptablesCountRequest, type IptablesCounts } from './iptables-counts.ts';
import { countChainsOverXtables } from './iptables-legacy-counts.ts';
import { countChainsOverNetlink } from './iptables-nft-counts.ts';
import { sharedLauncher, type StatusFn, type StatusResult } from './launcher.ts';
import { describeHolder, LOCK_BUSY, lockHolder, watchLockWait, xtablesLockPath, type LockHolder, type LockWatchOptions, type XtablesLockWaits } from './xtables-lock.ts';

/** IptablesFlavor: which kernel API the iptables binaries drive ("system" = the unsuffixed binaries). */
export type IptablesFlavor = 'legacy' | 'nft' | 'system';

export interface RestoreOptions {
  /** noflush: keep chains the input does not declare (--noflush); default true. */
  noflush?: boolean;
  /** counters: restore "[p:b]" counters (--counters); default true. */
  counters?: boolean;
}

export interface SaveOptions {
  /** table: only this table (-t); default every table the kernel holds. */
  table?: string;
  /** counters: include packet and byte counters (-c). */
  counters?: boolean;
  /** background: a read nobody's networking waits on (the dashboard's): iptables-save runs at a lower CPU priority (ExecOptions.background). */
  background?: boolean;
}

/**
 * IptablesRunner is kproxy's boundary to one family's iptables (one flavour).
 * Every call is one process with an argument array; rule arguments are passed
 * as separate words, never through a shell. Implementations: the real one
 * below and SimulatedIptables (iptables-simulated.ts).
 */
export interface IptablesRunner {
  readonly family: IPFamily;
  readonly flavor: IptablesFlavor;
  /** hasRandomFully: MASQUERADE accepts --random-fully (iptables >= 1.6.2), as kube-proxy checks. */
  readonly hasRandomFully: boolean;
  /** restore feeds input to iptables-restore; throws IptablesRestoreError naming the failed lines. */
  restore(input: string, opts?: RestoreOptions): Promise<void>;
  /** save returns iptables-save output; throws SaveFailedError. */
  save(opts?: SaveOptions): Promise<string>;
  /** ensureChain creates a chain unless it exists; returns whether it existed. */
  ensureChain(table: string, chain: string): Promise<boolean>;
  /** chainExists lists the chain (-S); false when it does not exist. */
  chainExists(table: string, chain: string): Promise<boolean>;
  /** checkRule: -C; true when the rule exists. */
  checkRule(table: string, chain: string, args: readonly string[]): Promise<boolean>;
  /** insertRule: -I chain 1 (prepend). */
  insertRule(table: string, chain: string, args: readonly string[]): Promise<void>;
  /** deleteRule: -D; returns false when there was no such rule. */
  deleteRule(table: string, chain: string, args: readonly string[]): Promise<boolean>;
  flushChain(table: string, chain: string): Promise<void>;
  deleteChain(table: string, chain: string): Promise<void>;
  /** lockWaits: restores that found the xtables lock held so far (the real runner; kproxy's metrics read it). */
  lockWaits?(): XtablesLockWaits;
  /**
   * countChains reads the counts a sync is verified with (iptables-counts.ts):
   * nft over netlink (each chain's use count), legacy from iptables-save
   * (each chain's rules). A runner without it is counted from save().
   */
  countChains?<T>(ask: IptablesCountRequest<T>): Promise<IptablesCounts<T>>;
}

/** IptablesRestoreError is a failed iptables-restore; lines are the 1-based input lines it blamed. */
export class IptablesRestoreError extends RestoreFailedError {
  readonly lines: readonly number[];
  readonly stderr: string;
  constructor(message: string, lines: readonly number[], stderr: string, options?: { cause?: unknown }) {
    super(message, options);
    this.lines = lines;
    this.stderr = stderr;
  }
}

/**
 * restoreErrorLines finds the input lines iptables-restore blamed. Legacy says
 * "Error occurred at line: N" (parse errors) or "line N failed" (commit
 * errors); nft says "Error occurred at line: N" or "line N: CHAIN_DEL failed".
 */
export function restoreErrorLines(stderr: string): number[] {
  const out = new Set<number>();
  for (const re of [/Error occurred at line: (\d+)/g, /\bline (\d+) failed/g, /\bline (\d+): /g]) {
    for (const m of stderr.matchAll(re)) out.add(Number(m[1]));
  }
  return [...out].sort((a, b) => a - b);
}

/** cleanStderr drops iptables' noise lines (deprecation notes, usage hints) from an error text. */
export function cleanStderr(stderr: string): string {
  return stderr
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !/^Ignoring deprecated/.test(l) && !/^Try `/.test(l) && !/^# Warning: iptables-legacy tables present/.test(l))
    .join('; ');
}

/** WAIT_SECONDS: how long iptables waits for the xtables lock, as kube-proxy's WaitSecondsValue. */
export const WAIT_SECONDS = 5;

/**
 * The wait flags kube-proxy passes to iptables >= 1.6.2 (pkg/util/iptables:
 * WaitString, WaitSecondsValue, WaitIntervalString, WaitIntervalUsecondsValue):
 * wait up to 5 s for the xtables lock, polling every 100 ms. iptables 1.8
 * blocks in flock() for the 5 s instead of polling, and says it ignores -W.
 */
export const WAIT_FLAGS: readonly string[] = ['-w', String(WAIT_SECONDS), '-W', '100000'];

/** binaries names the three programs of a family and flavour. */
export function iptablesBinaries(family: IPFamily, flavor: IptablesFlavor): { iptables: string; save: string; restore: string } {
  const base = family === 'IPv6' ? 'ip6tables' : 'iptables';
  const suffix = flavor === 'system' ? '' : `-${flavor}`;
  return { iptables: `${base}${suffix}`, save: `${base}${suffix}-save`, restore: `${base}${suffix}-restore` };
}

/** parseIptablesVersion reads "iptables v1.8.9 (nf_tables)" into [1, 8, 9] and the flavour. */
export function parseIptablesVersion(text: string): { version: number[]; flavor: 'legacy' | 'nft' | null } | null {
  const m = /v(\d+)\.(\d+)(?:\.(\d+))?/.exec(text);
  if (!m) return null;
  const flavor = /\(nf_tables\)/.test(text) ? 'nft' : /\(legacy\)/.test(text) ? 'legacy' : null;
  return { version: [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)], flavor };
}

function atLeast(v: number[], min: number[]): boolean {
  for (let i = 0; i < min.length; i++) {
    if ((v[i] ?? 0) !== min[i]) return (v[i] ?? 0) > min[i];
  }
  return true;
}

export interface RealIptablesOptions {
  family: IPFamily;
  flavor: IptablesFlavor;
  exec?: ExecFn;
  /**
   * run executes the one-rule commands (-N, -S, -C, -I, -D, -F, -X: their exit
   * code and stderr are all kproxy reads). Default: the shared launcher
   * (launcher.ts) when `exec` is the real execFile, so the canary's
   * once-a-second `iptables -S` does not fork the daemon; an injected `exec`
   * (tests) runs them too.
   */
  run?: StatusFn;
  /**
   * restoreTimeoutMs bounds one iptables-restore, and iptables-save (default
   * 120 s); a restore's input adds RESTORE_MS_PER_MIB per MiB to it.
   */
  restoreTimeoutMs?: number;
  /** logger: where a restore waiting for the xtables lock is reported (none: counted only). */
  logger?: Logger;
  /** lockWatch: how a running restore is looked at for the xtables lock (tests); default the real /proc. */
  lockWatch?: LockWatchOptions;
}

/**
 * RESTORE_MS_PER_MIB: the time a restore is allowed per MiB of input on top of
 * its timeout. iptables-nft-restore took 113 s for the 98 MiB of 30,000
 * Services × 10 endpoints on the bench's 2-core VM (docs/performance.md), and
 * more than 120 s on a busier day: a fixed bound failed good syncs of big
 * clusters on slow nodes. This keeps about four times that rate in hand (10
 * minutes more at that size), while a restore that hangs is still ended.
 */
export const RESTORE_MS_PER_MIB = 5_000;

/**
 * createIptablesRunner probes `iptables --version` once (for --random-fully
 * and the wait flags, as kube-proxy does) and returns the real runner.
 */
export async function createIptablesRunner(opts: RealIptablesOptions): Promise<IptablesRunner> {
  const exec = opts.exec ?? execFile;
  const bins = iptablesBinaries(opts.family, opts.flavor);
  let version = [1, 8, 0];
  try {
    const res = await exec(bins.iptables, ['--version'], { timeoutMs: 10_000 });
    version = parseIptablesVersion(res.stdout + res.stderr)?.version ?? version;
  } catch (err) {
    throw new CommandFailedError(`cannot run ${bins.iptables} --version`, { cause: err });
  }
  return new RealIptables(opts, exec, atLeast(version, [1, 6, 2]));
}

class RealIptables implements IptablesRunner {
  readonly family: IPFamily;
  readonly flavor: IptablesFlavor;
  readonly hasRandomFully: boolean;
  readonly #exec: ExecFn;
  readonly #runCommand: StatusFn;
  readonly #bins: { iptables: string; save: string; restore: string };
  readonly #restoreTimeoutMs: number;
  readonly #logger: Logger | null;
  readonly #lockWatch: LockWatchOptions | null;
  readonly #lockWaits = { acquired: 0, timedOut: 0 };

  constructor(opts: RealIptablesOptions, exec: ExecFn, modern: boolean) {
    this.family = opts.family;
    this.flavor = opts.flavor;
    this.hasRandomFully = modern;
    this.#exec = exec;
    this.#runCommand = opts.run ?? (exec === execFile ? sharedLauncher() : exec);
    this.#bins = iptablesBinaries(opts.family, opts.flavor);
    this.#restoreTimeoutMs = opts.restoreTimeoutMs ?? 120_000;
    this.#logger = opts.logger ?? null;
    // iptables-nft takes no xtables lock: nothing to watch for.
    this.#lockWatch = opts.flavor === 'nft' ? null : (opts.lockWatch ?? {});
  }

  lockWaits(): XtablesLockWaits {
    return { ...this.#lockWaits };
  }

  async restore(input: string, opts: RestoreOptions = {}): Promise<void> {
    const args = [...WAIT_FLAGS];
    if (opts.noflush ?? true) args.push('--noflush');
    if (opts.counters ?? true) args.push('--counters');
    const restore = this.#bins.restore;
    // Legacy iptables-restore blocks on the xtables lock for up to WAIT_SECONDS: said in the log as it happens.
    const lock: { watch: ReturnType<typeof watchLockWait> | null; holder: LockHolder | null; since: number } = { watch: null, holder: null, since: 0 };
    const onSpawn = (pid: number) => {
      lock.since = performance.now();
      lock.watch = watchLockWait(
        pid,
        (h) => {
          lock.holder = h;
          this.#logger?.warn(`${restore} is waiting for the xtables lock, as kube-proxy does (up to ${WAIT_SECONDS} s)`, { lock: xtablesLockPath(), holder: describeHolder(h) });
        },
        this.#lockWatch ?? {},
      );
    };
    let res: ExecResult;
    try {
      res = await this.#exec(restore, args, { stdin: input, timeoutMs: timeoutForInput(this.#restoreTimeoutMs, input, RESTORE_MS_PER_MIB), ...(this.#lockWatch ? { onSpawn } : {}) });
    } finally {
      lock.watch?.stop();
    }
    if (LOCK_BUSY.test(res.stderr)) {
      this.#lockWaits.timedOut++;
      const holder = lock.holder ?? (await (this.#lockWatch?.holder ?? (() => lockHolder(xtablesLockPath())))());
      throw new IptablesRestoreError(
        `${restore} could not take the xtables lock (${xtablesLockPath()}) within ${WAIT_SECONDS} s, ${describeHolder(holder)}: nothing was restored, and the sync is retried`,
        [],
        res.stderr,
      );
    }
    if (lock.watch?.waited) {
      this.#lockWaits.acquired++;
      this.#logger?.info(`${restore} got the xtables lock`, { lock: xtablesLockPath(), ms: Math.round(performance.now() - lock.since), exit: res.code });
    }
    if (res.code === 0) return;
    const lines = restoreErrorLines(res.stderr);
    const where = lines.length ? ` at line ${lines.join(', ')}` : '';
    throw new IptablesRestoreError(`${this.#bins.restore} failed${where} (exit ${res.code}): ${cleanStderr(res.stderr)}`, lines, res.stderr);
  }

  async countChains<T>(ask: IptablesCountRequest<T>): Promise<IptablesCounts<T>> {
    // The netlink dump reads iptables-nft's tables in a second where iptables-nft-save takes ten.
    if (this.flavor === 'nft') {
      const counted = await countChainsOverNetlink(this.family, ask);
      if (counted) return counted;
    }
    // The legacy tables are counted in the helper from the kernel's own copy, where iptables-legacy-save prints every rule.
    if (this.flavor === 'legacy') {
      const counted = await countChainsOverXtables(this.family, ask);
      if (counted) return counted;
    }
    const text = await this.save();
    await ask.ready;
    return countSaveText(text, ask, this.#bins.save);
  }

  async save(opts: SaveOptions = {}): Promise<string> {
    const args: string[] = [];
    if (opts.table) args.push('-t', opts.table);
    if (opts.counters) args.push('-c');
    let res: ExecResult;
    try {
      res = await this.#exec(this.#bins.save, args, { timeoutMs: this.#restoreTimeoutMs, stdoutFile: true, ...(opts.background ? { background: true } : {}) });
    } catch (err) {
      throw new SaveFailedError(`${this.#bins.save} ${args.join(' ')} could not run`, { cause: err });
    }
    if (res.code !== 0) throw new SaveFailedError(`${this.#bins.save} ${args.join(' ')} failed (exit ${res.code}): ${cleanStderr(res.stderr)}`);
    return res.stdout;
  }

  #run(op: string, table: string, chain: string, args: readonly string[] = []): Promise<StatusResult> {
    // Same argument order as kube-proxy's runner: wait flags, operation, chain, -t table, rule.
    return this.#runCommand(this.#bins.iptables, [...WAIT_FLAGS, op, chain, '-t', table, ...args], { timeoutMs: 60_000 });
  }

  #fail(what: string, res: StatusResult): never {
    if (LOCK_BUSY.test(res.stderr))
      throw new CommandFailedError(
        `${this.#bins.iptables} ${what} failed (exit ${res.code}): it could not take the xtables lock (${xtablesLockPath()}) within ${WAIT_SECONDS} s, another program held it`,
      );
    throw new CommandFailedError(`${this.#bins.iptables} ${what} failed (exit ${res.code}): ${cleanStderr(res.stderr)}`);
  }

  async ensureChain(table: string, chain: string): Promise<boolean> {
    const res = await this.#run('-N', table, chain);
    if (res.code === 0) return false;
    // Exit 1 is "Chain already exists"; anything else is a real failure (lock, bad table).
    if (res.code === 1) return true;
    return this.#fail(`-N ${chain} -t ${table}`, res);
  }

  async chainExists(table: string, chain: string): Promise<boolean> {
    const res = await this.#run('-S', table, chain);
    if (res.code === 0) return true;
    if (res.code === 1) return false;
    return this.#fail(`-S ${chain} -t ${table}`, res);
  }

  async checkRule(table: string, chain: string, args: readonly string[]): Promise<boolean> {
    const res = await this.#run('-C', table, chain, args);
    if (res.code === 0) return true;
    // iptables exits 1 when the rule (or its chain) is absent; 2 is a bad command line.
    if (res.code === 1) return false;
    return this.#fail(`-C ${chain} -t ${table}`, res);
  }

  async insertRule(table: string, chain: string, args: readonly string[]): Promise<void> {
    const res = await this.#run('-I', table, chain, args);
    if (res.code !== 0) this.#fail(`-I ${chain} -t ${table} ${args.join(' ')}`, res);
  }

  async deleteRule(table: string, chain: string, args: readonly string[]): Promise<boolean> {
    if (!(await this.checkRule(table, chain, args))) return false;
    const res = await this.#run('-D', table, chain, args);
    if (res.code !== 0) this.#fail(`-D ${chain} -t ${table} ${args.join(' ')}`, res);
    return true;
  }

  async flushChain(table: string, chain: string): Promise<void> {
    const res = await this.#run('-F', table, chain);
    if (res.code !== 0) this.#fail(`-F ${chain} -t ${table}`, res);
  }

  async deleteChain(table: string, chain: string): Promise<void> {
    const res = await this.#run('-X', table, chain);
    if (res.code !== 0) this.#fail(`-X ${chain} -t ${table}`, res);
  }
}

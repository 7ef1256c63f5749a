import { constants } from 'node:os';
import type { Logger } from '../log.ts';
import { NLMSG_ERROR, parseError, parseMessages, type NlMessage } from './nfnl.ts';
import { findNfnlPipe, NfnlPipeError, NfnlPipeGoneError, startNfnlPipe, type NfnlPipe } from './nfnl-pipe.ts';
import { NftTransactionFailure, type NftRunner } from './nft.ts';
import { encodeTransaction, NftLineError, transactionContext, type EncodedBatch, type EncodeOptions } from './nft-netlink-encode.ts';
import { countTableNetlink } from './nft-netlink-count.ts';
import { listTableNetlink, tableExists } from './nft-netlink-list.ts';
import { freshLoadPhases } from './nft-netlink-phases.ts';
import { tokenize } from './nft-netlink-rules.ts';
import { NftParseError, parseTransaction, type ParsedCommand } from './nft-script.ts';

/**
 * The netlink runner: nftables transactions written straight to the kernel
 * over nfnetlink (the nf_tables batch nft itself would send, made by
 * nft-netlink-encode.ts and carried by the nfnl-pipe program), without a
 * `nft` process per sync. nft 1.0.6 reads the whole table into its cache
 * before a single rule command, so at 10,000 services a few changed lines
 * cost it seconds; the kernel applies the same batch in milliseconds.
 *
 * `nft` stays: a transaction the encoder does not understand (anything kproxy
 * does not write), or one naming an interface that does not exist, goes to
 * `nft -f` as before, and so does every transaction while the helper is down
 * (it is started again for the next transaction after it dies, with a
 * bounded backoff: see restartDelayMs); listings are nft's (`nft -j`). The
 * kernel's refusals come back per message and are reported in nft's words,
 * naming the refused lines, so NftTransactionFailure reads as it does from nft.
 */

/** NftWriter: how a transaction reached the kernel. */
export type NftWriter = 'netlink' | 'nft';

export interface NetlinkRunStats {
  readonly writer: NftWriter;
  /** encodeMs: parsing and encoding (netlink only). */
  readonly encodeMs: number;
  /** kernelMs: the kernel's answer to the batch (netlink), or the whole nft -f run. */
  readonly kernelMs: number;
  /** why: for nft, why the netlink path was not taken. */
  readonly why?: string;
  /** phaseMs: a table loaded from nothing went in these kernel transactions, each this long (nft-netlink-phases.ts). */
  readonly phaseMs?: readonly number[];
}

/** NetlinkNftRunner: an NftRunner that writes over netlink; lastRun says how the last transaction went. */
export interface NetlinkNftRunner extends NftRunner {
  readonly writer: NftWriter;
  lastRun(): NetlinkRunStats | null;
  /** lastList: how the last listing for a sync was read, and how long it took. */
  lastList(): { writer: NftWriter; ms: number } | null;
  /** helperStats: what happened to the helper program so far (kproxy's metrics read it). */
  helperStats(): NetlinkHelperStats;
  close(): void;
}

/** NetlinkHelperStats: the helper's failures and restarts, and what it dropped, since the daemon started. */
export interface NetlinkHelperStats {
  /** failures: times a running helper was lost (it exited, was killed, or broke the protocol and was stopped). */
  readonly failures: number;
  /** restarts: helpers started again after one was lost; restartFailures: attempts that did not start. */
  readonly restarts: number;
  readonly restartFailures: number;
  /** foreignDatagrams: datagrams the helpers dropped because the kernel did not send them. */
  readonly foreignDatagrams: number;
}

/** RESTART_BACKOFF_MAX_MS: the longest wait between two attempts to start the helper again. */
export const RESTART_BACKOFF_MAX_MS = 60_000;

/**
 * restartDelayMs: after the nth failure in a row (the helper lost, or an
 * attempt to start it that failed; a batch written through a new helper ends
 * the row), how long the runner waits before it starts the helper again:
 * not at all after the first (the next transaction goes through a new
 * helper), then 1 s, doubling, at most RESTART_BACKOFF_MAX_MS. Meanwhile
 * transactions go through nft -f, so a helper that keeps dying costs nft's
 * speed, never a sync.
 */
export function restartDelayMs(failuresInARow: number): number {
  if (failuresInARow <= 1) return 0;
  return Math.min(RESTART_BACKOFF_MAX_MS, 1000 * 2 ** Math.min(failuresInARow - 2, 16));
}

/** ERRNO_TEXT: libc's words for the errors nf_tables answers with (what nft prints). */
const ERRNO_TEXT: Readonly<Record<string, string>> = {
  EPERM: 'Operation not permitted',
  ENOENT: 'No such file or directory',
  ENOMEM: 'Cannot allocate memory',
  EBUSY: 'Device or resource busy',
  EEXIST: 'File exists',
  ENODEV: 'No such device',
  EINVAL: 'Invalid argument',
  ENFILE: 'Too many open files in system',
  ENOSPC: 'No space left on device',
  EMLINK: 'Too many links',
  ERANGE: 'Numerical result out of range',
  E2BIG: 'Argument list too long',
  ELOOP: 'Too many levels of symbolic links',
  EOPNOTSUPP: 'Operation not supported',
  ENOBUFS: 'No buffer space available',
  EAFNOSUPPORT: 'Address family not supported by protocol',
  EPROTONOSUPPORT: 'Protocol not supported',
  EMSGSIZE: 'Message too long',
  EAGAIN: 'Resource temporarily unavailable',
};

/** errnoText: "No such file or directory" for 2 (ENOENT). */
export function errnoText(errno: number): string {
  const name = Object.entries(constants.errno).find(([, v]) => v === errno)?.[0];
  return (name && ERRNO_TEXT[name]) ?? (name ? `${name}` : `error ${errno}`);
}

/** KernelRefusal: one refused message of a batch. */
export interface KernelRefusal {
  readonly line: number;
  readonly errno: number;
  readonly message: string | null;
}

/** refusals reads a batch's replies: every NLMSG_ERROR with an error, mapped to its line through the sequence numbers. */
export function refusals(replies: readonly Buffer[], batch: EncodedBatch): KernelRefusal[] {
  const msgs: NlMessage[] = [];
  for (const r of replies) parseMessages(r, msgs);
  const out: KernelRefusal[] = [];
  for (const m of msgs) {
    if (m.type !== NLMSG_ERROR) continue;
    const e = parseError(m);
    if (e.errno === 0) continue;
    out.push({ line: batch.lineOfSeq[e.seq] ?? 0, errno: e.errno, message: e.message });
  }
  return out;
}

/**
 * refusalError writes refusals as nft does ("/dev/stdin:LINE:1-N: Error:
 * Could not process rule: TEXT", once per line), so the lines and the
 * summary read the same whichever runner refused.
 */
export function refusalError(found: readonly KernelRefusal[], text: string): NftTransactionFailure {
  const lines = text.split('\n');
  const stderr: string[] = [];
  const seen = new Set<string>();
  for (const r of found) {
    const what = `${errnoText(r.errno)}${r.message ? ` (${r.message})` : ''}`;
    const key = `${r.line} ${what}`;
    if (seen.has(key)) continue;
    seen.add(key);
    if (r.line > 0) stderr.push(`/dev/stdin:${r.line}:1-${(lines[r.line - 1] ?? '').length}: Error: Could not process rule: ${what}`, lines[r.line - 1] ?? '');
    else stderr.push(`Error: Could not process rule: ${what}`);
  }
  const numbered = [...new Set(found.map((r) => r.line).filter((l) => l > 0))].sort((a, b) => a - b);
  const summary = [...new Set(found.map((r) => errnoText(r.errno)))].join('; ');
  return new NftTransactionFailure(`the kernel refused the transaction (netlink): ${summary}`, numbered, stderr.join('\n') + '\n');
}

/** interfaceNames: the names `iif "NAME"` rules use (nft resolves them to indexes). */
function interfaceNames(commands: readonly ParsedCommand[]): string[] {
  const out = new Set<string>();
  for (const c of commands) {
    if (c.op.kind !== 'rule' || !c.op.rule.includes('iif ')) continue;
    const t = tokenize(c.op.rule);
    for (let i = 0; i < t.length; i++) {
      if (t[i] !== 'iif') continue;
      const v = t[i + 1] === '!=' ? t[i + 2] : t[i + 1];
      if (v?.startsWith('"') && v.endsWith('"')) out.add(v.slice(1, -1));
    }
  }
  return [...out];
}

export interface NetlinkRunnerOptions {
  pipe: NfnlPipe;
  /** fallback: the nft runner, for what the encoder does not write and for listings. */
  fallback: NftRunner;
  logger: Logger;
  now?: () => number;
  /** phasedFrom: a table loaded from nothing with at least this many commands goes in phases (default MIN_PHASED_COMMANDS). */
  phasedFrom?: number;
  /** restart starts a new helper after the one running was lost (none: every transaction goes through nft -f from then on). */
  restart?: () => Promise<NfnlPipe>;
}

/** createNetlinkNftRunner wraps a started pipe; see the file's comment. */
export function createNetlinkNftRunner(opts: NetlinkRunnerOptions): NetlinkNftRunner {
  const { fallback, logger } = opts;
  const now = opts.now ?? (() => performance.now());
  let current: NfnlPipe | null = opts.pipe;
  let closed = false;
  let last: NetlinkRunStats | null = null;
  let lastList: { writer: NftWriter; ms: number } | null = null;
  let listFailed = false;
  const fellBack = new Set<string>();
  // The helper's life: failures in a row (see restartDelayMs), when the next start may be tried, the totals.
  let failuresInARow = 0;
  let nextStartAt = 0;
  let starting: Promise<NfnlPipe | null> | null = null;
  let failures = 0;
  let restarts = 0;
  let restartFailures = 0;
  let foreignBefore = 0;

  /** helperLost retires a helper that exited, was killed or broke the protocol (once, whichever family's transaction saw it). */
  const helperLost = (lost: NfnlPipe, why: string): void => {
    if (current !== lost) return;
    current = null;
    lost.close();
    foreignBefore += lost.foreignDatagrams;
    failures++;
    failuresInARow++;
    const delay = restartDelayMs(failuresInARow);
    nextStartAt = now() + delay;
    if (opts.restart)
      logger.error('the netlink helper failed; it is started again for the next transaction (nft -f writes until then)', { err: why, pid: lost.pid, restartInMs: delay, failuresInARow });
    else logger.error('the netlink helper failed; writing with nft -f from now on', { err: why, pid: lost.pid });
  };

  /**
   * usablePipe is the running helper, or a new one started in its place when
   * the last was lost and the backoff allows (one start at a time, for both
   * families' transactions); null when there is none to use now.
   */
  const usablePipe = async (): Promise<NfnlPipe | null> => {
    if (current && !current.alive) helperLost(current, 'the helper exited between transactions');
    if (current) return current;
    if (!opts.restart || closed || now() < nextStartAt) return null;
    starting ??= (async () => {
      try {
        const fresh = await opts.restart!();
        if (closed) {
          fresh.close();
          return null;
        }
        restarts++;
        current = fresh;
        logger.info('started the netlink helper again', { pid: fresh.pid, failuresInARow });
        return fresh;
      } catch (err) {
        restartFailures++;
        failuresInARow++;
        const delay = restartDelayMs(failuresInARow);
        nextStartAt = now() + delay;
        logger.warn('the netlink helper did not start again; nft -f writes until the next attempt', { err: err instanceof Error ? err.message : String(err), retryInMs: delay, failuresInARow });
        return null;
      } finally {
        starting = null;
      }
    })();
    return starting;
  };

  const viaNft = async (text: string, why: string): Promise<void> => {
    // Logged once per reason: a transaction of a kind the encoder does not write comes back every sync.
    if (!fellBack.has(why)) {
      fellBack.add(why);
      logger.info('writing this transaction with nft -f', { why });
    }
    const t0 = now();
    try {
      await fallback.run(text);
    } finally {
      last = { writer: 'nft', encodeMs: 0, kernelMs: now() - t0, why };
    }
  };

  return {
    get writer(): NftWriter {
      return current?.alive ? 'netlink' : 'nft';
    },
    lastRun: () => last,
    helperStats: () => ({ failures, restarts, restartFailures, foreignDatagrams: foreignBefore + (current?.foreignDatagrams ?? 0) }),
    close() {
      closed = true;
      current?.close();
      current = null;
    },
    async run(text, given) {
      const pipe = await usablePipe();
      if (!pipe) return viaNft(text, 'the netlink helper is not running');
      const t0 = now();
      let commands: ParsedCommand[];
      if (given) {
        // formatTransaction writes one command per line, in order.
        commands = given.ops.map((op, i) => ({ line: i + 1, family: given.family, table: given.table, op }));
      } else {
        try {
          commands = parseTransaction(text);
        } catch (err) {
          // nft refuses it as well, with its own words for the line.
          if (err instanceof NftParseError) return viaNft(text, `unparsed line: ${err.message}`);
          throw err;
        }
      }
      if (commands.length === 0) return;
      const ifindex = new Map<string, number>();
      for (const name of interfaceNames(commands)) {
        const idx = await pipe.ifindex(name).catch(() => -1);
        // A missing interface: nft says which line names it.
        if (idx <= 0) return viaNft(text, `interface ${JSON.stringify(name)} not found`);
        ifindex.set(name, idx);
      }
      const load = freshLoadPhases(commands, opts.phasedFrom);
      let fresh = load !== null;
      for (const t of load?.tables ?? []) if (fresh && (await tableExists(pipe, t.family, t.name).catch(() => true))) fresh = false;
      const context = transactionContext(commands);
      // A phased load names its anonymous sets itself (see encodeOptions): unique per load, never nft's "__map%d".
      const stamp = `${process.pid.toString(36)}${Date.now().toString(36)}`;
      let anonCount = 0;
      const options: EncodeOptions = {
        ifindex: (name) => ifindex.get(name)!,
        context,
        ...(fresh ? { anonName: (kind: 'set' | 'map') => `__${kind}k${stamp}_${++anonCount}`, packElements: 32 * 1024 } : {}),
      };
      let batches: EncodedBatch[];
      try {
        batches = (fresh ? load!.phases : [commands]).map((p) => encodeTransaction(p, options));
      } catch (err) {
        if (err instanceof NftLineError) return viaNft(text, `not encoded: ${err.message.replace(/^line \d+: /, '')}`);
        throw err;
      }
      const t1 = now();
      const phaseMs: number[] = [];
      try {
        for (const batch of batches) {
          const tp = now();
          let replies: Buffer[];
          try {
            replies = await pipe.batch(batch.bytes);
          } catch (err) {
            if (!(err instanceof NfnlPipeError)) throw err;
            // Whether the kernel took the batch is unknown: the failure makes the next sync a full one, which lists the table.
            // A helper that is gone is replaced; one that answered an errno (the send failed) is kept.
            if (err instanceof NfnlPipeGoneError || !pipe.alive) helperLost(pipe, err.message);
            throw new NftTransactionFailure(`netlink: ${err.message}`, [], '', { cause: err });
          }
          phaseMs.push(now() - tp);
          // The helper works: the next failure starts a new row (and is retried at once).
          if (pipe === current) failuresInARow = 0;
          const refused = refusals(replies, batch);
          if (refused.length) throw refusalError(refused, text);
        }
      } finally {
        last = { writer: 'netlink', encodeMs: t1 - t0, kernelMs: now() - t1, ...(fresh ? { phaseMs } : {}) };
      }
      if (fresh) {
        const ms = (x: number) => Math.round(x);
        logger.info('loaded the table from nothing in phases', { transactions: phaseMs.length, encodeMs: ms(last.encodeMs), kernelMs: ms(last.kernelMs), slowestMs: ms(Math.max(...phaseMs)) });
      }
    },
    listTable: (family, name) => fallback.listTable(family, name),
    async listTableForSync(family, name) {
      const p = listFailed ? null : await usablePipe();
      if (p) {
        const t0 = now();
        try {
          const table = await listTableNetlink(p, family, name, { ifname: (i) => p.ifname(i) });
          lastList = { writer: 'netlink', ms: now() - t0 };
          return table;
        } catch (err) {
          const why = err instanceof Error ? err.message : String(err);
          // A helper lost during the dumps is replaced (nft -j lists this time); any other failure of the dumps
          // (a convenience: nft -j lists the same table, slower) makes nft -j the lister from now on.
          if (err instanceof NfnlPipeGoneError || !p.alive) helperLost(p, why);
          else {
            listFailed = true;
            logger.warn('listing the table over netlink failed; listing with nft -j from now on', { err: why });
          }
        }
      }
      const t0 = now();
      const table = await fallback.listTable(family, name);
      lastList = { writer: 'nft', ms: now() - t0 };
      return table;
    },
    lastList: () => lastList,
    async countTable(family, name, ask) {
      const p = listFailed ? null : await usablePipe();
      if (!p) {
        if (!fallback.countTable) throw new Error('counting a table needs the netlink helper or nft');
        return fallback.countTable(family, name, ask);
      }
      try {
        return await countTableNetlink(p, family, name, ask);
      } catch (err) {
        if (err instanceof NfnlPipeGoneError || !p.alive) helperLost(p, err instanceof Error ? err.message : String(err));
        throw err;
      }
    },
    // Deleting the table is nft's too (--cleanup, the dashboard's action, taking over from another mode).
    deleteTable: (family, name) => fallback.deleteTable(family, name),
  };
}

export interface ChooseOptions {
  /** backend: --nftables-backend; netlink falls back to nft when the helper cannot start. */
  backend: 'netlink' | 'nft';
  fallback: NftRunner;
  logger: Logger;
  /** path: the helper program (default: findNfnlPipe()). */
  path?: string | null;
}

/**
 * chooseNftRunner returns the runner for the host: the netlink runner when
 * --nftables-backend is netlink (the default) and the helper starts, else
 * the nft runner, saying once why.
 */
export async function chooseNftRunner(opts: ChooseOptions): Promise<NftRunner & { readonly writer: NftWriter }> {
  const asNft = Object.assign(opts.fallback, { writer: 'nft' as const });
  if (opts.backend === 'nft') return asNft;
  const path = opts.path === undefined ? findNfnlPipe() : opts.path;
  if (!path) {
    opts.logger.warn('the nfnl-pipe program is not built (npm run build makes it with a C compiler): writing nftables with nft -f');
    return asNft;
  }
  const start = () => startNfnlPipe(path, { logger: opts.logger });
  try {
    const pipe = await start();
    return createNetlinkNftRunner({ pipe, fallback: opts.fallback, logger: opts.logger, restart: start });
  } catch (err) {
    opts.logger.warn('the nfnl-pipe program did not start: writing nftables with nft -f', { path, err: err instanceof Error ? err.message : String(err) });
    return asNft;
  }
}

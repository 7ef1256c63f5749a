import { release } from 'node:os';
import { CommandNotFoundError, NftListError, NftTransactionError, NftUnsupportedError } from '../errors.ts';
import { execFile, timeoutForInput, type ExecFn } from './exec.ts';
import { countsOf, type NftCountRequest, type NftTableCounts } from './nft-counts.ts';
import { parseNftTableJson } from './nft-listing.ts';
import type { NftFamily, NftOp, NftTable } from './nft-types.ts';

/**
 * NftRunner is kproxy's boundary to nftables: one `nft -f -` process per
 * transaction (atomic: all of it or nothing), and `nft -j` listings read as
 * JSON. Implementations: the real one below and SimulatedNft (nft-simulated.ts),
 * which --dry-run and the unit tests use.
 */
export interface NftRunner {
  /**
   * run applies one transaction; throws NftTransactionFailure naming the
   * refused lines. ops, when given, are the commands the text was written
   * from (formatTransaction: one per line), so a runner that needs them
   * (the netlink runner) does not parse the text back.
   */
  run(transaction: string, ops?: NftTransactionOps): Promise<void>;
  /** listTable lists one table (`nft -j list table FAMILY NAME`); null when it does not exist. */
  listTable(family: NftFamily, name: string): Promise<NftTable | null>;
  /**
   * deleteTable deletes one table with everything in it (`nft delete table
   * FAMILY NAME`); false when there was no such table. It must not list the
   * ruleset first: on a node whose iptables-nft rules hold 100,000s of rules,
   * `nft list tables` makes nft 1.0.6 fetch all of them (about 30 s at 10,000
   * Services x 2 endpoints per family), a delete costs a fraction of a second.
   */
  deleteTable(family: NftFamily, name: string): Promise<boolean>;
  /**
   * listTableForSync, when a runner has it, lists a table for a full sync:
   * the same NftTable as listTable, read a faster way (the netlink runner's
   * dumps); listTable stays nft's for the dashboard.
   */
  listTableForSync?(family: NftFamily, name: string): Promise<NftTable | null>;
  /**
   * countTable reads the counts a sync is verified with (nft-counts.ts):
   * each chain's use count, the elements of the named sets and of the
   * anonymous sets of the chains asked for; null when the table does not
   * exist. The netlink runner reads them from the kernel's own counters;
   * the others work them out from a listing.
   */
  countTable?(family: NftFamily, name: string, ask: NftCountRequest): Promise<NftTableCounts | null>;
}

/** NftTransactionOps: a transaction's commands for one table, in the order (and lines) formatTransaction writes them. */
export interface NftTransactionOps {
  readonly family: NftFamily;
  readonly table: string;
  readonly ops: readonly NftOp[];
}

/** NftTransactionFailure is a refused transaction; lines are the 1-based input lines nft blamed. */
export class NftTransactionFailure extends NftTransactionError {
  readonly lines: readonly number[];
  readonly stderr: string;
  constructor(message: string, lines: readonly number[], stderr: string, options?: { cause?: unknown }) {
    super(message, options);
    this.lines = lines;
    this.stderr = stderr;
  }
}

/** nftErrorLines finds the lines nft blamed: "/dev/stdin:35:107-118: Error: …". */
export function nftErrorLines(stderr: string): number[] {
  const out = new Set<number>();
  for (const m of stderr.matchAll(/^(?:\/dev\/stdin|-):(\d+):/gm)) out.add(Number(m[1]));
  return [...out].sort((a, b) => a - b);
}

/** nftErrorSummary keeps nft's "Error: …" lines (the source excerpts and carets are shown by the caller from the input). */
export function nftErrorSummary(stderr: string): string {
  const errs = stderr
    .split('\n')
    .map((l) => /Error: (.*)$/.exec(l)?.[1])
    .filter((l): l is string => !!l);
  return errs.length ? [...new Set(errs)].join('; ') : (stderr.trim().split('\n')[0] ?? '');
}

/** NOT_FOUND: nft's answer for a table (or object) that does not exist. */
const NOT_FOUND = /No such file or directory/;

export interface RealNftOptions {
  exec?: ExecFn;
  /** timeoutMs bounds one nft run (default 120 s); a transaction adds NFT_MS_PER_MIB per MiB to it. */
  timeoutMs?: number;
}

/**
 * NFT_MS_PER_MIB: the time `nft -f` is allowed per MiB of transaction on top
 * of its timeout. nft parses and evaluates in user space at about 9 s per MiB
 * for a whole kube-proxy table (a bare `nft -f` of the 34 MiB first
 * transaction of 10,000 Services × 10 endpoints took 279-309 s on the bench's
 * VM, docs/performance.md): with a fixed 120 s the nft writer could never
 * program that cluster. Three times that rate is kept in hand.
 */
export const NFT_MS_PER_MIB = 30_000;

/** createNftRunner returns the runner that spawns the host's `nft`. */
export function createNftRunner(opts: RealNftOptions = {}): NftRunner {
  const exec = opts.exec ?? execFile;
  const timeoutMs = opts.timeoutMs ?? 120_000;
  return {
    async run(transaction) {
      const r = await exec('nft', ['-f', '-'], { stdin: transaction, timeoutMs: timeoutForInput(timeoutMs, transaction, NFT_MS_PER_MIB) });
      if (r.code === 0) return;
      const lines = nftErrorLines(r.stderr);
      throw new NftTransactionFailure(`nft -f refused the transaction (exit ${r.code}): ${nftErrorSummary(r.stderr)}`, lines, r.stderr);
    },
    async listTable(family, name) {
      const r = await exec('nft', ['-j', 'list', 'table', family, name], { timeoutMs, maxOutputBytes: 2 * 1024 * 1024 * 1024 });
      if (r.code !== 0) {
        if (NOT_FOUND.test(r.stderr)) return null;
        throw new NftListError(`nft -j list table ${family} ${name} failed (exit ${r.code}): ${nftErrorSummary(r.stderr)}`);
      }
      return parseNftTableJson(r.stdout, family, name);
    },
    async countTable(family, name, ask) {
      // nft has no cheaper read than the whole listing.
      const table = await this.listTable(family, name);
      return table && countsOf(table, ask);
    },
    async deleteTable(family, name) {
      const r = await exec('nft', ['delete', 'table', family, name], { timeoutMs });
      if (r.code === 0) return true;
      if (NOT_FOUND.test(r.stderr)) return false;
      throw new NftTransactionFailure(`nft delete table ${family} ${name} failed (exit ${r.code}): ${nftErrorSummary(r.stderr)}`, [], r.stderr);
    },
  };
}

/** MIN_NFT_VERSION: knftables (kube-proxy) needs nft 1.0.1: older ones parse the whole ruleset on every run. */
export const MIN_NFT_VERSION = [1, 0, 1] as const;
/** MIN_KERNEL_VERSION: kube-proxy's nftables mode needs kernel 5.13 (utilkernel.NFTablesKubeProxyKernelVersion). */
export const MIN_KERNEL_VERSION = [5, 13] as const;
/** SKIP_KERNEL_CHECK_ENV: kube-proxy's escape hatch for distributions that backport nftables features. */
export const SKIP_KERNEL_CHECK_ENV = 'KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK';

/** parseVersion reads "1.0.6" (or "6.18.44-fc") into numbers. */
export function parseVersion(text: string): number[] | null {
  const m = /(\d+)\.(\d+)(?:\.(\d+))?/.exec(text);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)] : null;
}

function older(v: readonly number[], min: readonly number[]): boolean {
  for (let i = 0; i < min.length; i++) if ((v[i] ?? 0) !== min[i]) return (v[i] ?? 0) < min[i];
  return false;
}

export interface NftSupportOptions {
  exec?: ExecFn;
  /** kernelRelease: `uname -r` (default: this process's kernel). */
  kernelRelease?: string;
  env?: NodeJS.ProcessEnv;
  family?: NftFamily;
}

/** NftSupport: what the start-up check found. */
export interface NftSupport {
  readonly nftVersion: string;
  readonly kernel: string;
}

/**
 * checkNftSupport is nftables mode's start-up check, before anything is
 * programmed: an `nft` binary of at least 1.0.1, a kernel of at least 5.13
 * (kube-proxy's check, skipped with KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK
 * set), and nf_tables itself: `nft --check` of adding the table makes the
 * kernel validate the transaction without committing it. Each failure throws
 * NftUnsupportedError naming what is missing.
 */
export async function checkNftSupport(opts: NftSupportOptions = {}): Promise<NftSupport> {
  const exec = opts.exec ?? execFile;
  const env = opts.env ?? process.env;
  const family = opts.family ?? 'ip';
  let out;
  try {
    out = await exec('nft', ['--version'], { timeoutMs: 10_000 });
  } catch (err) {
    if (err instanceof CommandNotFoundError) throw new NftUnsupportedError('nftables mode needs the nft command (Debian: apt-get install nftables), and it is not installed', { cause: err });
    throw err;
  }
  const version = parseVersion(out.stdout);
  if (out.code !== 0 || !version) throw new NftUnsupportedError(`nft --version failed (exit ${out.code}): ${out.stderr.trim() || out.stdout.trim()}`);
  const nftVersion = version.join('.');
  if (older(version, MIN_NFT_VERSION)) throw new NftUnsupportedError(`nftables mode needs nft ${MIN_NFT_VERSION.join('.')} or later; this host has nft ${nftVersion}`);
  const kernel = opts.kernelRelease ?? release();
  const kv = parseVersion(kernel);
  if (!env[SKIP_KERNEL_CHECK_ENV] && kv && older(kv, MIN_KERNEL_VERSION)) {
    throw new NftUnsupportedError(
      `nftables mode needs Linux ${MIN_KERNEL_VERSION.join('.')} or later; this kernel is ${kernel} (set ${SKIP_KERNEL_CHECK_ENV}=1 to skip this check, as with kube-proxy)`,
    );
  }
  const probe = await exec('nft', ['--check', '-f', '-'], { stdin: `add table ${family} kube-proxy\n`, timeoutMs: 10_000 });
  if (probe.code !== 0) {
    throw new NftUnsupportedError(`the kernel refused an nftables table (nf_tables missing? try "modprobe nf_tables"): ${nftErrorSummary(probe.stderr)}`);
  }
  return { nftVersion, kernel };
}

import { existsSync } from 'node:fs';
import { CommandNotFoundError, errorMessage, IpvsError, KernelModuleMissingError } from '../errors.ts';
import { execFile, type ExecFn, type ExecResult } from './exec.ts';
import type { IpvsService } from './ipvs-batch.ts';
import { parseIpvsList, parseIpvsSave, parseIpvsStats, type IpvsServiceStats } from './ipvs-listing.ts';

/**
 * IpvsRunner is kproxy's boundary to the kernel's IPVS table. Every call is
 * one ipvsadm process; changes go in one `ipvsadm -R` batch (never one process
 * per virtual server). Implementations: the real one below and SimulatedIpvs
 * (ipvs-simulated.ts), which parses the same batches.
 */
export interface IpvsRunner {
  /** save lists the configuration (`ipvsadm -Sn`): services and real servers with weights. */
  save(): Promise<IpvsService[]>;
  /** list adds connection counts (`ipvsadm -Ln --exact`): what graceful termination waits on. */
  list(): Promise<IpvsService[]>;
  /** stats lists traffic counters (`ipvsadm -Ln --stats --exact`), keyed "10.96.0.1:443/TCP". */
  stats(): Promise<Map<string, IpvsServiceStats>>;
  /** restore feeds a batch to `ipvsadm -R` (nothing is flushed); throws IpvsRestoreError. */
  restore(batch: string): Promise<void>;
}

/**
 * IpvsRestoreError is a batch ipvsadm did not fully apply. ipvsadm applies the
 * lines one by one and names no line when the kernel refuses one ("Service
 * already exists"), so `messages` are its complaints in order and `syntax` says
 * whether it stopped at an unparsable line (exit 2; later lines not applied).
 */
export class IpvsRestoreError extends IpvsError {
  readonly messages: readonly string[];
  readonly syntax: boolean;
  constructor(message: string, messages: readonly string[], syntax: boolean, options?: { cause?: unknown }) {
    super(message, options);
    this.messages = messages;
    this.syntax = syntax;
  }
}

/** PROC_NET_IP_VS exists (in each network namespace) once the ip_vs module is loaded. */
export const PROC_NET_IP_VS = '/proc/net/ip_vs';

const NOT_INITIALIZED = /Can't initialize ipvs|Protocol not available|IP Virtual Server is\s+built in the kernel/i;

/** stderrLines splits ipvsadm's complaints, one message per line. */
export function stderrLines(stderr: string): string[] {
  return stderr
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');
}

export interface RealIpvsOptions {
  exec?: ExecFn;
  /** timeoutMs bounds one ipvsadm process; default 60 s (a 10k-service listing takes a while). */
  timeoutMs?: number;
}

/** createIpvsRunner returns the runner that drives the host's IPVS through ipvsadm. */
export function createIpvsRunner(opts: RealIpvsOptions = {}): IpvsRunner {
  const exec = opts.exec ?? execFile;
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const run = async (args: string[], stdin?: string): Promise<ExecResult> => {
    try {
      return await exec('ipvsadm', args, { timeoutMs, ...(stdin !== undefined ? { stdin } : {}) });
    } catch (err) {
      throw new IpvsError(`ipvsadm ${args.join(' ')} could not run: ${errorMessage(err)}`, { cause: err });
    }
  };
  const listing = async (args: string[]): Promise<string> => {
    const res = await run(args);
    if (res.code !== 0) throw new IpvsError(`ipvsadm ${args.join(' ')} failed (exit ${res.code}): ${stderrLines(res.stderr).join('; ')}`);
    return res.stdout;
  };
  return {
    save: async () => parseIpvsSave(await listing(['-S', '-n'])),
    list: async () => parseIpvsList(await listing(['-L', '-n', '--exact'])),
    stats: async () => parseIpvsStats(await listing(['-L', '-n', '--stats', '--exact'])),
    async restore(batch) {
      const res = await run(['-R'], batch);
      // ipvsadm -R exits with the status of its last line only: a refused line
      // in the middle shows up on stderr alone, so any complaint is a failure.
      const messages = stderrLines(res.stderr);
      if (res.code === 0 && messages.length === 0) return;
      // Exit 2 (a bad value) or 255 (no command first): ipvsadm stopped at that line.
      const syntax = res.code === 2 || res.code === 255;
      const lines = batch.split('\n').filter((l) => l.trim() !== '').length;
      throw new IpvsRestoreError(
        `ipvsadm -R refused ${syntax ? 'a line it could not parse' : 'part of the batch'} (${lines} lines, exit ${res.code}): ${messages.slice(0, 5).join('; ')}${messages.length > 5 ? `; and ${messages.length - 5} more` : ''}`,
        messages,
        syntax,
      );
    },
  };
}

/** IPVS_MODULES names the modules IPVS mode needs for a scheduler (what `modprobe -a` must load). */
export function ipvsModules(scheduler: string): string[] {
  return ['ip_vs', `ip_vs_${scheduler || 'rr'}`, 'nf_conntrack', 'dummy'];
}

/** moduleHint tells an operator how to get the modules. */
export function moduleHint(scheduler: string): string {
  const mods = ipvsModules(scheduler);
  return `load them with "modprobe -a ${mods.join(' ')}" (and list them in /etc/modules-load.d/ so they load at boot), or choose another --proxy-mode (iptables)`;
}

export interface IpvsSupportOptions {
  exec?: ExecFn;
  exists?: (path: string) => boolean;
  scheduler: string;
}

/**
 * checkIpvsSupport makes sure this kernel can run IPVS mode before anything is
 * programmed: `ipvsadm -Ln` must work (ipvsadm itself tries `modprobe ip_vs`
 * first) and /proc/net/ip_vs must exist afterwards. Throws
 * KernelModuleMissingError naming ip_vs and what to load, or
 * CommandNotFoundError when ipvsadm is not installed.
 */
export async function checkIpvsSupport(opts: IpvsSupportOptions): Promise<void> {
  const exec = opts.exec ?? execFile;
  const exists = opts.exists ?? existsSync;
  let res: ExecResult;
  try {
    res = await exec('ipvsadm', ['-L', '-n'], { timeoutMs: 30_000 });
  } catch (err) {
    if (err instanceof CommandNotFoundError) {
      throw new CommandNotFoundError('IPVS mode needs ipvsadm, which is not installed (Debian/Ubuntu: apt-get install ipvsadm ipset)', { cause: err });
    }
    throw err;
  }
  const said = stderrLines(res.stderr).join(' ');
  if (res.code !== 0 || !exists(PROC_NET_IP_VS)) {
    const why = res.code !== 0 ? `ipvsadm -Ln: ${said || `exit ${res.code}`}` : `${PROC_NET_IP_VS} is missing`;
    const notLoaded = res.code === 0 || NOT_INITIALIZED.test(said);
    throw new KernelModuleMissingError(
      `--proxy-mode ipvs needs the ip_vs kernel module${notLoaded ? ', which this kernel does not have loaded' : ''} (${why}); IPVS mode uses ${ipvsModules(opts.scheduler).join(', ')}: ${moduleHint(opts.scheduler)}`,
    );
  }
}

import { cpus } from 'node:os';
import type { ProxyConfig } from '../../config/types.ts';
import { errorMessage, isKproxyError } from '../../errors.ts';
import type { Sysctl } from '../../kernel/sysctl.ts';
import type { Logger } from '../../log.ts';

/**
 * The conntrack sysctls kube-proxy sets at start (pkg/proxy/conntrack/sysctls.go):
 * nf_conntrack_max from maxPerCore × CPUs and min, the hash table size that
 * goes with it, TCP established / close-wait timeouts, UDP timeouts and
 * tcp_be_liberal. Each is skipped when configured 0 (or false), logged, and
 * never fatal: in a container /proc/sys is often read-only, and in a network
 * namespace nf_conntrack_max and the hash size belong to the host.
 */

/**
 * CONNTRACK_MAX_CAP is the largest nf_conntrack_max kube-proxy derives from
 * maxPerCore (1.36, kubernetes#137002): many-core machines otherwise asked for
 * tables of millions of entries they never use.
 */
export const CONNTRACK_MAX_CAP = 1_048_576;

/** HASHSIZE is the nf_conntrack module parameter, below /sys. */
export const HASHSIZE = 'module/nf_conntrack/parameters/hashsize';
const NF = 'net/netfilter/';

/**
 * conntrackMax is the nf_conntrack_max to ask for: maxPerCore × CPUs capped
 * at CONNTRACK_MAX_CAP, and at least min; 0 (leave the kernel's value) when
 * maxPerCore is 0. Unlike kube-proxy, a min configured above the cap wins:
 * an operator who wrote it meant it.
 */
export function conntrackMax(c: ProxyConfig['conntrack'], cpuCount: number): number {
  if (c.maxPerCore <= 0) return 0;
  const scaled = Math.min(c.maxPerCore * Math.max(1, cpuCount), CONNTRACK_MAX_CAP);
  return Math.max(scaled, c.min);
}

/** SysctlOutcome is what happened to one setting. */
export interface SysctlOutcome {
  /** name: below /proc/sys ("net/netfilter/nf_conntrack_max"), or /sys for the hash size. */
  readonly name: string;
  readonly want: number | null;
  /** was: the value before (null when it could not be read). */
  readonly was: number | null;
  /** set: written; kept: already as wanted (or higher, for the max); skipped: not configured; failed: the write was refused. */
  readonly action: 'set' | 'kept' | 'skipped' | 'failed';
  readonly reason?: string;
}

export interface ConntrackSysctlsReport {
  readonly outcomes: readonly SysctlOutcome[];
  /** readOnlySysFS: the hash size could not be raised because /sys is read-only (kube-proxy records a Warning Event). */
  readonly readOnlySysFS: boolean;
}

export interface ConntrackSysctlsOptions {
  config: ProxyConfig['conntrack'];
  /** sysctl: /proc/sys (of the process's network namespace). */
  sysctl: Sysctl;
  /** sysfs: /sys, for the nf_conntrack hashsize module parameter. */
  sysfs: Sysctl;
  /** cpuCount: CPUs of the node (default: every online CPU, not the process's affinity, as kube-proxy counts). */
  cpuCount?: number;
  logger: Logger;
}

/** applyConntrackSysctls sets what the configuration asks for and reports each setting; it never throws. */
export async function applyConntrackSysctls(o: ConntrackSysctlsOptions): Promise<ConntrackSysctlsReport> {
  const { config: c, sysctl, sysfs, logger } = o;
  const outcomes: SysctlOutcome[] = [];
  let readOnlySysFS = false;
  const note = (x: SysctlOutcome) => {
    outcomes.push(x);
    const fields = { want: x.want ?? undefined, was: x.was ?? undefined };
    if (x.action === 'set') logger.info(`set ${x.name} to ${x.want}`, fields);
    else if (x.action === 'kept') logger.info(`left ${x.name} at ${x.was}: ${x.reason}`, fields);
    else if (x.action === 'skipped') logger.debug(`left ${x.name} alone: ${x.reason}`);
    else logger.warn(`cannot set ${x.name} to ${x.want}: ${x.reason}; kproxy goes on with the kernel's value`, fields);
  };

  const max = conntrackMax(c, o.cpuCount ?? (cpus().length || 1));
  const maxName = `${NF}nf_conntrack_max`;
  if (max === 0) {
    note({ name: maxName, want: null, was: null, action: 'skipped', reason: 'conntrack.maxPerCore is 0' });
  } else {
    const was = await readInt(sysctl, maxName);
    if (was !== null && was >= max) {
      // Raising only (kubernetes#142035): a larger table set by the node's
      // owner stays, and a node where kproxy may not write keeps working.
      note({ name: maxName, want: max, was, action: 'kept', reason: `already at least ${max}` });
    } else {
      const res = await write(sysctl, maxName, max);
      note({ name: maxName, want: max, was, ...res });
      if (res.action === 'set') {
        const hash = await setHashsize(sysfs, Math.floor(max / 4));
        if (hash.errno === 'EROFS') readOnlySysFS = true;
        note(hash.outcome);
      }
    }
  }

  const seconds = (ms: number) => Math.floor(ms / 1000);
  const timeouts: [string, number, string][] = [
    ['nf_conntrack_tcp_timeout_established', c.tcpEstablishedTimeoutMs, 'conntrack.tcpEstablishedTimeout'],
    ['nf_conntrack_tcp_timeout_close_wait', c.tcpCloseWaitTimeoutMs, 'conntrack.tcpCloseWaitTimeout'],
  ];
  for (const [name, ms, field] of timeouts) note(await setExact(sysctl, NF + name, seconds(ms), `${field} is 0`));
  note(c.tcpBeLiberal ? await setExact(sysctl, `${NF}nf_conntrack_tcp_be_liberal`, 1, '') : skipped(`${NF}nf_conntrack_tcp_be_liberal`, 'conntrack.tcpBeLiberal is false'));
  note(await setExact(sysctl, `${NF}nf_conntrack_udp_timeout`, seconds(c.udpTimeoutMs), 'conntrack.udpTimeout is 0'));
  note(await setExact(sysctl, `${NF}nf_conntrack_udp_timeout_stream`, seconds(c.udpStreamTimeoutMs), 'conntrack.udpStreamTimeout is 0'));
  return { outcomes, readOnlySysFS };
}

function skipped(name: string, reason: string): SysctlOutcome {
  return { name, want: null, was: null, action: 'skipped', reason };
}

/** setExact writes value unless it is already there; 0 means "leave it" (kube-proxy: `if timeout > 0`). */
async function setExact(sysctl: Sysctl, name: string, value: number, zeroReason: string): Promise<SysctlOutcome> {
  if (value <= 0) return skipped(name, zeroReason);
  const was = await readInt(sysctl, name);
  if (was === value) return { name, want: value, was, action: 'kept', reason: 'already set' };
  return { name, want: value, was, ...(await write(sysctl, name, value)) };
}

async function setHashsize(sysfs: Sysctl, want: number): Promise<{ outcome: SysctlOutcome; errno: string | null }> {
  const name = `/sys/${HASHSIZE}`;
  const was = await readInt(sysfs, HASHSIZE);
  if (was === null) {
    return { outcome: { name, want, was, action: 'failed', reason: 'cannot read it (is the nf_conntrack module loaded?)' }, errno: null };
  }
  if (was >= want) return { outcome: { name, want, was, action: 'kept', reason: `already at least nf_conntrack_max/4 = ${want}` }, errno: null };
  const res = await write(sysfs, HASHSIZE, want);
  return { outcome: { name, want, was, ...res }, errno: res.errno ?? null };
}

async function readInt(s: Sysctl, name: string): Promise<number | null> {
  try {
    const n = Number.parseInt(await s.read(name), 10);
    return Number.isNaN(n) ? null : n;
  } catch {
    // Unreadable: the write that follows says why (missing module, permissions).
    return null;
  }
}

async function write(s: Sysctl, name: string, value: number): Promise<{ action: 'set' | 'failed'; reason?: string; errno?: string }> {
  try {
    await s.write(name, String(value));
    return { action: 'set' };
  } catch (err) {
    const errno = errnoOf(err);
    return { action: 'failed', reason: whyRefused(name, errno, err), ...(errno ? { errno } : {}) };
  }
}

function errnoOf(err: unknown): string | null {
  let cur: unknown = err;
  for (let i = 0; cur && i < 5; i++) {
    const code = (cur as NodeJS.ErrnoException).code;
    if (typeof code === 'string' && /^E[A-Z]+$/.test(code)) return code;
    cur = (cur as Error).cause;
  }
  return null;
}

/** whyRefused turns an errno into the reason an operator needs. */
export function whyRefused(name: string, errno: string | null, err?: unknown): string {
  const sys = name.startsWith('module/') || name.startsWith('/sys') ? '/sys' : '/proc/sys';
  // The module refuses a hash size from another network namespace (EOPNOTSUPP, which sysfs reports as EIO).
  if (name.endsWith('hashsize') && (errno === 'EIO' || errno === 'EOPNOTSUPP')) return 'the kernel accepts it only from the initial network namespace';
  switch (errno) {
    case 'EROFS':
      return `${sys} is mounted read-only (a container without write access to it: set the value on the host, or run kproxy privileged)`;
    case 'EACCES':
    case 'EPERM':
      return name.endsWith('nf_conntrack_max') || name.endsWith('hashsize')
        ? 'permission denied: the kernel lets only the initial network namespace change it, and kproxy needs CAP_NET_ADMIN there'
        : 'permission denied: kproxy needs CAP_NET_ADMIN (or a privileged container)';
    case 'EOPNOTSUPP':
      return 'the kernel accepts it only from the initial network namespace';
    case 'ENOENT':
      return 'the kernel has no such setting (is the nf_conntrack module loaded?)';
    default:
      return err === undefined ? 'refused' : isKproxyError(err) && err.cause ? errorMessage(err.cause) : errorMessage(err);
  }
}

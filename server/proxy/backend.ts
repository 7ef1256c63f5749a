import type { ProxyMode } from '../config/proxy-mode.ts';
import type { KproxyError } from '../errors.ts';
import type { IPFamily } from '../net/ip.ts';
import type { StateCheckout } from './proxy-state.ts';
import type { SyncVerification } from './sync-verify.ts';

/** BackendSyncInput is one sync's input: the wanted state, what changed, and whether it must be full. */
export interface BackendSyncInput {
  readonly state: StateCheckout;
  /**
   * forceFull: the sync loop's schedule makes this sync full (start-up, the
   * hourly full sync, an operator's resync, tampering, a resume, --once, a
   * topology change). A backend may sync fully without being asked: it owns
   * "the next sync is full" (see Backend).
   */
  readonly forceFull: boolean;
}

/** BackendSyncResult describes what a backend did in one sync. */
export interface BackendSyncResult {
  /** full: every object was rewritten (false: only changed services' objects). */
  readonly full: boolean;
  /** buildMs: kproxy's own time (build, diff, serialise). */
  readonly buildMs: number;
  /** applyMs: time spent in the kernel runners (restore processes). */
  readonly applyMs: number;
  /** linesWritten: lines of restore input (or batch commands) sent to the kernel. */
  readonly linesWritten: number;
  readonly bytesWritten: number;
  /** servicesWritten: services whose objects were written in this sync. */
  readonly servicesWritten: number;
  /** rulesByTable: rules (or objects) per table after the sync, e.g. { filter: 12, nat: 340 }. */
  readonly rulesByTable: Readonly<Record<string, number>>;
  /** error: the sync failed; the kernel keeps its previous consistent state. */
  readonly error?: KproxyError;
  /** batch: the exact input sent to the kernel (iptables-restore text, ipvsadm-restore batch...). */
  readonly batch?: string;
  /**
   * skippedServicePorts: after a successful sync, every service port ("ns/name:port/PROTO")
   * whose kernel objects could not be built safely, with why (the dashboard shows it).
   */
  readonly skippedServicePorts?: ReadonlyMap<string, string>;
  /** verify: after a full sync, whether the kernel holds what it wrote (the sync loop adds it; see sync-verify.ts). */
  readonly verify?: SyncVerification;
}

/** CleanupResult is what a cleanup removed, for its one-line summary. */
export interface CleanupResult {
  readonly removed: Readonly<Record<string, number>>;
  readonly errors: readonly KproxyError[];
}

/** mergeCleanup adds cleanups' counts and errors, in order. */
export function mergeCleanup(...results: readonly CleanupResult[]): CleanupResult {
  const removed: Record<string, number> = {};
  const errors: KproxyError[] = [];
  for (const r of results) {
    for (const [k, v] of Object.entries(r.removed)) removed[k] = (removed[k] ?? 0) + v;
    errors.push(...r.errors);
  }
  return { removed, errors };
}

/** cleanupSummary renders a CleanupResult as the one-line --cleanup summary. */
export function cleanupSummary(result: CleanupResult): string {
  const parts = Object.entries(result.removed).map(([k, v]) => `${k} ${v}`);
  const what = parts.length ? `removed ${parts.join(', ')}` : 'nothing to remove';
  return result.errors.length ? `${what}; ${result.errors.length} error(s): ${result.errors.map((e) => e.message).join('; ')}` : what;
}

/**
 * Backend is one proxy mode: it turns the wanted state into kernel objects.
 * A backend decides how (full or partial, what to diff); the sync loop decides
 * when. Backends never throw from sync(): failures come back in result.error.
 * The four modes wrap their own work (what to build, how to diff, what to
 * write) in the same kit: SyncEnvelope (sync-envelope.ts: timing, the result
 * and the failed one, the last failed input, "the next sync is full"),
 * ServicePortCache and SkippedServicePorts.
 *
 * The backend owns "the next sync is full", as kube-proxy's proxier owns
 * needFullSync: only it knows when what it last wrote stopped being what the
 * kernel holds (before its first sync, after a sync that failed, after its
 * cleanup, when its build context changed), and a partial sync is a diff
 * against that record. The sync loop keeps no such flag: it asks with
 * forceFull for the syncs its schedule makes full, and with requireFullSync()
 * when a sync failed, since some failures only the loop sees (the
 * verification found the kernel differs; a backend that threw).
 */
export interface Backend {
  readonly mode: ProxyMode;
  /** family: the IP family whose kernel objects this backend writes (one backend per family). */
  readonly family: IPFamily;
  /** init prepares the kernel once before the first sync (modules, sysctls the mode needs). */
  init?(): Promise<void>;
  sync(input: BackendSyncInput): Promise<BackendSyncResult>;
  /**
   * requireFullSync makes the next sync full, and every one after it until
   * one succeeds (one asked for while a sync runs is for the sync after it).
   */
  requireFullSync(): void;
  /**
   * afterSync runs after each successful sync has been recorded and its
   * observers told (so readiness and the sync's duration count programming
   * alone), before the next sync starts: the first one's removal of what the
   * other proxy modes left (first-sync-housekeeping.ts). Best effort; it never throws.
   */
  afterSync?(): Promise<void>;
  /**
   * verify checks cheaply, after a successful full sync, that the kernel
   * holds what that sync wrote (sync-verify.ts): counts read from the kernel
   * against the same counts of what the backend intends. It never throws: a
   * read that fails comes back as a skipped verification.
   */
  verify?(): Promise<SyncVerification>;
  /** cleanup removes every kernel object this mode (or kube-proxy in this mode) created. */
  cleanup(): Promise<CleanupResult>;
  /**
   * stop closes what the backend holds open in the process (the userspace
   * mode's proxy sockets) when the daemon stops; kernel objects stay, as in
   * every mode.
   */
  stop?(): Promise<void>;
  /**
   * watchTampering starts watching for someone flushing kproxy's objects (the
   * canary chain); onTampered asks for a full resync. Returns a stop function.
   */
  watchTampering?(onTampered: (reason: string) => void): () => void;
}

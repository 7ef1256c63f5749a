import { SyncVerifyError, type KproxyError } from '../errors.ts';
import type { IPFamily } from '../net/ip.ts';

/**
 * Verified programming: after every full sync that wrote anything (one that
 * wrote nothing has just read the kernel and found it as wanted) the sync loop asks the backend
 * to check, cheaply, that the kernel holds what the sync wrote (each backend
 * compares counts it can read in one or a few kernel reads: rules per chain,
 * elements per set, real servers per virtual server). A writer that silently
 * programs less than it was given (an encoding limit that truncates a set,
 * a restore that drops a line) then shows at once, as a failed sync naming
 * the object, instead of as connections rejected at random.
 *
 * A mismatch fails the sync (KPROXY_ERR_SYNC_VERIFY): the next sync is full
 * and rewrites whatever differs, after the usual retry delay; the failure is
 * counted (kproxy_sync_verify_mismatches_total), logged, shown on the
 * dashboard and, when it repeats, reported as a Warning Event like any
 * failed sync. A read that fails does not fail the sync: the verification is
 * reported as skipped, with why.
 */

/** VerifyMismatch: one kernel object whose count differs from what kproxy wrote. */
export interface VerifyMismatch {
  /** object: the kernel object as the mode names it ("chain endpoint-…", "set cluster-ips", "ipset KUBE-CLUSTER-IP"). */
  readonly object: string;
  /** servicePort: the service port the object belongs to ("ns/name:port/TCP"), when one does. */
  readonly servicePort?: string;
  /** what: what was counted ("rules and verdicts naming it", "elements", …). */
  readonly what: string;
  /** want: the count kproxy wrote. */
  readonly want: number;
  /** got: the kernel's count; null when the object is missing. */
  readonly got: number | null;
}

/** SyncVerification is one verification's account. */
export interface SyncVerification {
  /** ms: how long the check took (its kernel reads included). */
  readonly ms: number;
  /** objects: how many kernel objects were checked. */
  readonly objects: number;
  /** mismatches: every object that differs, up to MAX_MISMATCHES_KEPT (mismatchCount has the total). */
  readonly mismatches: readonly VerifyMismatch[];
  readonly mismatchCount: number;
  /** skipped: why nothing could be checked (the read failed or the writer cannot be read back); the sync stands. */
  readonly skipped?: string;
}

/** MAX_MISMATCHES_KEPT: a sync record keeps this many mismatches (a broken writer can make thousands). */
export const MAX_MISMATCHES_KEPT = 20;

/** CountCheck collects the comparisons of one verification. */
export class CountCheck {
  #objects = 0;
  #count = 0;
  readonly #kept: VerifyMismatch[] = [];

  /** compare checks one object: want is what kproxy wrote, got what the kernel holds (null: missing). */
  compare(object: string, what: string, want: number, got: number | null, servicePort?: string): void {
    this.#objects++;
    if (got === want) return;
    this.#count++;
    if (this.#kept.length < MAX_MISMATCHES_KEPT) this.#kept.push({ object, what, want, got, ...(servicePort ? { servicePort } : {}) });
  }

  /** unexpected records an object the kernel holds and kproxy did not write. */
  unexpected(object: string, what: string, got: number): void {
    this.#objects++;
    this.#count++;
    if (this.#kept.length < MAX_MISMATCHES_KEPT) this.#kept.push({ object, what, want: 0, got });
  }

  result(ms: number): SyncVerification {
    return { ms, objects: this.#objects, mismatches: [...this.#kept], mismatchCount: this.#count };
  }
}

/** skippedVerification: a verification that could not read the kernel. */
export function skippedVerification(ms: number, why: string): SyncVerification {
  return { ms, objects: 0, mismatches: [], mismatchCount: 0, skipped: why };
}

/** describeMismatch: "chain endpoint-… (ns/svc:http/TCP): the kernel holds 2 rules and verdicts naming it, kproxy wrote 3". */
export function describeMismatch(m: VerifyMismatch): string {
  const what = `${m.object}${m.servicePort ? ` (${m.servicePort})` : ''}`;
  if (m.got === null) return `${what}: missing from the kernel (kproxy wrote ${m.want} ${m.what})`;
  if (m.want === 0 && m.got > 0) return `${what}: in the kernel with ${m.got} ${m.what}, kproxy wrote none`;
  return `${what}: the kernel holds ${m.got} ${m.what}, kproxy wrote ${m.want}`;
}

/** verifyError is the failed sync's error: how many objects differ, the first ones named. */
export function verifyError(family: IPFamily, v: SyncVerification): KproxyError {
  const shown = v.mismatches.slice(0, 5).map(describeMismatch);
  const more = v.mismatchCount > shown.length ? `; and ${v.mismatchCount - shown.length} more` : '';
  return new SyncVerifyError(
    `the kernel does not hold what the sync wrote (${family}): ${v.mismatchCount} of ${v.objects} objects checked differ: ${shown.join('; ')}${more}; the next sync rewrites them`,
  );
}

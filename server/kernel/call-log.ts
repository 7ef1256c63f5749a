/** CallLogLimits bound what a simulated runner remembers of the calls it simulated. */
export interface CallLogLimits {
  /** maxCalls: older calls are forgotten beyond this many. */
  readonly maxCalls: number;
  /** keepInputs: only the newest this-many calls keep their input text. */
  readonly keepInputs: number;
}

/** UNBOUNDED keeps everything: what tests want. */
export const UNBOUNDED: CallLogLimits = { maxCalls: Infinity, keepInputs: Infinity };

/**
 * DRY_RUN_LIMITS are for a long-running --dry-run daemon: it simulates a sync
 * every few seconds, and at 10,000 services each restore input is tens of MB,
 * so keeping them all would grow the process without bound.
 */
export const DRY_RUN_LIMITS: CallLogLimits = { maxCalls: 200, keepInputs: 1 };

/** recordCall appends a call to a simulated runner's log, within the limits. */
export function recordCall<T extends { readonly input?: string }>(log: T[], call: T, limits: CallLogLimits): void {
  log.push(call);
  if (log.length > limits.maxCalls) log.splice(0, log.length - limits.maxCalls);
  // Each call passes this position once as newer ones arrive, so every input but the newest few is dropped.
  const old = log.length - 1 - limits.keepInputs;
  if (old >= 0) (log[old] as { input?: string }).input = undefined;
}

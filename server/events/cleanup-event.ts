import { nodeReference, type EventRecorder } from './event-recorder.ts';

export const REASON_CLEANUP = 'Cleanup';
export const REASON_CLEANUP_FAILED = 'CleanupFailed';

/** recordCleanup tells the cluster that this node's service rules were removed (and how it went). */
export function recordCleanup(recorder: EventRecorder, nodeName: string, summary: string, ok: boolean): void {
  recorder.record(nodeReference(nodeName), ok ? 'Normal' : 'Warning', ok ? REASON_CLEANUP : REASON_CLEANUP_FAILED, 'Cleanup', summary);
}

/**
 * flushWithin waits for a recorder's pending writes, at most timeoutMs: a
 * command that exits after recording (--cleanup) must not hang on an
 * unreachable API server.
 */
export async function flushWithin(recorder: { flush(): Promise<void> }, timeoutMs: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
  });
  try {
    return await Promise.race([recorder.flush().then(() => true as const), timedOut]);
  } finally {
    clearTimeout(timer);
  }
}

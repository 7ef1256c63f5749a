import type { Clock } from '../clock.ts';
import { CleanupFailedError, errorMessage, InternalError, RateLimitedError, SyncsPausedError, type KproxyError } from '../errors.ts';
import { nodeReference, type EventRecorder, type EventType } from '../events/event-recorder.ts';
import type { Logger } from '../log.ts';
import type { Dashboard } from './dashboard.ts';
import type { ActionResult, Viewer } from './protocol.ts';
import type { ActionRateLimiter } from './rate-limiter.ts';

export type ActionName = ActionResult['action'];

export interface ActionRequest {
  readonly action: ActionName;
  readonly viewer: Viewer;
  /** remote: the caller's address, for the audit line. */
  readonly remote: string;
  /** pause: for cleanup, pause syncs first so the rules stay off. */
  readonly pause?: boolean;
}

/**
 * ActionOutcome is an action carried out (its result), or refused or failed:
 * the catalogue error to answer with (its status: 409 syncs paused, 429 rate
 * limited with retryAfterMs, 500 failed), already audited.
 */
export type ActionOutcome = { readonly result: ActionResult } | { readonly error: KproxyError; readonly retryAfterMs?: number };

const EVENT: Record<ActionName, { reason: string; action: string; type: EventType }> = {
  resync: { reason: 'DashboardResync', action: 'Resync', type: 'Normal' },
  cleanup: { reason: 'DashboardCleanup', action: 'Cleanup', type: 'Warning' },
  pause: { reason: 'DashboardPause', action: 'Pause', type: 'Warning' },
  resume: { reason: 'DashboardResume', action: 'Resume', type: 'Normal' },
};

export interface DashboardActionsOptions {
  dashboard: Dashboard;
  /** events: where the audit Events go (the daemon's recorder: memory and, in a cluster, the API). */
  events: EventRecorder;
  limiter: ActionRateLimiter;
  clock: Clock;
  logger: Logger;
}

/**
 * DashboardActions runs the operator actions: resync (a full sync now),
 * cleanup (remove every rule; the next sync puts them back unless paused),
 * pause and resume (hold syncs). Each is rate-limited per action and audited
 * twice: a log line for every attempt, and a Kubernetes Event on the Node for
 * every one carried out, naming who asked, from where, and what happened.
 */
export class DashboardActions {
  readonly #o: DashboardActionsOptions;

  constructor(opts: DashboardActionsOptions) {
    this.#o = opts;
  }

  async run(req: ActionRequest): Promise<ActionOutcome> {
    const { dashboard, limiter } = this.#o;
    const proxy = dashboard.daemon.proxy;
    const slot = limiter.take(req.action);
    if (!slot.ok) {
      const err = new RateLimitedError(`${req.action} was asked less than ${Math.round(limiter.intervalMs / 1000)} s after the previous one; try again in ${Math.ceil(slot.retryAfterMs / 1000)} s`);
      this.#audit(req, 'refused', err.message, false);
      return { error: err, retryAfterMs: slot.retryAfterMs };
    }
    let message: string;
    // failure: why the action was refused or failed (null: carried out).
    let failure: KproxyError | null = null;
    try {
      switch (req.action) {
        case 'resync':
          if (proxy.paused) {
            message = 'syncs are paused: resume to sync';
            failure = new SyncsPausedError(message);
          } else {
            proxy.requestFullSync('resync');
            message = 'full sync requested; it shows up in Syncs with trigger "resync"';
          }
          break;
        case 'cleanup': {
          if (req.pause) proxy.pause();
          const res = await dashboard.daemon.cleanup();
          dashboard.provider.noteCleanup();
          dashboard.reader.drift.clear();
          const parts = Object.entries(res.removed).map(([k, v]) => `${k} ${v}`);
          const what = parts.length ? `removed ${parts.join(', ')}` : 'there was nothing to remove';
          const after = proxy.paused ? 'syncs are paused: rules stay off until resumed' : 'the next sync puts every rule back';
          message = res.errors.length === 0 ? `${what}; ${after}` : `${what}; ${res.errors.length} error(s): ${res.errors.map((e) => e.message).join('; ')}; ${after}`;
          if (res.errors.length > 0) failure = new CleanupFailedError(`dashboard cleanup: ${message}`, { cause: res.errors[0] });
          break;
        }
        case 'pause':
          proxy.pause();
          message = 'syncs paused: the kernel keeps its current rules and no longer follows the cluster';
          break;
        case 'resume':
          if (!proxy.paused) {
            message = 'syncs were not paused';
          } else {
            proxy.resume();
            message = 'syncs resumed: a full sync puts every rule back';
          }
          break;
      }
    } catch (err) {
      message = `${req.action} failed: ${errorMessage(err)}`;
      failure = req.action === 'cleanup' ? new CleanupFailedError(message, { cause: err }) : new InternalError(message, { cause: err });
    }
    const ok = failure === null;
    const result = this.#result(req, ok, message!);
    this.#audit(req, ok ? 'done' : 'failed', message!, true);
    dashboard.noteAction(result);
    return failure ? { error: failure } : { result };
  }

  #result(req: ActionRequest, ok: boolean, message: string): ActionResult {
    return { action: req.action, ok, at: this.#o.clock.now(), user: req.viewer.user, message, paused: this.#o.dashboard.daemon.proxy.paused };
  }

  #audit(req: ActionRequest, outcome: 'done' | 'failed' | 'refused', message: string, event: boolean): void {
    const { logger, events, dashboard } = this.#o;
    const fields = { action: req.action, user: req.viewer.user, from: req.remote, auth: req.viewer.authMode, outcome, result: message };
    if (outcome === 'done') logger.info('dashboard action', fields);
    else logger.warn('dashboard action', fields);
    if (!event) return;
    const e = EVENT[req.action];
    events.record(
      nodeReference(dashboard.daemon.nodeName),
      outcome === 'failed' ? 'Warning' : e.type,
      e.reason,
      e.action,
      `${req.action} by "${req.viewer.user}" from ${req.remote} (dashboard): ${outcome}: ${message}`,
    );
  }
}

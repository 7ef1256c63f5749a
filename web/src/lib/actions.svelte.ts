import { ApiError, type Api } from './api.ts';
import type { ActionResult } from './protocol.ts';

export type ActionName = ActionResult['action'];

/** ActionRefusal is an action the server refused (409, 429) or could not carry out (5xx): its status and what it said. */
export interface ActionRefusal {
  readonly status: number;
  readonly code: string;
  readonly message: string;
}

/** isActionAnswer: a status the action itself answered with (refused or failed), not a refusal of the request (auth, origin, body). */
function isActionAnswer(status: number): boolean {
  return status === 409 || status === 429 || status >= 500;
}

/**
 * ActionsState runs one operator action at a time and keeps each one's last
 * outcome: its result, or why it was refused or failed (until it runs again).
 */
export class ActionsState {
  busy = $state<ActionName | null>(null);
  results = $state.raw<Partial<Record<ActionName, ActionResult>>>({});
  refused = $state.raw<Partial<Record<ActionName, ActionRefusal>>>({});
  error = $state<string | null>(null);
  readonly #api: Api;

  constructor(api: Api) {
    this.#api = api;
  }

  async run(action: ActionName, body?: { pause?: boolean }): Promise<ActionResult | null> {
    if (this.busy) return null;
    this.busy = action;
    this.error = null;
    try {
      const { body: result } = await this.#api.post<ActionResult>(`actions/${action}`, body);
      this.results = { ...this.results, [action]: result };
      this.refused = { ...this.refused, [action]: undefined };
      return result;
    } catch (err) {
      if (err instanceof ApiError && isActionAnswer(err.status)) {
        this.refused = { ...this.refused, [action]: { status: err.status, code: err.code, message: err.message } };
        this.results = { ...this.results, [action]: undefined };
      } else this.error = (err as Error).message;
      return null;
    } finally {
      this.busy = null;
    }
  }
}

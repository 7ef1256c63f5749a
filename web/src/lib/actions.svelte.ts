import type { Api } from './api.ts';
import type { ActionResult } from './protocol.ts';

export type ActionName = ActionResult['action'];

/** ActionsState runs one operator action at a time and keeps each one's last result. */
export class ActionsState {
  busy = $state<ActionName | null>(null);
  results = $state.raw<Partial<Record<ActionName, ActionResult>>>({});
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
      return result;
    } catch (err) {
      this.error = (err as Error).message;
      return null;
    } finally {
      this.busy = null;
    }
  }
}

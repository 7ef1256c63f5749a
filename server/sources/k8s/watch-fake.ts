import type { WatchClient } from './informer-types.ts';

/** FakeWatchCall is one watch() call the informer made, open until ended. */
export interface FakeWatchCall {
  readonly path: string;
  readonly query: Readonly<Record<string, string | number | boolean | undefined>>;
  /** emit sends one watch line (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR). */
  emit(phase: string, object: unknown): void;
  /** end closes the stream: cleanly (no error) or with an error. */
  end(err?: unknown): void;
  readonly ended: boolean;
}

/**
 * FakeWatchClient stands in for client-node's Watch in unit tests: each watch()
 * opens a call the test drives by hand, or fails at once when the test queued
 * a failure (as a refused connection does).
 */
export class FakeWatchClient implements WatchClient {
  readonly calls: FakeWatchCall[] = [];
  readonly #failures: unknown[] = [];
  #throwNext: unknown = null;

  /** failNext makes the next watch() report err through its done callback (a refused connection). */
  failNext(err: unknown): void {
    this.#failures.push(err);
  }

  /** throwNext makes the next watch() reject (client-node does when it cannot build the request). */
  throwNext(err: unknown): void {
    this.#throwNext = err;
  }

  get open(): FakeWatchCall[] {
    return this.calls.filter((c) => !c.ended);
  }

  async watch(
    path: string,
    query: Record<string, string | number | boolean | undefined>,
    callback: (phase: string, apiObj: any, watchObj?: any) => void,
    done: (err: any) => void,
  ): Promise<AbortController> {
    if (this.#throwNext) {
      const err = this.#throwNext;
      this.#throwNext = null;
      throw err;
    }
    const controller = new AbortController();
    let ended = false;
    const call: FakeWatchCall = {
      path,
      query: { ...query },
      emit: (phase, object) => {
        if (!ended) callback(phase, object, { type: phase, object });
      },
      end: (err) => {
        if (ended) return;
        ended = true;
        done(err ?? null);
      },
      get ended() {
        return ended;
      },
    };
    controller.signal.addEventListener('abort', () => call.end(new DOMException('aborted', 'AbortError')));
    this.calls.push(call);
    if (this.#failures.length) call.end(this.#failures.shift());
    return controller;
  }
}

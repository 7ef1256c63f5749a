/** Yield lets other work run (the daemon's syncs) in the middle of a long job; tests pass one that returns at once. */
export type Yield = () => Promise<void>;

/** yieldToEventLoop is the daemon's Yield: one turn of the event loop. */
export const yieldToEventLoop: Yield = () => new Promise((resolve) => setImmediate(resolve));

/** noYield runs long jobs straight through (tests). */
export const noYield: Yield = () => Promise.resolve();

import type { Clock, TimerHandle } from '../../clock.ts';
import { errorMessage } from '../../errors.ts';
import type { IptablesRunner } from '../../kernel/iptables.ts';
import type { Logger } from '../../log.ts';
import { KUBE_PROXY_CANARY } from './chain-names.ts';

/** CANARY_TABLES: the tables holding KUBE-PROXY-CANARY; the first is the one polled. */
export const CANARY_TABLES = ['mangle', 'nat', 'filter'] as const;

export interface CanaryMonitorOptions {
  runner: IptablesRunner;
  clock: Clock;
  logger: Logger;
  /** intervalMs: how often the canary is polled (one `iptables -S` process); default 1000. */
  intervalMs?: number;
  /** flushWaitMs: how long to wait for the other tables' canaries to vanish too; default 5000. */
  flushWaitMs?: number;
  onTampered: (reason: string) => void;
}

/**
 * startCanaryMonitor watches KUBE-PROXY-CANARY like kube-proxy's
 * iptables.Monitor: the canary chain exists (empty) in mangle, nat and filter;
 * when the mangle one disappears someone flushed the tables. The monitor then
 * waits (100 ms polls, up to flushWaitMs) until the nat and filter canaries are
 * gone too, so the resync does not run between two tables being flushed,
 * reports the tampering, and puts the canaries back. Polling goes through the
 * injected clock. Returns the stop function.
 */
export function startCanaryMonitor(opts: CanaryMonitorOptions): () => void {
  const { runner, clock, logger } = opts;
  const interval = opts.intervalMs ?? 1000;
  const flushWait = opts.flushWaitMs ?? 5000;
  let stopped = false;
  let timer: TimerHandle | null = null;

  const schedule = (ms: number, fn: () => Promise<void>) => {
    if (stopped) return;
    timer = clock.setTimeout(() => {
      timer = null;
      void fn().catch((err) => logger.error('iptables canary check failed', { err: errorMessage(err) }));
    }, ms);
  };

  const ensureCanaries = async (): Promise<boolean> => {
    for (const table of CANARY_TABLES) {
      try {
        await runner.ensureChain(table, KUBE_PROXY_CANARY);
      } catch (err) {
        // Without canaries a flush goes unnoticed until the periodic full sync; retry next interval.
        logger.warn('could not create the iptables canary chain', { table, chain: KUBE_PROXY_CANARY, err: errorMessage(err) });
        return false;
      }
    }
    return true;
  };

  const exists = async (table: string): Promise<boolean | null> => {
    try {
      return await runner.chainExists(table, KUBE_PROXY_CANARY);
    } catch (err) {
      // A lock timeout or similar says nothing about the canary: treat as "still there" this round.
      logger.debug('could not check the iptables canary', { table, err: errorMessage(err) });
      return null;
    }
  };

  const setUp = async () => {
    if (stopped) return;
    if (await ensureCanaries()) schedule(interval, poll);
    else schedule(interval, setUp);
  };

  const poll = async () => {
    if (stopped) return;
    if ((await exists(CANARY_TABLES[0])) !== false) return schedule(interval, poll);
    logger.info('iptables canary deleted: the tables were flushed', { table: CANARY_TABLES[0], chain: KUBE_PROXY_CANARY });
    const deadline = clock.monotonic() + flushWait;
    const waitOthers = async () => {
      if (stopped) return;
      let allGone = true;
      for (const t of CANARY_TABLES.slice(1)) if ((await exists(t)) !== false) allGone = false;
      if (!allGone && clock.monotonic() < deadline) return schedule(100, waitOthers);
      if (!allGone) logger.warn('inconsistent iptables state: only some canary chains were deleted');
      opts.onTampered(`chain ${KUBE_PROXY_CANARY} was deleted from table ${CANARY_TABLES[0]}`);
      await setUp();
    };
    await waitOthers();
  };

  void setUp().catch((err) => logger.error('iptables canary set-up failed', { err: errorMessage(err) }));
  return () => {
    stopped = true;
    if (timer) clock.clearTimeout(timer);
    timer = null;
  };
}

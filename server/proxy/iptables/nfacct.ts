import type { Clock, TimerHandle } from '../../clock.ts';
import { errorMessage } from '../../errors.ts';
import type { NfacctRunner } from '../../kernel/nfacct.ts';
import type { Logger } from '../../log.ts';
import type { PacketCounters } from '../metrics/kube-proxy-metrics.ts';
import { NFACCT_CT_STATE_INVALID, NFACCT_LOCALHOST_NODEPORTS } from './rules.ts';

/** NfacctCounters are kube-proxy's two nfacct counters as one start-up found them. */
export interface NfacctCounters {
  /** rules: which counters exist, so the rules that feed them may name them (-m nfacct). */
  readonly rules: { readonly ctStateInvalid: boolean; readonly localhostNodePorts: boolean };
  /** read returns their packet counts at one scrape (null: none could be created). */
  readonly read: PacketCounters | null;
}

/** NO_NFACCT: the fallback, rules without -m nfacct and no packet counter metrics, as kube-proxy without nfacct. */
export const NO_NFACCT: NfacctCounters = { rules: { ctStateInvalid: false, localhostNodePorts: false }, read: null };

export interface NfacctSetupOptions {
  clock: Clock;
  logger: Logger;
  /**
   * scrapeBoundMs: how long a scrape waits for a listing (default 500 ms). A
   * slower listing goes on and serves the next scrape; this one gets the last
   * values, so a loaded node never makes /metrics slow.
   */
  scrapeBoundMs?: number;
}

/**
 * setupNfacctCounters creates kube-proxy's two accounting objects
 * (ct_state_invalid_dropped_pkts, localhost_nps_accepted_pkts) where the
 * kernel and the host support nfacct, as kube-proxy's iptables proxier does
 * at start. A counter that cannot be created is left out of the rules (a rule
 * naming a missing object would make every restore fail); without nfacct at
 * all kproxy runs exactly as before, with one info line saying why. The
 * returned reader lists the objects once per scrape, waiting at most
 * scrapeBoundMs for it; concurrent scrapes share one listing, and the runner
 * bounds the listing's process in time.
 */
export async function setupNfacctCounters(runner: NfacctRunner, opts: NfacctSetupOptions): Promise<NfacctCounters> {
  const { clock, logger } = opts;
  const boundMs = opts.scrapeBoundMs ?? 500;
  const created: string[] = [];
  for (const name of [NFACCT_CT_STATE_INVALID, NFACCT_LOCALHOST_NODEPORTS]) {
    try {
      await runner.ensure(name);
      created.push(name);
    } catch (err) {
      logger.info('nfacct counter not available: its rule is written without it and its metric is not exported', { counter: name, why: errorMessage(err) });
    }
  }
  if (created.length === 0) return NO_NFACCT;
  logger.info('nfacct counters ready', { counters: created.join(',') });
  type Values = Awaited<ReturnType<PacketCounters>>;
  let last: Values = {};
  let inFlight: Promise<Values> | null = null;
  const read: PacketCounters = async () => {
    inFlight ??= runner
      .list()
      .then((all) => {
        const packets = (name: string) => (created.includes(name) ? all.find((c) => c.name === name)?.packets : undefined);
        last = { ctStateInvalidDropped: packets(NFACCT_CT_STATE_INVALID), localhostNodePortsAccepted: packets(NFACCT_LOCALHOST_NODEPORTS) };
        return last;
      })
      .finally(() => (inFlight = null));
    let timer: TimerHandle | null = null;
    const late = new Promise<Values>((resolve) => (timer = clock.setTimeout(() => resolve(last), boundMs)));
    try {
      return await Promise.race([inFlight, late]);
    } finally {
      if (timer) clock.clearTimeout(timer);
    }
  };
  return { rules: { ctStateInvalid: created.includes(NFACCT_CT_STATE_INVALID), localhostNodePorts: created.includes(NFACCT_LOCALHOST_NODEPORTS) }, read };
}

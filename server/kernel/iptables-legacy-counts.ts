import type { Logger } from '../log.ts';
import type { IPFamily } from '../net/ip.ts';
import { TableCounter, type IptablesCountRequest, type IptablesCounts } from './iptables-counts.ts';
import { findNfnlPipe, startNfnlPipe, type NfnlPipe } from './nfnl-pipe.ts';

/**
 * A 'rules' reader of iptables-counts.ts for iptables-legacy: the helper
 * (native/nfnl-pipe.c, request 'X') takes each table from the kernel in one
 * getsockopt, as iptables-legacy-save does, and counts its chains in place
 * where iptables-legacy-save prints every rule (1.3-1.6 s at 10,000 Services
 * x 10 endpoints, 330,000 rules, which alone passed a tenth of the full
 * sync's kernel time). It answers, per chain in the table's order,
 * "C NAME RULES" and a "J TARGET" line for each rule jumping to a chain;
 * the jumps are kept for the chains no one owns, as the text reader keeps
 * them.
 */

/** readXtablesCounts turns the helper's answers for the tables asked for into counts. */
export function readXtablesCounts<T>(answers: ReadonlyMap<string, readonly Buffer[] | null>, ask: IptablesCountRequest<T>): IptablesCounts<T> {
  const tables = new Map<string, ReturnType<TableCounter<T>['result']>>();
  for (const [table, pieces] of answers) {
    if (pieces === null) continue;
    const counter = new TableCounter<T>(table, ask.own);
    let chain = '';
    let owned = true;
    // Lines may be cut between pieces: carry the unfinished one over.
    let rest = '';
    for (const piece of pieces) {
      const text = rest + piece.toString('latin1');
      let i = 0;
      for (let end = text.indexOf('\n'); end >= 0; i = end + 1, end = text.indexOf('\n', i)) {
        const kind = text.charCodeAt(i);
        if (kind === 0x43 /* C */) {
          const sp = text.lastIndexOf(' ', end);
          if (sp <= i + 2) throw new Error(`a malformed chain line from the helper: ${JSON.stringify(text.slice(i, end))}`);
          chain = text.slice(i + 2, sp);
          owned = counter.chain(chain, Number(text.slice(sp + 1, end)));
        } else if (kind === 0x4a /* J */) {
          if (!owned) counter.jump(chain, text.slice(i + 2, end));
        } else throw new Error(`a line the helper never writes: ${JSON.stringify(text.slice(i, end))}`);
      }
      rest = text.slice(i);
    }
    if (rest !== '') throw new Error(`the helper's answer ends in the middle of a line: ${JSON.stringify(rest)}`);
    tables.set(table, counter.result());
  }
  return { kind: 'rules', source: 'getsockopt', tables };
}

/** countChainsXtables reads a request's counts through an open helper. */
export async function countChainsXtables<T>(pipe: NfnlPipe, family: IPFamily, ask: IptablesCountRequest<T>): Promise<IptablesCounts<T>> {
  const answers = new Map<string, Buffer[] | null>();
  for (const table of ask.tables) answers.set(table, await pipe.xtables(family === 'IPv6' ? 6 : 4, table));
  await ask.ready;
  return readXtablesCounts(answers, ask);
}

export interface XtablesCountOptions {
  /** path: the helper (default: findNfnlPipe()); null: none. */
  path?: string | null;
  logger?: Logger;
}

/**
 * countChainsOverXtables starts the helper for one read and counts through
 * it; null when there is no helper, it does not start, or it is an older
 * build without the request (the caller reads iptables-legacy-save then).
 */
export async function countChainsOverXtables<T>(family: IPFamily, ask: IptablesCountRequest<T>, opts: XtablesCountOptions = {}): Promise<IptablesCounts<T> | null> {
  const path = opts.path === undefined ? findNfnlPipe() : opts.path;
  if (!path) return null;
  let pipe: NfnlPipe;
  try {
    pipe = await startNfnlPipe(path, { ...(opts.logger ? { logger: opts.logger } : {}) });
  } catch (err) {
    opts.logger?.warn('the nfnl-pipe helper did not start: the verification reads iptables-legacy-save instead', { path, err: err instanceof Error ? err.message : String(err) });
    return null;
  }
  try {
    return await countChainsXtables(pipe, family, ask);
  } catch (err) {
    // An older helper answers EINVAL to a request it does not know; any failure: the text reader counts instead.
    opts.logger?.warn('reading the tables through the nfnl-pipe helper failed: the verification reads iptables-legacy-save instead', { err: err instanceof Error ? err.message : String(err) });
    return null;
  } finally {
    pipe.close();
  }
}

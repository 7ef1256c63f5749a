import type { KernelTables } from '../kernel-view.ts';
import type { Yield } from '../yield.ts';

/** YIELD_EVERY: rule lines written between two turns of the event loop. */
const YIELD_EVERY = 5_000;

/**
 * iptablesSaveText renders tables as `iptables-save` lists them (no
 * counters), the given tables in that order (all of them when null). At
 * 10,000 Services × 10 endpoints that is ~400,000 lines (34 MB): it pauses
 * every YIELD_EVERY lines, so /livez and the syncs keep their turns, and
 * returns the text in pieces of that many lines, which a download sends one
 * by one (encoding 34 MB for the socket at once is a long stop too).
 */
export async function iptablesSaveText(tables: KernelTables, names: readonly string[] | null, pause: Yield): Promise<string[]> {
  // Joined a chunk at a time: one join of 400,000 lines would be one long stop of the event loop.
  const pieces: string[] = [];
  let out: string[] = [];
  // Chain lines count as lines too: a nat table at that size declares 130,000 chains.
  const flush = async () => {
    pieces.push(out.join('\n'));
    out = [];
    await pause();
  };
  for (const name of names ?? [...tables.tables.keys()]) {
    const t = tables.tables.get(name);
    if (!t) continue;
    out.push(`*${name}`);
    for (const c of t.chains.values()) {
      out.push(`:${c.name} ${c.policy ?? '-'} [${c.packets}:${c.bytes}]`);
      if (out.length >= YIELD_EVERY) await flush();
    }
    for (const c of t.chains.values()) {
      for (const r of c.rules) {
        out.push(r.spec === '' ? `-A ${c.name}` : `-A ${c.name} ${r.spec}`);
        if (out.length >= YIELD_EVERY) await flush();
      }
    }
    out.push('COMMIT');
  }
  if (out.length) pieces.push(out.join('\n'));
  return pieces.map((p) => `${p}\n`);
}

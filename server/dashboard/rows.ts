import { ruleCountOf, specAtOf, type KernelChain, type KernelTable } from './kernel-view.ts';
import type { DriftKind, Row } from './protocol.ts';
import { noYield, type Yield } from './yield.ts';

/** YIELD_EVERY: rules looked at between two turns of the event loop. */
const YIELD_EVERY = 20_000;

export interface RowFilter {
  /** q: case-insensitive text; a chain whose name matches shows whole, otherwise only matching rules. */
  readonly q?: string;
  /** drift: show only chains with drift findings (keyed "table/chain"). */
  readonly driftOnly?: boolean;
}

/**
 * TableRows is one table as the Rules page's lines: a header per chain, then
 * its rules. The lines are not materialised: an index of (chain, rule) pairs
 * in two Int32Arrays maps a line number to its chain and rule, so a 300,000
 * rule table costs a few MB and any page of it is built on request.
 */
export class TableRows {
  readonly table: KernelTable;
  readonly #chains: readonly KernelChain[];
  readonly #chainIdx: Int32Array;
  readonly #ruleIdx: Int32Array;
  readonly #chainRow: Map<string, number>;
  readonly #drift: ReadonlyMap<string, DriftKind>;

  /**
   * build indexes a table's lines under a filter. A search walks every rule
   * (300,000 at 10,000 Services × 10 endpoints): it pauses every
   * YIELD_EVERY rules, so /livez and the syncs keep their turns.
   */
  static async build(table: KernelTable, drift: ReadonlyMap<string, DriftKind>, filter: RowFilter = {}, pause: Yield = noYield): Promise<TableRows> {
    // Only the chains shown are kept: a table may hand out a view per chain (iptables' ChainTable), and a
    // search over 130,000 chains that kept them all made 130,000 objects per search in one go.
    const chains: KernelChain[] = [];
    const q = filter.q?.trim().toLowerCase() ?? '';
    const chainIdx: number[] = [];
    const ruleIdx: number[] = [];
    const chainRow = new Map<string, number>();
    let walked = 0;
    for (const c of table.chains.values()) {
      walked += ruleCountOf(c) + 1;
      if (walked >= YIELD_EVERY) {
        walked = 0;
        await pause();
      }
      if (filter.driftOnly && !drift.has(`${table.name}/${c.name}`)) continue;
      const whole = q === '' || c.name.toLowerCase().includes(q);
      const matching: number[] = [];
      // Read spec by spec: building every chain's rule objects for one search is garbage.
      if (!whole) for (let ri = 0, n = ruleCountOf(c); ri < n; ri++) if (specAtOf(c, ri).toLowerCase().includes(q)) matching.push(ri);
      if (!whole && matching.length === 0) continue;
      const ci = chains.push(c) - 1;
      chainRow.set(c.name, chainIdx.length);
      chainIdx.push(ci);
      ruleIdx.push(-1);
      if (whole) {
        for (let ri = 0, n = ruleCountOf(c); ri < n; ri++) {
          chainIdx.push(ci);
          ruleIdx.push(ri);
        }
      } else {
        for (const ri of matching) {
          chainIdx.push(ci);
          ruleIdx.push(ri);
        }
      }
    }
    return new TableRows(table, drift, chains, Int32Array.from(chainIdx), Int32Array.from(ruleIdx), chainRow);
  }

  private constructor(table: KernelTable, drift: ReadonlyMap<string, DriftKind>, chains: readonly KernelChain[], chainIdx: Int32Array, ruleIdx: Int32Array, chainRow: Map<string, number>) {
    this.table = table;
    this.#drift = drift;
    this.#chains = chains;
    this.#chainIdx = chainIdx;
    this.#ruleIdx = ruleIdx;
    this.#chainRow = chainRow;
  }

  get total(): number {
    return this.#chainIdx.length;
  }

  /** chainRow is the line of a chain's header, or -1 when the chain is not in this view. */
  chainRow(name: string): number {
    return this.#chainRow.get(name) ?? -1;
  }

  page(offset: number, limit: number): Row[] {
    const out: Row[] = [];
    const end = Math.min(this.total, offset + limit);
    for (let i = Math.max(0, offset); i < end; i++) out.push(this.row(i));
    return out;
  }

  row(i: number): Row {
    const c = this.#chains[this.#chainIdx[i]];
    const drift = this.#drift.get(`${this.table.name}/${c.name}`);
    const ri = this.#ruleIdx[i];
    if (ri < 0) return { t: 'c', chain: c.name, policy: c.policy, packets: c.packets, bytes: c.bytes, rules: ruleCountOf(c), ...(drift ? { drift } : {}), ...(c.ipvs ? { ipvs: c.ipvs } : {}) };
    const r = c.rules[ri];
    return { t: 'r', chain: c.name, i: ri, spec: r.spec, target: r.target, packets: r.packets, bytes: r.bytes, ...(r.ipvs ? { ipvs: r.ipvs } : {}) };
  }
}

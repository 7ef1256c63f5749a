import type { KernelChain, KernelTable, KernelTables } from '../dashboard/kernel-view.ts';
import { familyTable } from '../dashboard/family-view.ts';
import type { IPFamily } from '../net/ip.ts';

/**
 * TraceTables is one IP family's part of a kernel read: the dashboard names
 * the IPv6 family's own tables "ip6-nat", "ip6-kube-proxy" (family-view.ts),
 * while IPVS mode's virtual servers, ipsets and addresses are one table for
 * both. Steps carry the dashboard's name, so each links to the Rules page.
 */
export class TraceTables {
  readonly read: KernelTables;
  readonly family: IPFamily;
  readonly #shared: ReadonlySet<string>;

  constructor(read: KernelTables, family: IPFamily, shared: readonly string[] = []) {
    this.read = read;
    this.family = family;
    this.#shared = new Set(shared);
  }

  /** name is a table's dashboard name in this family ("nat" → "ip6-nat" for IPv6). */
  name(table: string): string {
    return this.#shared.has(table) ? table : familyTable(table, this.family);
  }

  table(table: string): KernelTable | undefined {
    return this.read.tables.get(this.name(table));
  }

  chain(table: string, chain: string): KernelChain | undefined {
    return this.table(table)?.chains.get(chain);
  }
}

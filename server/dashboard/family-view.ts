import type { IPFamily } from '../net/ip.ts';
import type { BackendSyncResult } from '../proxy/backend.ts';
import type { Endpoint } from '../proxy/endpoint.ts';
import type { ServicePort } from '../proxy/service-port.ts';
import type { SyncRecord } from '../proxy/sync-loop.ts';
import type { CategorizedEndpoints } from '../proxy/topology.ts';
import { portFamily, splitPortId } from './family-model.ts';
import {
  kernelTables,
  type KernelChain,
  type KernelRule,
  type KernelTable,
  type KernelTables,
  type KernelViewProvider,
  type RequiredRule,
  type RestoreInput,
  type ServicePortObjects,
} from './kernel-view.ts';

/**
 * The dashboard's kernel view of a dual-stack node: one provider per IP
 * family (each family's proxier writes its own kernel objects), shown as one
 * set of tables. The IPv6 family's own tables are named "ip6-<table>"
 * (ip6-nat, ip6-filter: what ip6tables holds), so the Rules page lists
 * iptables and ip6tables side by side. Tables the families share (IPVS mode's
 * virtual servers, ipsets and kube-ipvs0 addresses live in one kernel table
 * for both) are read once and hold both families' objects.
 */

const IPV6_TABLE_PREFIX = 'ip6-';

/** familyTable is a family's table as the dashboard names it ("nat" / "ip6-nat"). */
export function familyTable(table: string, family: IPFamily): string {
  return family === 'IPv6' ? IPV6_TABLE_PREFIX + table : table;
}

/** tableFamily reads a dashboard table name back into its family and the family's own name. */
export function tableFamily(table: string): { family: IPFamily; table: string } {
  return table.startsWith(IPV6_TABLE_PREFIX) ? { family: 'IPv6', table: table.slice(IPV6_TABLE_PREFIX.length) } : { family: 'IPv4', table };
}

export interface FamilyViewPart {
  readonly family: IPFamily;
  readonly provider: KernelViewProvider;
}

/**
 * FamilyKernelView joins the providers of each family (the primary first).
 * sharedTables are tables every family's provider lists whole from one
 * kernel object (read from the primary only; what each family wrote into them
 * is joined chain by chain).
 */
export class FamilyKernelView implements KernelViewProvider {
  readonly kind: KernelViewProvider['kind'];
  readonly simulated: boolean;
  readonly #parts: readonly FamilyViewPart[];
  readonly #shared: ReadonlySet<string>;

  constructor(parts: readonly FamilyViewPart[], sharedTables: readonly string[] = []) {
    if (parts.length === 0) throw new Error('FamilyKernelView needs a provider');
    this.#parts = parts;
    this.#shared = new Set(sharedTables);
    this.kind = parts[0].provider.kind;
    this.simulated = parts[0].provider.simulated;
  }

  #of(family: IPFamily): KernelViewProvider {
    return (this.#parts.find((p) => p.family === family) ?? this.#parts[0]).provider;
  }

  /** #join puts each family's tables under its dashboard name; shared tables come from the primary (read) or are merged (intended). */
  #join(per: readonly (KernelTables | null)[], mergeShared: boolean): KernelTables {
    const tables = new Map<string, KernelTable>();
    per.forEach((t, i) => {
      if (!t) return;
      const family = this.#parts[i].family;
      for (const [name, table] of t.tables) {
        if (this.#shared.has(name)) {
          const have = tables.get(name);
          if (!have) tables.set(name, table);
          else if (mergeShared) tables.set(name, mergeTables(have, table));
          continue;
        }
        const shown = familyTable(name, family);
        tables.set(shown, { name: shown, chains: table.chains });
      }
    });
    return kernelTables(tables);
  }

  async read(): Promise<KernelTables> {
    return this.#join(await Promise.all(this.#parts.map((p) => p.provider.read())), false);
  }

  async intended(): Promise<KernelTables | null> {
    const per = await Promise.all(this.#parts.map((p) => p.provider.intended()));
    return per.every((t) => t === null) ? null : this.#join(per, true);
  }

  intendedVersion(): number {
    // Each family's version only grows: their sum changes whenever one does.
    return this.#parts.reduce((n, p) => n + p.provider.intendedVersion(), 0);
  }

  noteSync(record: SyncRecord, result: BackendSyncResult): void {
    this.#of(record.family).noteSync(record, result);
  }

  noteCleanup(): void {
    for (const p of this.#parts) p.provider.noteCleanup();
  }

  release(): void {
    for (const p of this.#parts) p.provider.release();
  }

  ruleKey(table: string, rule: KernelRule): string {
    const t = tableFamily(table);
    return this.#of(t.family).ruleKey(t.table, rule);
  }

  ownsChain(table: string, chain: string): boolean {
    if (this.#shared.has(table)) return this.#parts.some((p) => p.provider.ownsChain(table, chain));
    const t = tableFamily(table);
    return this.#of(t.family).ownsChain(t.table, chain);
  }

  requiredRules(): readonly RequiredRule[] {
    return this.#parts.flatMap((p) => p.provider.requiredRules().map((r) => ({ ...r, table: this.#shared.has(r.table) ? r.table : familyTable(r.table, p.family) })));
  }

  settingsKey(table: string, chain: KernelChain): string | null {
    const t = this.#shared.has(table) ? { family: 'IPv4' as const, table } : tableFamily(table);
    return this.#of(t.family).settingsKey?.(t.table, chain) ?? null;
  }

  servicePort(sp: ServicePort, endpoints: readonly Endpoint[], categorized: CategorizedEndpoints): ServicePortObjects {
    const family = portFamily(sp);
    // The family's provider knows the port by its proxier's id (without the dashboard's "@IPv6").
    const own = splitPortId(sp.id).id === sp.id ? sp : { ...sp, id: splitPortId(sp.id).id };
    const objects = this.#of(family).servicePort(own, endpoints, categorized);
    const shown = (table: string) => (this.#shared.has(table) ? table : familyTable(table, family));
    return {
      owned: objects.owned.map((o) => ({ ...o, table: shown(o.table) })),
      entryChains: objects.entryChains.map((e) => ({ ...e, table: shown(e.table) })),
      isEntryRule: (r) => objects.isEntryRule(r),
      flows: objects.flows,
      endpointObject: (key) => objects.endpointObject(key),
    };
  }

  lastInput(family?: IPFamily): RestoreInput | null {
    return latest(this.#parts.filter((p) => !family || p.family === family).map((p) => p.provider.lastInput()));
  }

  lastFailedInput(family?: IPFamily): RestoreInput | null {
    return latest(this.#parts.filter((p) => !family || p.family === family).map((p) => p.provider.lastFailedInput()));
  }

  async formatIntended(tables: KernelTables): Promise<string[]> {
    // Each family's part in its own restore format, the families one after the other.
    const out: string[] = [];
    for (const p of this.#parts) {
      const own = new Map<string, KernelTable>();
      for (const [name, t] of tables.tables) {
        const f = this.#shared.has(name) ? { family: this.#parts[0].family, table: name } : tableFamily(name);
        if (f.family === p.family) own.set(f.table, { name: f.table, chains: t.chains });
      }
      if (this.#parts.length > 1) out.push(`# ${p.family}\n`);
      out.push(...(await p.provider.formatIntended(kernelTables(own))));
    }
    return out;
  }
}

/** mergeTables joins what two families wrote into one shared table (a chain of both gets both's rules). */
function mergeTables(a: KernelTable, b: KernelTable): KernelTable {
  const chains = new Map(a.chains);
  for (const [name, c] of b.chains) {
    const have = chains.get(name);
    chains.set(name, have ? { ...have, rules: [...have.rules, ...c.rules] } : c);
  }
  return { name: a.name, chains };
}

function latest(inputs: readonly (RestoreInput | null)[]): RestoreInput | null {
  let best: RestoreInput | null = null;
  for (const i of inputs) if (i && (!best || i.at > best.at)) best = i;
  return best;
}

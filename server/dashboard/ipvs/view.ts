import { PackedText } from '../packed-text.ts';
import type { Clock } from '../../clock.ts';
import { DUMMY_DEVICE, FILTER_CHAINS, IPSETS, JUMP_RULES, NAT_CHAINS, setName, type IpvsIntent, type IpvsRunners } from '../../proxy/ipvs/index.ts';
import { isServiceChainName, KUBE_EXTERNAL_SERVICES, KUBE_NODEPORTS, KUBE_SERVICES } from '../../proxy/xtables/chain-names.ts';
import type { BackendSyncResult } from '../../proxy/backend.ts';
import type { Endpoint } from '../../proxy/endpoint.ts';
import type { ServicePort } from '../../proxy/service-port.ts';
import type { SyncRecord } from '../../proxy/sync-loop.ts';
import type { CategorizedEndpoints } from '../../proxy/topology.ts';
import { IntendedIptables, readSaveOutput } from '../iptables/tables.ts';
import { iptablesRuleKey } from '../iptables/rule-key.ts';
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
} from '../kernel-view.ts';
import { yieldToEventLoop, type Yield } from '../yield.ts';
import { ipvsServicePort } from './flows.ts';
import { formatIpvsIntended } from './format.ts';
import { RateTracker } from './rates.ts';
import { addressTable, ADDRESSES_TABLE, drainIndex, IPVS_TABLE, parseVirtualServerName, plannedTables, setTable, SETS_TABLE, virtualServerTable } from './tables.ts';

/** IpvsViewSource is what the view needs of the IPVS backend (IpvsBackend satisfies it). */
export interface IpvsViewSource {
  readonly runners: IpvsRunners;
  intended(): IpvsIntent | null;
}

export interface IpvsViewOptions {
  backend: IpvsViewSource;
  /** simulated: the runners are the --dry-run simulated kernel (counters never move). */
  simulated: boolean;
  clock: Clock;
  pause?: Yield;
}

/** IPTABLES_TABLES: the iptables tables IPVS mode writes (the others are not kproxy's and are not shown). */
const IPTABLES_TABLES = ['nat', 'filter'] as const;

/** Chains an iptables-mode proxy leaves behind; IPVS mode's full syncs delete them, so one present is drift. */
const LEFTOVER: Record<string, (chain: string) => boolean> = {
  nat: (c) => c === KUBE_NODEPORTS || isServiceChainName(c),
  filter: (c) => c === KUBE_SERVICES || c === KUBE_EXTERNAL_SERVICES || c === KUBE_NODEPORTS,
};
const OWN: Record<string, ReadonlySet<string>> = { nat: new Set(NAT_CHAINS), filter: new Set(FILTER_CHAINS) };

function quoteWord(word: string): string {
  return /^[^\s"\\]+$/.test(word) ? word : `"${word.replace(/(["\\])/g, '\\$1')}"`;
}

/**
 * IpvsView is IPVS mode's KernelViewProvider. It reads the kernel as the
 * operator would (`ipvsadm -Ln --exact` for weights and connections,
 * `ipvsadm -Ln --stats --exact` for traffic, `ipset save`, `ip -j addr show`,
 * `iptables-save -c` for the nat and filter rules) and compares it with what
 * the backend planned at its last successful sync (IpvsBackend.intended(): the
 * wanted objects, the draining real servers, the nat and filter restore
 * input). Reads happen only when the dashboard asks (KernelReader's rate
 * limit); nothing here runs on a sync's path but noteSync, which keeps a
 * reference to the batch.
 */
export class IpvsView implements KernelViewProvider {
  readonly kind = 'ipvs' as const;
  readonly simulated: boolean;
  readonly #src: IpvsViewSource;
  readonly #clock: Clock;
  readonly #pause: Yield;
  readonly #rates = new RateTracker();
  readonly #iptables = new IntendedIptables();
  #iptablesText: string | null = null;
  #built: { version: number; tables: Promise<KernelTables> } | null = null;
  readonly #required: readonly RequiredRule[];
  #lastInput: RestoreInput | null = null;
  #lastFailed: RestoreInput | null = null;

  constructor(opts: IpvsViewOptions) {
    this.#src = opts.backend;
    this.simulated = opts.simulated;
    this.#clock = opts.clock;
    this.#pause = opts.pause ?? yieldToEventLoop;
    this.#required = JUMP_RULES.map((j) => ({ table: j.table, chain: j.from, spec: j.args.map(quoteWord).join(' ') }));
  }

  async read(): Promise<KernelTables> {
    const { ipvs, ipset, netlink, iptables } = this.#src.runners;
    // The two ipvsadm listings back to back, so connections and traffic describe the same moment.
    // Each runner parses its listing in one go (a quarter second at 100,000 real servers): the
    // event loop gets a turn after each, which the simulated kernel of --dry-run would not give.
    const services = await ipvs.list();
    await this.#pause();
    const stats = await ipvs.stats();
    const at = this.#clock.monotonic();
    await this.#pause();
    const sets = await ipset.save();
    const links = await netlink.show();
    const save = await iptables.save({ counters: true, background: true });
    await this.#pause();
    const tables = new Map<string, KernelTable>();
    this.#rates.begin(at);
    tables.set(IPVS_TABLE, await virtualServerTable(services, stats, this.#rates, drainIndex(this.#src.intended()?.draining ?? []), this.#pause));
    tables.set(SETS_TABLE, setTable(sets.values()));
    tables.set(ADDRESSES_TABLE, addressTable(links.get(DUMMY_DEVICE)));
    const listed = await readSaveOutput(save, this.#pause);
    for (const name of IPTABLES_TABLES) {
      const t = listed.tables.get(name);
      if (t) tables.set(name, t);
    }
    // Only a complete read becomes the base of the next read's rates.
    this.#rates.end();
    return kernelTables(tables);
  }

  intended(): Promise<KernelTables | null> {
    const p = this.#src.intended();
    if (!p) return Promise.resolve(null);
    // One build per planned version, shared by every caller (drift, Service pages, downloads).
    if (this.#built?.version !== p.version) {
      const tables = this.#build(p);
      this.#built = { version: p.version, tables };
      // A failed build is not kept: the next caller tries again.
      tables.catch(() => {
        if (this.#built?.tables === tables) this.#built = null;
      });
    }
    return this.#built!.tables;
  }

  async #build(p: IpvsIntent): Promise<KernelTables> {
    const tables = new Map<string, KernelTable>();
    for (const t of await plannedTables(p, this.#pause)) tables.set(t.name, t);
    // The nat and filter input declares every chain of the mode: applied alone it is the whole of kproxy's rules.
    if (p.iptables !== this.#iptablesText) {
      if (p.iptables) this.#iptables.accepted(p.iptables, true);
      else this.#iptables.cleared();
      this.#iptablesText = p.iptables;
    }
    const rules = await this.#iptables.tables(this.#pause);
    // An empty table still says "kproxy has nothing here": its chains left in the kernel are drift.
    for (const name of IPTABLES_TABLES) tables.set(name, rules?.tables.get(name) ?? { name, chains: new Map() });
    return kernelTables(tables);
  }

  intendedVersion(): number {
    return this.#src.intended()?.version ?? 0;
  }

  noteSync(record: SyncRecord, result: BackendSyncResult): void {
    if (result.batch === undefined) return;
    const input: RestoreInput = { seq: record.seq, at: record.finishedAt, full: result.full, body: new PackedText(result.batch) };
    if (record.ok) this.#lastInput = input;
    else this.#lastFailed = { ...input, error: record.error?.message ?? 'failed' };
  }

  noteCleanup(): void {
    // Nothing to do: the backend's cleanup() already planned an empty kernel (a new planned version).
  }

  release(): void {
    // The planned objects stay with the backend; only the dashboard's tables built from them go.
    this.#built = null;
    this.#iptables.release();
  }

  ruleKey(table: string, rule: KernelRule): string {
    return table === 'nat' || table === 'filter' ? iptablesRuleKey(rule.spec) : rule.spec;
  }

  ownsChain(table: string, chain: string): boolean {
    switch (table) {
      case IPVS_TABLE: {
        // Virtual servers kproxy would delete are its own; excluded CIDRs and the other family are not.
        const vs = parseVirtualServerName(chain);
        const p = this.#src.intended();
        return vs !== null && (p?.manages(vs.address) ?? true);
      }
      case SETS_TABLE: {
        const family = this.#src.intended()?.family ?? 'IPv4';
        return IPSETS.some((i) => setName(i.key, family) === chain);
      }
      case ADDRESSES_TABLE:
        return chain === DUMMY_DEVICE;
      default:
        return (OWN[table]?.has(chain) ?? false) || (LEFTOVER[table]?.(chain) ?? false);
    }
  }

  requiredRules(): readonly RequiredRule[] {
    return this.#required;
  }

  settingsKey(table: string, chain: KernelChain): string | null {
    return table === IPVS_TABLE || table === SETS_TABLE ? chain.policy : null;
  }

  servicePort(sp: ServicePort, _endpoints: readonly Endpoint[], _cat: CategorizedEndpoints): ServicePortObjects {
    return ipvsServicePort(sp, this.#src.intended());
  }

  lastInput(): RestoreInput | null {
    return this.#lastInput;
  }

  lastFailedInput(): RestoreInput | null {
    return this.#lastFailed;
  }

  formatIntended(tables: KernelTables): Promise<string[]> {
    return formatIpvsIntended(tables, this.#pause);
  }
}

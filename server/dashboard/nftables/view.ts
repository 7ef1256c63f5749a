import { PackedText } from '../packed-text.ts';
import type { NftTable } from '../../kernel/nft-types.ts';
import { formatTableDump } from '../../kernel/nft-script.ts';
import type { BackendSyncResult } from '../../proxy/backend.ts';
import type { Endpoint } from '../../proxy/endpoint.ts';
import { isAffinitySetName, KUBE_PROXY_TABLE, nftFamilyOf, TABLE_COMMENT, type NftablesBackend } from '../../proxy/nftables/index.ts';
import type { ServicePort } from '../../proxy/service-port.ts';
import type { SyncRecord } from '../../proxy/sync-loop.ts';
import type { CategorizedEndpoints } from '../../proxy/topology.ts';
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
import { nftServicePort } from './flows.ts';
import { isSetKey, nftKernelTable } from './tables.ts';

/** NftablesViewSource is what the view reads of one family's nftables backend. */
export type NftablesViewSource = Pick<NftablesBackend, 'runner' | 'family' | 'intended' | 'lastFailedInput'>;

export interface NftablesViewOptions {
  backend: NftablesViewSource;
  /** simulated: the runner is the --dry-run simulated kernel. */
  simulated: boolean;
  pause?: Yield;
}

/** TABLE: the dashboard's name of the kube-proxy table (family-view.ts shows the IPv6 one as "ip6-kube-proxy"). */
export const TABLE = KUBE_PROXY_TABLE;

const COUNTER_FIGURES = /(^| )counter packets \d+ bytes \d+/g;

/**
 * NftablesView is the nftables mode's KernelViewProvider for one IP family's
 * table: the kernel through `nft -j list table ip|ip6 kube-proxy` (the JSON
 * reader the proxier itself uses, kernel/nft-listing.ts, which writes rules
 * in the dialect kproxy writes, so a listed rule and a written one compare
 * as text), kproxy's intent through the proxier's intended() table (what its
 * last successful sync left), and the last accepted and refused
 * transactions. Affinity sets are shown from the kernel only: their elements
 * are clients the kernel adds as packets pass, not something kproxy writes,
 * so they are no drift.
 */
export class NftablesView implements KernelViewProvider {
  readonly kind = 'nftables' as const;
  readonly simulated: boolean;
  readonly #src: NftablesViewSource;
  readonly #pause: Yield;
  #version = 0;
  #cleared = false;
  #wanted: { version: number; table: NftTable | null } | null = null;
  #built: { version: number; tables: Promise<KernelTables> } | null = null;
  #lastInput: RestoreInput | null = null;
  #lastFailed: RestoreInput | null = null;

  constructor(opts: NftablesViewOptions) {
    this.#src = opts.backend;
    this.simulated = opts.simulated;
    this.#pause = opts.pause ?? yieldToEventLoop;
  }

  async read(): Promise<KernelTables> {
    const listed = await this.#src.runner.listTable(nftFamilyOf(this.#src.family), KUBE_PROXY_TABLE);
    const tables = new Map<string, KernelTable>();
    if (listed) tables.set(TABLE, await nftKernelTable(TABLE, listed, { pause: this.#pause }));
    return kernelTables(tables);
  }

  /** #wantedTable: the proxier's table as of this view's version (built once per version: it copies every element). */
  #wantedTable(): NftTable | null {
    if (this.#cleared) return null;
    if (this.#wanted?.version !== this.#version) this.#wanted = { version: this.#version, table: this.#src.intended() };
    return this.#wanted.table;
  }

  intended(): Promise<KernelTables | null> {
    if (this.#version === 0) return Promise.resolve(null);
    if (this.#built?.version !== this.#version) {
      const wanted = this.#wantedTable();
      const tables = (async () => {
        const t = new Map<string, KernelTable>();
        // After a cleanup the table is empty: whatever of kproxy's is still listed is drift.
        t.set(TABLE, wanted ? await nftKernelTable(TABLE, wanted, { pause: this.#pause, skipSet: isAffinitySetName }) : { name: TABLE, chains: new Map() });
        return kernelTables(t);
      })();
      this.#built = { version: this.#version, tables };
      // A failed build is not kept: the next caller tries again.
      tables.catch(() => {
        if (this.#built?.tables === tables) this.#built = null;
      });
    }
    return this.#built!.tables;
  }

  intendedVersion(): number {
    return this.#version;
  }

  noteSync(record: SyncRecord, result: BackendSyncResult): void {
    if (record.ok) {
      // The proxier's intended() moves with every successful sync, also one that wrote nothing (the first over a right table).
      this.#version++;
      this.#cleared = false;
      if (result.batch !== undefined) this.#lastInput = { seq: record.seq, at: record.finishedAt, full: result.full, body: new PackedText(result.batch) };
      return;
    }
    const failed = this.#src.lastFailedInput();
    const text = result.batch ?? failed?.input;
    if (text !== undefined) {
      this.#lastFailed = { seq: record.seq, at: record.finishedAt, full: result.full, body: new PackedText(text), error: record.error?.message ?? failed?.error.message ?? 'failed' };
    }
  }

  noteCleanup(): void {
    this.#cleared = true;
    this.#version++;
  }

  release(): void {
    this.#built = null;
    this.#wanted = null;
  }

  ruleKey(_table: string, rule: KernelRule): string {
    // Listed rules are rendered in kproxy's own dialect; only a counter's figures move on their own.
    return rule.spec.replace(COUNTER_FIGURES, '$1counter');
  }

  ownsChain(_table: string, chain: string): boolean {
    // The whole table is kproxy's (as kube-proxy's is kube-proxy's): any chain, set or map it did not write is drift,
    // except the affinity sets, whose elements the kernel keeps (see the class comment).
    return !(isSetKey(chain) && isAffinitySetName(chain.slice(1)));
  }

  requiredRules(): readonly RequiredRule[] {
    // Base chains hook the table into netfilter themselves: no rule outside it must exist.
    return [];
  }

  settingsKey(_table: string, chain: KernelChain): string | null {
    // A base chain's hook and priority, a set's type, flags and timeout (nft cannot change them in place).
    return chain.policy;
  }

  servicePort(sp: ServicePort, _endpoints: readonly Endpoint[], cat: CategorizedEndpoints): ServicePortObjects {
    return nftServicePort(TABLE, sp, cat, this.#wantedTable());
  }

  lastInput(): RestoreInput | null {
    return this.#lastInput;
  }

  lastFailedInput(): RestoreInput | null {
    return this.#lastFailed;
  }

  async formatIntended(tables: KernelTables): Promise<string[]> {
    // The file is `nft -f` input that builds the table as kproxy wrote it (what --dry-run prints too).
    const t = tables.tables.get(TABLE);
    const wanted = this.#wantedTable();
    if (!t || t.chains.size === 0 || !wanted) return [];
    await this.#pause();
    return [formatTableDump(wanted, TABLE_COMMENT)];
  }
}

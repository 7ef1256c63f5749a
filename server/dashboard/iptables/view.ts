import { PackedText } from '../packed-text.ts';
import { errorMessage } from '../../errors.ts';
import type { IptablesRunner } from '../../kernel/iptables.ts';
import { silentLogger, type Logger } from '../../log.ts';
import { ruleComment, splitArgs } from '../../kernel/iptables-save-parser.ts';
import type { BackendSyncResult } from '../../proxy/backend.ts';
import { endpointKey, type Endpoint } from '../../proxy/endpoint.ts';
import { ChainNames, isServiceChainName, KUBE_EXTERNAL_SERVICES, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL, KUBE_SERVICES, servicePortChains } from '../../proxy/xtables/chain-names.ts';
import { JUMP_RULES } from '../../proxy/xtables/jump-chains.ts';
import type { ServicePort } from '../../proxy/service-port.ts';
import type { SyncRecord } from '../../proxy/sync-loop.ts';
import type { CategorizedEndpoints } from '../../proxy/topology.ts';
import type { KernelRule, KernelTables, KernelViewProvider, OwnedChain, RequiredRule, RestoreInput, ServicePortObjects } from '../kernel-view.ts';
import type { FlowEntry } from '../protocol.ts';
import { yieldToEventLoop, type Yield } from '../yield.ts';
import { iptablesRuleKey } from './rule-key.ts';
import { iptablesSaveText } from './save-text.ts';
import { IntendedIptables, readSaveOutput } from './tables.ts';

export interface IptablesViewOptions {
  runner: IptablesRunner;
  /** simulated: the runner is the --dry-run simulated kernel. */
  simulated: boolean;
  pause?: Yield;
  logger?: Logger;
}

/** MAX_PENDING_BYTES: partial restore inputs kept as they came before they are folded into one text. */
const MAX_PENDING_BYTES = 16 * 1024 * 1024;

/** quoteWord renders one rule word as iptables-save would (quoted when it holds a space). */
function quoteWord(word: string): string {
  return /^[^\s"\\]+$/.test(word) ? word : `"${word.replace(/(["\\])/g, '\\$1')}"`;
}

const ENTRY_CHAINS = [
  { table: 'nat', chain: KUBE_SERVICES },
  { table: 'nat', chain: KUBE_NODEPORTS },
  { table: 'filter', chain: KUBE_SERVICES },
  { table: 'filter', chain: KUBE_EXTERNAL_SERVICES },
  { table: 'filter', chain: KUBE_PROXY_FIREWALL },
  { table: 'filter', chain: KUBE_NODEPORTS },
] as const;

/**
 * IptablesView is the iptables mode's KernelViewProvider: the kernel through
 * `iptables-save -c`, kproxy's intent through the restore inputs it wrote, and
 * each service port's chains named as proxy/iptables/rules.ts names them.
 */
export class IptablesView implements KernelViewProvider {
  readonly kind = 'iptables' as const;
  readonly simulated: boolean;
  readonly #runner: IptablesRunner;
  readonly #pause: Yield;
  readonly #log: Logger;
  readonly #intended = new IntendedIptables();
  readonly #names = new ChainNames();
  readonly #required: readonly RequiredRule[];
  #lastInput: RestoreInput | null = null;
  #lastFailed: RestoreInput | null = null;

  constructor(opts: IptablesViewOptions) {
    this.#runner = opts.runner;
    this.simulated = opts.simulated;
    this.#pause = opts.pause ?? yieldToEventLoop;
    this.#log = opts.logger ?? silentLogger;
    this.#required = JUMP_RULES.map((j) => ({ table: j.table, chain: j.from, spec: j.args.map(quoteWord).join(' ') }));
  }

  async read(): Promise<KernelTables> {
    return readSaveOutput(await this.#runner.save({ counters: true, background: true }), this.#pause);
  }

  intended(): Promise<KernelTables | null> {
    return this.#intended.tables(this.#pause);
  }

  intendedVersion(): number {
    return this.#intended.version;
  }

  noteSync(record: SyncRecord, result: BackendSyncResult): void {
    if (result.batch === undefined) return;
    const body = new PackedText(result.batch);
    const input: RestoreInput = { seq: record.seq, at: record.finishedAt, full: result.full, body };
    if (record.ok) {
      // A full input is the record's new base: the same PackedText, one copy for both.
      this.#intended.accepted(result.batch, result.full, body);
      // Partial inputs pile up between full syncs: fold them into one text, off the sync's path.
      if (this.#intended.partialBytes > MAX_PENDING_BYTES) {
        this.#intended.compact(this.#pause).catch((err) => {
          // Only drift and the "as written" views suffer; the next full sync starts the record over.
          this.#log.error("folding restore inputs into the dashboard's record failed", { err: errorMessage(err) });
        });
      }
      // Names of services gone since the previous full sync fall out of the memo.
      if (result.full) this.#names.rotate();
      this.#lastInput = input;
    } else {
      this.#lastFailed = { ...input, error: record.error?.message ?? 'failed' };
    }
  }

  noteCleanup(): void {
    this.#intended.cleared();
  }

  release(): void {
    this.#intended.release();
  }

  /** holdsIntended: what kproxy wrote is parsed in memory (not released). */
  get holdsIntended(): boolean {
    return this.#intended.hasTables;
  }

  ruleKey(_table: string, rule: KernelRule): string {
    return iptablesRuleKey(rule.spec);
  }

  ownsChain(_table: string, chain: string): boolean {
    return isServiceChainName(chain);
  }

  requiredRules(): readonly RequiredRule[] {
    return this.#required;
  }

  lastInput(): RestoreInput | null {
    return this.#lastInput;
  }

  lastFailedInput(): RestoreInput | null {
    return this.#lastFailed;
  }

  formatIntended(tables: KernelTables): Promise<string[]> {
    return iptablesSaveText(tables, null, this.#pause);
  }

  servicePort(sp: ServicePort, _endpoints: readonly Endpoint[], cat: CategorizedEndpoints): ServicePortObjects {
    const protocol = sp.protocol.toLowerCase();
    const chains = servicePortChains(this.#names, sp.name, protocol);
    const { hasAny } = cat;
    const internalChain = sp.internalPolicyLocal ? chains.local : chains.cluster;
    const externalPolicyChain = sp.externalPolicyLocal ? chains.local : chains.cluster;
    const hasInternal = hasAny && (!sp.internalPolicyLocal || cat.local.length > 0);
    const hasExternal = hasAny && (!sp.externalPolicyLocal || cat.local.length > 0);
    const usesFW = hasAny && sp.loadBalancerVIPs.length > 0 && sp.loadBalancerSourceRanges.length > 0;
    const proto = sp.protocol;
    const noEndpoints = 'no ready endpoints anywhere: REJECTed in filter KUBE-SERVICES / KUBE-EXTERNAL-SERVICES';
    const noLocal = (policy: string) => `${policy} Local and no endpoint on this node: DROPped`;

    const flows: FlowEntry[] = [];
    const external = (kind: FlowEntry['kind'], address: string, entry: string[], note?: string) => {
      const policy = sp.externalPolicyLocal ? 'Local' : 'Cluster';
      if (!hasAny) flows.push({ kind, address, path: [KUBE_EXTERNAL_SERVICES], policy, outcome: 'reject', note: noEndpoints });
      else if (!hasExternal)
        flows.push({ kind, address, path: [...entry, chains.external], policy, outcome: 'drop', note: `${noLocal('externalTrafficPolicy')}; pods and the node itself still reach every endpoint` });
      else flows.push({ kind, address, path: [...entry, chains.external, externalPolicyChain], policy, outcome: 'endpoints', ...(note ? { note } : {}) });
    };

    const internalPolicy = sp.internalPolicyLocal ? 'Local' : 'Cluster';
    const clusterAddress = `${endpointKey(sp.clusterIP, sp.port)}/${proto}`;
    if (!hasAny) flows.push({ kind: 'clusterIP', address: clusterAddress, path: [KUBE_SERVICES], policy: internalPolicy, outcome: 'reject', note: noEndpoints });
    else if (!hasInternal) flows.push({ kind: 'clusterIP', address: clusterAddress, path: [KUBE_SERVICES], policy: internalPolicy, outcome: 'drop', note: noLocal('internalTrafficPolicy') });
    else flows.push({ kind: 'clusterIP', address: clusterAddress, path: [KUBE_SERVICES, internalChain], policy: internalPolicy, outcome: 'endpoints' });
    if (sp.nodePort) external('nodePort', `node:${sp.nodePort}/${proto}`, [KUBE_SERVICES, KUBE_NODEPORTS]);
    for (const ip of sp.externalIPs) external('externalIP', `${endpointKey(ip, sp.port)}/${proto}`, [KUBE_SERVICES]);
    for (const ip of sp.loadBalancerVIPs) {
      const ranges = sp.loadBalancerSourceRanges.join(', ');
      external(
        'loadBalancerIP',
        `${endpointKey(ip, sp.port)}/${proto}`,
        usesFW ? [KUBE_SERVICES, chains.firewall] : [KUBE_SERVICES],
        usesFW ? `only from ${ranges}; other sources are dropped by KUBE-PROXY-FIREWALL` : undefined,
      );
    }

    const owned: OwnedChain[] = [];
    if (usesFW) owned.push({ table: 'nat', chain: chains.firewall, role: 'firewall' });
    owned.push({ table: 'nat', chain: chains.external, role: 'external' });
    owned.push({ table: 'nat', chain: chains.cluster, role: 'service' });
    owned.push({ table: 'nat', chain: chains.local, role: 'local' });
    const epChains = new Map<string, string>();
    for (const ep of cat.allReachable) {
      const c = this.#names.endpointChain(sp.name, protocol, ep.key);
      epChains.set(ep.key, c);
      owned.push({ table: 'nat', chain: c, role: 'endpoint' });
    }
    const name = sp.name;
    return {
      owned,
      entryChains: ENTRY_CHAINS,
      isEntryRule: (rule) => {
        if (!rule.spec.includes(name)) return false;
        let c: string | null;
        try {
          c = ruleComment(splitArgs(rule.spec));
        } catch {
          return false; // unbalanced quotes: not a rule kproxy wrote
        }
        return c !== null && (c === name || c.startsWith(name + ' '));
      },
      flows,
      endpointObject: (key) => epChains.get(key) ?? null,
    };
  }
}

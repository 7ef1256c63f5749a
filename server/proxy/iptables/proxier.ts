import type { Clock } from '../../clock.ts';
import { NODE_PORT_ADDRESSES_PRIMARY } from '../../config/modes.ts';
import type { ProxyConfig } from '../../config/types.ts';
import { errorMessage } from '../../errors.ts';
import type { IptablesRunner } from '../../kernel/iptables.ts';
import { chainNames, isBuiltinChain, parseIptablesSave, type IptablesDump } from '../../kernel/iptables-save-parser.ts';
import type { NetInterfaces } from '../../kernel/netif.ts';
import { ensureSysctl, sysctlInt, type Sysctl } from '../../kernel/sysctl.ts';
import type { Logger } from '../../log.ts';
import type { Backend, BackendSyncInput, BackendSyncResult, CleanupResult } from '../backend.ts';
import { skippedVerification, type SyncVerification } from '../sync-verify.ts';
import type { RulesWrittenReport } from '../metrics/kube-proxy-metrics.ts';
import { FirstSyncHousekeeping } from '../first-sync-housekeeping.ts';
import type { IPFamily } from '../../net/ip.ts';
import { localDetectorFor } from '../local-detector.ts';
import { NodePortAddresses } from '../node-port-addresses.ts';
import { nodeIPOf } from '../node-info.ts';
import type { StateCheckout } from '../proxy-state.ts';
import { buildServicePort, ServicePortCache, type ServicePortBuild } from '../service-port-cache.ts';
import type { ServicePort } from '../service-port.ts';
import { SkippedServicePorts } from '../skipped-service-ports.ts';
import { SyncEnvelope, type FailedInput, type SyncRun, type SyncWritten } from '../sync-envelope.ts';
import { CANARY_TABLES, startCanaryMonitor } from '../xtables/canary-monitor.ts';
import { ChainNames, isServiceChainName, KUBE_PROXY_CANARY } from '../xtables/chain-names.ts';
import { cleanupIptables } from '../xtables/cleanup.ts';
import { ensureJumpRules, JUMP_RULES, jumpRuleLines } from '../xtables/jump-chains.ts';
import { describeRestoreFailure } from '../xtables/restore-failure.ts';
import { chainLine, LineBuffer, ProbabilityCache } from '../xtables/restore-writer.ts';
import { buildFixedRules } from './fixed-rules.ts';
import { FixedChainDiff } from './fixed-chain-diff.ts';
import { applyDiff, countedChains, fullFilterPart, fullNatShared, natTablePart, partialShared, splitEndpointChains, type ChainLengths, type FullSyncPrep } from './restore-text.ts';
import { masqueradeMark } from '../masquerade-mark.ts';
import { buildServicePortRules, contextKey, LARGE_CLUSTER_ENDPOINTS, type BuildContext, type ServicePortRules } from './rules.ts';
import { verifyChains, writtenChains } from '../xtables/verify.ts';

export const SYSCTL_ROUTE_LOCALNET = 'net/ipv4/conf/all/route_localnet';
export const SYSCTL_TCP_BE_LIBERAL = 'net/netfilter/nf_conntrack_tcp_be_liberal';

/** NfacctRules: which of kube-proxy's nfacct counters the rules may name. */
export interface NfacctRules {
  readonly ctStateInvalid: boolean;
  readonly localhostNodePorts: boolean;
}

export interface IptablesBackendOptions {
  config: ProxyConfig;
  nodeName: string;
  family: IPFamily;
  runner: IptablesRunner;
  netif: NetInterfaces;
  sysctl: Sysctl;
  clock: Clock;
  logger: Logger;
  /** cleanup removes kproxy's iptables objects everywhere (see cleanup.ts); default: this runner's only. */
  cleanup?: () => Promise<CleanupResult>;
  /**
   * afterFirstSync runs once, after the first successful sync (host.ts: the
   * nftables mode's tables are removed then, when this mode's rules serve).
   */
  afterFirstSync?: () => Promise<unknown>;
  /** canaryIntervalMs: how often watchTampering polls the canary chain; default 1000. */
  canaryIntervalMs?: number;
  /**
   * nfacct: which nfacct counters exist, so kube-proxy's two nfacct rules are
   * written; a function is read at each sync (after prepare made them); default none.
   */
  nfacct?: NfacctRules | (() => NfacctRules);
  /**
   * prepare makes the host objects the mode needs before its first sync
   * (host.ts: the nfacct counters), run first by init: never at construction,
   * so `--once` touches nothing before its source synced.
   */
  prepare?: () => Promise<void>;
  /**
   * rulesPerCommit splits the service chains of a big nat rewrite into several
   * COMMITs of about this many rules (still one iptables-restore). Default:
   * NFT_RULES_PER_COMMIT for the nft flavour, no split for legacy (see below).
   */
  rulesPerCommit?: number;
  /**
   * inPlaceEdits: a partial sync edits a shared chain (KUBE-SERVICES...) with
   * -D/-I when few of its rules changed, instead of rewriting it whole as
   * kube-proxy does (see fixed-chain-diff.ts). Default true.
   */
  inPlaceEdits?: boolean;
}

/**
 * NFT_RULES_PER_COMMIT: iptables-nft-restore --noflush (1.8.9) slows down with
 * the square of the rules in one COMMIT: 64k nat rules take 24 s in one block
 * and 2.8 s in blocks of 5000 (measured in a network namespace). Legacy
 * iptables re-uploads the whole table at every COMMIT, so it is never split.
 */
export const NFT_RULES_PER_COMMIT = 5000;

/** IptablesBackend is the iptables Backend plus what the daemon and dashboard read from it. */
export interface IptablesBackend extends Backend {
  /** sync reports, after a partial sync, the rules it wrote per table (kubeproxy_sync_proxy_rules_iptables_last). */
  sync(input: BackendSyncInput): Promise<BackendSyncResult & RulesWrittenReport>;
  readonly runner: IptablesRunner;
  /** lastFailedInput: the restore input of the last sync that failed, kept for the dashboard's download. */
  lastFailedInput(): FailedInput | null;
}

/** CachedRules: a service port's rules as the cache keeps them; slim: rulesText and chainsText were dropped after the sync (see slimCache), a write rebuilds them. */
type CachedRules = ServicePortRules & { readonly slim?: boolean };

type CacheEntry = ServicePortBuild<CachedRules>;

/**
 * slimCache drops, from the entries this sync built, the text of the service
 * port's own chains: the bulk of the rules (30 MB at 10,000 x 10, as much again
 * as the restore input), needed again only to write those chains, which a
 * partial sync does only for ports it rebuilds anyway, and a full sync (hourly)
 * for every port, rebuilding them (about 0.5 s at 10,000 x 10). What partial
 * syncs read stays: the shared chains' rules, chain names, counts.
 */
function slimCache(cache: Map<string, CacheEntry>): void {
  for (const [id, e] of cache) {
    if (!e.objects || e.objects.slim) continue;
    cache.set(id, { ...e, objects: { ...e.objects, rulesText: '', chainsText: '', slim: true } });
  }
}

/** createIptablesBackend returns kube-proxy's iptables mode as a kproxy Backend. */
export function createIptablesBackend(opts: IptablesBackendOptions): IptablesBackend {
  return new IptablesProxier(opts);
}

/**
 * IptablesProxier decides what to write and when it must be everything: a
 * full sync at start, after any failure, when the build context changed, when
 * the sync loop asks (periodic, tampering, topology); otherwise a partial sync
 * that rewrites the fixed chains and only the chains of service ports whose
 * inputs changed. Rule text comes from rules.ts; all I/O goes through the runner.
 */
class IptablesProxier implements IptablesBackend {
  readonly mode = 'iptables' as const;

  get family(): IPFamily {
    return this.#o.family;
  }
  readonly runner: IptablesRunner;
  readonly #o: IptablesBackendOptions;
  readonly #log: Logger;
  readonly #names = new ChainNames();
  readonly #probabilities = new ProbabilityCache();
  readonly #localhostNodePorts: boolean;
  readonly #rulesPerCommit: number;
  readonly #inPlaceEdits: boolean;
  #chainLengths: ChainLengths = { filter: new Map(), nat: new Map() };
  #conntrackTCPLiberal = false;
  /** #cache: the last successful sync's rules per service port id. */
  readonly #cache = new ServicePortCache<CachedRules>();
  readonly #skipped: SkippedServicePorts;
  readonly #envelope: SyncEnvelope<RulesWrittenReport>;
  #idsInMapOrder: string[] = [];
  #sortedIds: string[] = [];
  /**
   * #toVerify: the last full sync's restore input, until verify() reads it
   * (the sync loop verifies right after the sync, and holds the input in the
   * sync's result meanwhile anyway): what it wrote is worked out from it then,
   * so no count per chain (111,000 at 10,000 Services x 10 endpoints) is
   * kept between syncs.
   */
  #toVerify: string | null = null;
  readonly #housekeeping: FirstSyncHousekeeping;

  constructor(opts: IptablesBackendOptions) {
    this.#o = opts;
    this.runner = opts.runner;
    this.#log = opts.logger.child('iptables');
    this.#housekeeping = new FirstSyncHousekeeping(opts.afterFirstSync, this.#log, opts.clock);
    this.#skipped = new SkippedServicePorts(this.#log);
    this.#envelope = new SyncEnvelope({
      name: 'iptables',
      clock: opts.clock,
      logger: this.#log,
      skipped: this.#skipped,
      describe: (err, run) => describeRestoreFailure(err, run.input, 'the filter and nat tables'),
    });
    this.#rulesPerCommit = opts.rulesPerCommit ?? (opts.runner.flavor === 'nft' ? NFT_RULES_PER_COMMIT : Infinity);
    this.#inPlaceEdits = opts.inPlaceEdits ?? true;
    const npa = opts.config.nodePortAddresses;
    // As kube-proxy: localhost node ports only for IPv4, and only when --nodeport-addresses
    // admits 127.0.0.0/8 ("primary" never does).
    const isPrimary = npa.length === 1 && npa[0] === NODE_PORT_ADDRESSES_PRIMARY;
    this.#localhostNodePorts = opts.family === 'IPv4' && opts.config.iptables.localhostNodePorts && !isPrimary && new NodePortAddresses(opts.family, npa).containsIPv4Loopback;
  }

  lastFailedInput(): FailedInput | null {
    return this.#envelope.lastFailedInput();
  }

  requireFullSync(): void {
    this.#envelope.requireFullSync();
  }

  /** init prepares the host's objects (prepare), sets route_localnet for localhost node ports and reads whether conntrack is liberal. */
  async init(): Promise<void> {
    await this.#o.prepare?.();
    if (this.#localhostNodePorts) {
      this.#log.info('setting route_localnet=1 so node ports answer on localhost; set iptables.localhostNodePorts=false or --nodeport-addresses without 127.0.0.0/8 to avoid it');
      await ensureSysctl(this.#o.sysctl, SYSCTL_ROUTE_LOCALNET, '1');
    }
    const liberal = await sysctlInt(this.#o.sysctl, SYSCTL_TCP_BE_LIBERAL);
    this.#conntrackTCPLiberal = liberal !== null && liberal !== 0;
    if (this.#conntrackTCPLiberal) this.#log.info('nf_conntrack_tcp_be_liberal is set: no DROP rule for INVALID packets');
  }

  watchTampering(onTampered: (reason: string) => void): () => void {
    return startCanaryMonitor({ runner: this.runner, clock: this.#o.clock, logger: this.#log, intervalMs: this.#o.canaryIntervalMs, onTampered });
  }

  async cleanup(): Promise<CleanupResult> {
    this.#toVerify = null;
    this.#envelope.requireFullSync();
    if (this.#o.cleanup) return this.#o.cleanup();
    return cleanupIptables({ runners: [this.runner], logger: this.#log });
  }

  async #context(state: StateCheckout): Promise<BuildContext> {
    const { config, family } = this.#o;
    const node = state.node;
    const npa = new NodePortAddresses(family, config.nodePortAddresses, node.addresses);
    let nodePortIPs: string[] = [];
    if (!npa.matchAll) {
      try {
        nodePortIPs = npa.nodeIPs((await this.#o.netif.addresses()).map((a) => a.address));
      } catch (err) {
        // Node ports then answer on no address until the next sync can list them (kube-proxy does the same).
        this.#log.error('cannot list host addresses for --nodeport-addresses; node ports may not work', { cidrs: npa.toString(), err: errorMessage(err) });
      }
    }
    let totalEndpoints = 0;
    for (const id of state.services.keys()) totalEndpoints += state.endpoints.get(id)?.length ?? 0;
    return {
      family,
      nodeName: this.#o.nodeName,
      zone: node.zone,
      masqueradeMark: masqueradeMark(config.iptables.masqueradeBit),
      masqueradeAll: config.iptables.masqueradeAll,
      localDetector: localDetectorFor(config, node, family),
      localhostNodePorts: this.#localhostNodePorts,
      nodePortsMatchAll: npa.matchAll,
      nodePortIPs,
      nodeIP: nodeIPOf(node, family),
      conntrackTCPLiberal: this.#conntrackTCPLiberal,
      randomFully: this.runner.hasRandomFully,
      nfacct: (typeof this.#o.nfacct === 'function' ? this.#o.nfacct() : this.#o.nfacct) ?? { ctStateInvalid: false, localhostNodePorts: false },
      largeClusterMode: totalEndpoints > LARGE_CLUSTER_ENDPOINTS,
    };
  }

  /** #orderedIds returns service port ids sorted, re-sorting only when the set of ids changed. */
  #orderedIds(services: ReadonlyMap<string, ServicePort>): string[] {
    const prev = this.#idsInMapOrder;
    let same = prev.length === services.size;
    if (same) {
      let i = 0;
      for (const id of services.keys())
        if (prev[i++] !== id) {
          same = false;
          break;
        }
    }
    if (!same) {
      this.#idsInMapOrder = [...services.keys()];
      this.#sortedIds = [...this.#idsInMapOrder].sort();
    }
    return this.#sortedIds;
  }

  /** afterSync: after a successful sync was recorded, the first one's removal of the other modes' leftovers. */
  async afterSync(): Promise<void> {
    await this.#housekeeping.afterSuccessfulSync();
  }

  /**
   * verify checks the last full sync against the kernel (verify.ts): every
   * chain its input declared holds the rules the input left in it, the chains
   * it deleted and any other service chain are gone, the canaries are there
   * and every jump rule of JUMP_RULES leads from its built-in chain. One read
   * of the kernel: nf_tables' chain use counts over netlink (nft), or
   * iptables-save counted line by line (legacy).
   */
  async verify(): Promise<SyncVerification> {
    const clock = this.#o.clock;
    const t0 = clock.monotonic();
    const text = this.#toVerify;
    this.#toVerify = null;
    if (text === null) return skippedVerification(0, 'no full sync to verify since the last verification');
    let owners: Map<string, string> | null = null;
    return verifyChains(this.runner, clock, t0, {
      written: writtenChains(
        text,
        CANARY_TABLES.map((table) => ({ table, chain: KUBE_PROXY_CANARY, rules: 0 })),
      ),
      jumps: JUMP_RULES,
      // A full sync deletes every service chain it did not write (of an earlier run, of kube-proxy).
      stale: (table, chain) => table === 'nat' && isServiceChainName(chain),
      servicePortOf: (_table, chain) => {
        if (!owners) {
          owners = new Map();
          for (const [id, e] of this.#cache.builds) for (const c of e.objects?.chains ?? []) owners.set(c, id);
        }
        return owners.get(chain);
      },
    });
  }

  sync(input: BackendSyncInput): Promise<BackendSyncResult & RulesWrittenReport> {
    // Whatever this sync does, the kernel no longer holds exactly what an earlier full sync wrote.
    this.#toVerify = null;
    return this.#envelope.run(input, (run) => this.#write(input.state, run));
  }

  async #write(state: StateCheckout, run: SyncRun<RulesWrittenReport>): Promise<SyncWritten & RulesWrittenReport> {
    const ctx = await run.io(() => this.#context(state));
    const key = contextKey(ctx);
    const full = run.decideFull(!this.#cache.sameContext(key));
    const prepared: FullSyncPrep = full ? await run.io(() => this.#prepareFullSync()) : { existingNat: new Set(), deferred: [], deferredCanaries: [] };

    const built = this.#build(state, ctx, full, prepared);
    run.sending(built.text);
    // Nothing changed (a periodic sync with no news): the kernel already holds exactly this.
    if (built.text !== '') await run.io(() => this.runner.restore(built.text));

    // Success: this sync's rules are what the kernel holds.
    slimCache(built.cache);
    this.#cache.commit(built.cache, key);
    this.#chainLengths = built.chainLengths;
    if (full) this.#names.rotate();
    if (full) this.#toVerify = built.text;
    for (const w of built.warnings) this.#log.warn(w);
    return {
      linesWritten: built.lines,
      servicesWritten: built.servicesWritten,
      rulesByTable: built.rulesByTable,
      // A full sync writes every rule kproxy owns (rulesByTable; the jumps from built-in chains a
      // fresh node gets in the same input are not kproxy's rules, as kube-proxy adds them outside
      // its restore); a partial one writes the chains that changed.
      ...(full ? {} : { rulesWrittenByTable: built.rulesWritten }),
    };
  }

  /**
   * #prepareFullSync reads the kernel once (iptables-save, every table), makes
   * sure the jump rules and canaries exist, and returns the nat chains present,
   * which is where stale service chains are found. Jumps into chains that do
   * not exist yet (a fresh node) and missing canaries are left to the restore
   * input (jump-chains.ts, deferMissing); with an unreadable listing every jump
   * is checked with -C instead.
   */
  async #prepareFullSync(): Promise<FullSyncPrep> {
    let dump: IptablesDump = { tables: new Map() };
    let listed = false;
    try {
      // Only the built-in chains' rules matter (the jump rules); of the rest, only chain names.
      dump = parseIptablesSave(await this.runner.save(), { keepRule: isBuiltinChain });
      listed = true;
    } catch (err) {
      // Jump rules are then checked one by one with -C; only stale-chain removal is lost this time.
      this.#log.error('cannot read the current rules (iptables-save); stale chains will not be deleted this sync', { err: errorMessage(err) });
    }
    const report = await ensureJumpRules(this.runner, dump, undefined, { deferMissing: listed });
    if (report.chainsCreated.length || report.rulesInserted.length || report.deferred.length) {
      this.#log.info('creating jump rules and chains', {
        chains: report.chainsCreated.join(' '),
        rules: [...report.rulesInserted, ...report.deferred.map((j) => `${j.table}/${j.from} -> ${j.to} (in the restore input)`)].join('; '),
      });
    }
    return { existingNat: chainNames(dump, 'nat'), deferred: report.deferred, deferredCanaries: report.deferredCanaries };
  }

  #build(state: StateCheckout, ctx: BuildContext, full: boolean, prepared: FullSyncPrep) {
    const existingNat = prepared.existingNat;
    const cache = new Map<string, CacheEntry>();
    const fixed = buildFixedRules(ctx);
    const key = contextKey(ctx);
    const changed = state.changedServices;
    const stale = new Set<string>();
    const writtenServices = new Set<string>();
    // Full syncs rewrite the shared chains from every service's rules; partial
    // syncs only record how the changed service ports' rules differ (see fixed-chain-diff.ts).
    const filterShared = new LineBuffer();
    const natShared = new LineBuffer();
    const filterDiff = new FixedChainDiff();
    const natDiff = new FixedChainDiff();
    let filterCount = 0;
    let natCount = 0;
    let natServiceRulesWritten = 0;
    // Service chains written in this sync, in blocks of whole service ports (see natTablePart in restore-text.ts).
    const blocks: { chains: LineBuffer; rules: LineBuffer }[] = [];
    let block = { chains: new LineBuffer(), rules: new LineBuffer() };

    for (const id of this.#orderedIds(state.services)) {
      const sp = state.services.get(id)!;
      const eps = state.endpoints.get(id);
      const prev = this.#cache.get(id);
      const needsText = full || changed.has(sp.service);
      const same = this.#cache.unchanged(id, sp, eps, key);
      const entry: CacheEntry =
        same && !(same.objects?.slim && needsText) ? same : buildServicePort(sp, eps, () => buildServicePortRules(sp, eps, ctx, this.#names, this.#probabilities, prev?.objects ?? undefined));
      cache.set(id, entry);
      const r = entry.objects;
      if (!full && prev?.objects !== r) {
        filterDiff.change(prev?.objects?.filterText ?? '', r?.filterText ?? '');
        natDiff.change(prev?.objects?.jumpsText ?? '', r?.jumpsText ?? '');
      }
      if (r === null) {
        this.#skipped.skip(id, entry.error!, 'service port skipped: its rules cannot be written safely');
        if (prev?.objects) for (const c of prev.objects.chains) stale.add(c);
        continue;
      }
      this.#skipped.programmed(id);
      if (full) {
        filterShared.writeText(r.filterText, r.filterLines);
        natShared.writeText(r.jumpsText, r.jumpsLines);
      }
      filterCount += r.filterLines;
      natCount += r.jumpsLines + r.rulesLines;
      const write = full || entry !== prev || changed.has(sp.service);
      if (write) {
        if (block.rules.lines > 0 && block.rules.lines + r.rulesLines > this.#rulesPerCommit) {
          blocks.push(block);
          block = { chains: new LineBuffer(), rules: new LineBuffer() };
        }
        if (r.rulesLines > this.#rulesPerCommit && r.chains.length > r.serviceChains) {
          // One port bigger than a commit (a Service with thousands of endpoints: 10,000 took
          // iptables-nft-restore 5 s in one commit, 2 s so): its endpoint chains go ahead in
          // blocks of their own, its service chains in the block after them.
          const split = splitEndpointChains(r, this.#rulesPerCommit);
          blocks.push(...split.endpoints);
          block.chains.writeText(split.service.chains.text(), split.service.chains.lines);
          block.rules.writeText(split.service.rules.text(), split.service.rules.lines);
        } else {
          block.chains.writeText(r.chainsText, r.chains.length);
          block.rules.writeText(r.rulesText, r.rulesLines);
        }
        natServiceRulesWritten += r.rulesLines;
        writtenServices.add(sp.service);
        if (prev?.objects && prev.objects !== r) {
          // Chains are named after their service port, so only its own former chains can go stale.
          const now = new Set(r.chains);
          for (const c of prev.objects.chains) if (!now.has(c)) stale.add(c);
        }
      }
    }
    for (const [id, prev] of this.#cache.builds) {
      if (cache.has(id) || !prev.objects) continue;
      for (const c of prev.objects.chains) stale.add(c);
      if (!full) {
        filterDiff.change(prev.objects.filterText, '');
        natDiff.change(prev.objects.jumpsText, '');
      }
    }
    if (full) {
      // A full sync also removes what it did not write itself: chains of an
      // earlier run, of kube-proxy before a take-over, or left by a failed sync.
      const active = new Set<string>();
      for (const e of cache.values()) if (e.objects) for (const c of e.objects.chains) active.add(c);
      for (const c of existingNat) if (isServiceChainName(c) && !active.has(c)) stale.add(c);
    }
    this.#skipped.forgetGone(state.services);
    if (block.chains.lines > 0) blocks.push(block);

    const partial = (diff: FixedChainDiff, lengths: ReadonlyMap<string, number>) => ({ diff, ports: cache, fixed, lengths, inPlaceEdits: this.#inPlaceEdits });
    const filter = full ? fullFilterPart(fixed, filterShared, prepared) : partialShared('filter', partial(filterDiff, this.#chainLengths.filter));
    const shared = full ? fullNatShared(fixed, natShared) : partialShared('nat', partial(natDiff, this.#chainLengths.nat));
    const sortedStale = [...stale].sort();
    const natChains = shared.chains;
    const natEnd = new LineBuffer();
    // Stale chains: declaring flushes them (their rules may jump to other stale chains), then -X.
    for (const c of sortedStale) natChains.writeLine(chainLine(c));
    if (prepared.deferredCanaries.includes('nat')) natChains.writeLine(chainLine(KUBE_PROXY_CANARY));
    for (const c of sortedStale) natEnd.writeLine(`-X ${c}`);
    natEnd.writeText(shared.tail.text(), shared.tail.lines);
    // Jumps from the built-in chains last: the chains they lead to are complete by then (fresh node).
    const natJumps = jumpRuleLines(prepared.deferred, 'nat');
    for (const l of natJumps) natEnd.writeLine(l);
    // Only "*nat": nothing in the table changes, so the table is left out of the input.
    const natEmpty = natChains.lines === 1 && shared.rules.lines === 0 && natEnd.lines === 0 && blocks.length === 0;
    natEnd.writeLine('COMMIT');
    const nat = natEmpty ? { text: '', lines: 0 } : natTablePart(blocks, natChains, shared.rules, natEnd, ctx.masqueradeMark);

    const fixedFilter = fixed.filterHead.lines + fixed.filterTail.lines;
    const fixedNat = fixed.natHead.lines + fixed.natTail.lines;
    const filterLengths = full ? countedChains(filterShared.text()) : applyDiff(this.#chainLengths.filter, filterDiff);
    const natLengths = full ? countedChains(natShared.text()) : applyDiff(this.#chainLengths.nat, natDiff);
    return {
      text: filter.text + nat.text,
      lines: filter.lines + nat.lines,
      cache,
      chainLengths: { filter: filterLengths, nat: natLengths },
      servicesWritten: writtenServices.size,
      rulesByTable: { filter: fixedFilter + filterCount, nat: fixedNat + natCount },
      rulesWritten: { filter: filter.rulesWritten, nat: shared.rulesWritten + natServiceRulesWritten + natJumps.length },
      warnings: fixed.warnings,
    };
  }
}

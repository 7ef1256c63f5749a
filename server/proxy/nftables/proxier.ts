import type { Clock } from '../../clock.ts';
import type { ProxyConfig } from '../../config/types.ts';
import { errorMessage, type KproxyError } from '../../errors.ts';
import type { NetInterfaces } from '../../kernel/netif.ts';
import { NftTransactionFailure, type NftRunner } from '../../kernel/nft.ts';
import { formatOp, formatTransaction } from '../../kernel/nft-script.ts';
import type { NftElement, NftOp, NftSet, NftTable } from '../../kernel/nft-types.ts';
import type { Logger } from '../../log.ts';
import type { Backend, BackendSyncInput, BackendSyncResult, CleanupResult } from '../backend.ts';
import { FirstSyncHousekeeping } from '../first-sync-housekeeping.ts';
import type { IPFamily } from '../../net/ip.ts';
import { masqueradeMark } from '../masquerade-mark.ts';
import { localDetectorFor } from '../local-detector.ts';
import { NODE_PORT_ADDRESSES_PRIMARY } from '../../config/modes.ts';
import { NodePortAddresses } from '../node-port-addresses.ts';
import type { StateCheckout } from '../proxy-state.ts';
import { buildServicePort, ServicePortCache, type ServicePortBuild } from '../service-port-cache.ts';
import { SkippedServicePorts } from '../skipped-service-ports.ts';
import { SyncEnvelope, type FailedInput, type SyncRun, type SyncWritten } from '../sync-envelope.ts';
import { buildFixedObjects, buildServicePortObjects, nftFamilyOf, type ChainSpec, type FixedObjects, type NftBuildContext, type ServicePortObjects } from './builder.ts';
import { cleanupNftables } from './cleanup.ts';
import { ElementIndex } from './element-index.ts';
import { AFFINITY_PREFIX, ELEMENT_SETS, isServiceChainName, KUBE_PROXY_TABLE, NODEPORT_IPS, TABLE_COMMENT, type ElementSet } from './names.ts';
import { TxPlan, type HeldChain, type HeldSet } from './plan.ts';
import { CountCheck, skippedVerification, type SyncVerification } from '../sync-verify.ts';
import { compareCounts, verifyRequest } from './verify.ts';
import { blameServicePorts } from './blame.ts';

/**
 * STALE_CHAIN_DELAY_MS: a chain that went stale is flushed at once and deleted
 * at least this much later. Before Linux 6.2 the kernel notices only a moment
 * after a map element's deletion that the chain it pointed to is unreferenced,
 * so deleting both in one transaction can fail (kube-proxy waits one second).
 */
export const STALE_CHAIN_DELAY_MS = 1000;

export interface NftablesBackendOptions {
  config: ProxyConfig;
  nodeName: string;
  family: IPFamily;
  runner: NftRunner;
  netif: NetInterfaces;
  clock: Clock;
  logger: Logger;
  /** cleanup removes what nftables mode made (see cleanup.ts); default: this family's table. */
  cleanup?: () => Promise<CleanupResult>;
  /**
   * afterFirstSync runs once, after the first successful sync (host.ts: the
   * other modes' leftovers are removed then, when the table already serves).
   */
  afterFirstSync?: () => Promise<unknown>;
}

/** NftablesBackend is the nftables Backend plus what the daemon and the dashboard read. */
export interface NftablesBackend extends Backend {
  sync(input: BackendSyncInput): Promise<BackendSyncResult & NftablesSyncReport>;
  readonly runner: NftRunner;
  readonly family: IPFamily;
  /** lastFailedInput: the transaction of the last sync that failed, kept for the dashboard and logs. */
  lastFailedInput(): FailedInput | null;
  /** intended: the table as kproxy's last successful sync left it (its own objects; affinity sets without elements); null before one. */
  intended(): NftTable | null;
}

/** NftablesSyncReport extends a sync result: stale-chain deletions nft refused during this sync. */
export interface NftablesSyncReport {
  readonly nftablesCleanupFailures?: number;
}

type CacheEntry = ServicePortBuild<ServicePortObjects>;

const EMPTY: ServicePortObjects = { id: '', service: '', chains: [], affinitySets: [], elements: [], noLocalInternal: false, noLocalExternal: false };

function heldSetOf(s: NftSet | { map: boolean; type: string; flags?: readonly string[]; timeoutSeconds?: number | null; comment?: string | null }): HeldSet {
  return { map: s.map, type: s.type, flags: s.flags ?? [], timeoutSeconds: s.timeoutSeconds ?? null, comment: s.comment ?? null };
}

function countRules(objects: ServicePortObjects | null): number {
  let n = 0;
  for (const c of objects?.chains ?? []) n += c.rules.length;
  return n;
}

/** createNftablesBackend returns kube-proxy's nftables mode as a kproxy Backend. */
export function createNftablesBackend(opts: NftablesBackendOptions): NftablesBackend {
  return new NftablesProxier(opts);
}

/**
 * NftablesProxier decides what to write and whether it must compare against
 * the kernel: a full sync (start, after a failure, a new build context, when
 * the sync loop asks) lists the table with `nft -j` and writes whatever
 * differs, nothing when all is right; a partial sync compares the changed
 * service ports' new objects with the ones it wrote last. Either way one
 * transaction. Objects come from builder.ts, the transaction order from
 * plan.ts; all I/O goes through the runner.
 */
class NftablesProxier implements NftablesBackend {
  readonly mode = 'nftables' as const;
  readonly runner: NftRunner;
  readonly family: IPFamily;
  /** #skipped: service ports left out, with why; also those whose objects the kernel refused, until they change (#leaveOutRefused). */
  readonly #skipped: SkippedServicePorts;
  readonly #envelope: SyncEnvelope<NftablesSyncReport>;
  readonly #o: NftablesBackendOptions;
  readonly #log: Logger;
  readonly #nftFamily: 'ip' | 'ip6';
  readonly #cache = new ServicePortCache<ServicePortObjects>();
  #index = new ElementIndex();
  #fixed: FixedObjects | null = null;
  /** #stale: chains flushed because nothing wants them, by the monotonic time they went stale. */
  #stale = new Map<string, number>();
  #rules = 0;
  #warned = new Set<string>();
  readonly #housekeeping: FirstSyncHousekeeping;

  constructor(opts: NftablesBackendOptions) {
    this.#o = opts;
    this.runner = opts.runner;
    this.family = opts.family;
    this.#nftFamily = nftFamilyOf(opts.family);
    this.#log = opts.logger.child('nftables');
    this.#housekeeping = new FirstSyncHousekeeping(opts.afterFirstSync, this.#log, opts.clock);
    this.#skipped = new SkippedServicePorts(this.#log);
    this.#envelope = new SyncEnvelope({
      name: 'nftables',
      clock: opts.clock,
      logger: this.#log,
      skipped: this.#skipped,
      describe: (err, run) => this.#describeFailure(err, run.lastInput),
      // The element index was updated while planning: back to what the last successful sync wrote, which
      // intended() (the dashboard's intent) reads until the next full sync rebuilds it.
      failed: () => this.#indexWritten(),
    });
  }

  lastFailedInput(): FailedInput | null {
    return this.#envelope.lastFailedInput();
  }

  requireFullSync(): void {
    this.#envelope.requireFullSync();
  }

  /** init says at start what nftables mode does not support and the configuration asks for. */
  async init(): Promise<void> {
    const npa = new NodePortAddresses(this.family, this.#nodePortAddresses(), []);
    if (this.#o.config.nodePortAddresses.length > 0 && !npa.matchAll && npa.containsIPv4Loopback) {
      this.#log.warn('--nodeport-addresses includes 127.0.0.0/8, but nftables mode does not accept node ports on localhost (as kube-proxy): they answer on the other addresses only');
    }
  }

  async cleanup(): Promise<CleanupResult> {
    this.#envelope.requireFullSync();
    if (this.#o.cleanup) return this.#o.cleanup();
    return cleanupNftables({ runner: this.runner, families: [this.#nftFamily], logger: this.#log });
  }

  /** #nodePortAddresses: nftables mode defaults to the node's primary IPs, as kube-proxy does. */
  #nodePortAddresses(): string[] {
    const v = this.#o.config.nodePortAddresses;
    return v.length ? v : [NODE_PORT_ADDRESSES_PRIMARY];
  }

  async #context(state: StateCheckout): Promise<NftBuildContext> {
    const { config, family } = this.#o;
    const node = state.node;
    const npa = new NodePortAddresses(family, this.#nodePortAddresses(), node.addresses);
    let nodePortIPs: string[] = [];
    if (!npa.matchAll) {
      try {
        nodePortIPs = npa.nodeIPs((await this.#o.netif.addresses()).map((a) => a.address));
      } catch (err) {
        // Node ports then answer on no address until the next sync can list them (kube-proxy does the same).
        this.#log.error('cannot list host addresses for --nodeport-addresses; node ports may not work', { cidrs: npa.toString(), err: errorMessage(err) });
      }
    }
    return {
      family,
      nodeName: this.#o.nodeName,
      zone: node.zone,
      masqueradeMark: masqueradeMark(config.nftables.masqueradeBit),
      masqueradeAll: config.nftables.masqueradeAll,
      localDetector: localDetectorFor(config, node, family),
      nodePortsMatchAll: npa.matchAll,
      nodePortIPs,
      nodeIP: node.addresses.find((a) => (family === 'IPv6') === a.includes(':')) ?? null,
      serviceCIDRs: (state.serviceCIDRs ?? []).filter((c: string) => (family === 'IPv6') === c.includes(':')),
    };
  }

  intended(): NftTable | null {
    if (!this.#fixed) return null;
    const chains = new Map<string, { name: string; base: null | NonNullable<ChainSpec['base']>; comment: null; rules: readonly string[] }>();
    const sets = new Map<string, NftSet>();
    const addChain = (c: ChainSpec) => chains.set(c.name, { name: c.name, base: c.base ?? null, comment: null, rules: c.rules });
    for (const c of this.#fixed.chains) addChain(c);
    for (const s of this.#fixed.sets) {
      const elements = new Map<string, NftElement>();
      const list: Iterable<NftElement> = s.name === NODEPORT_IPS ? this.#fixed.nodePortIPs.map((k) => ({ key: k, value: null, comment: null })) : this.#index.elements(s.name as ElementSet);
      for (const e of list) elements.set(e.key, e);
      sets.set(s.name, { ...heldSetOf(s), name: s.name, flags: (s.flags ?? []).filter((f) => f !== 'dynamic').sort(), elements });
    }
    for (const e of this.#cache.builds.values()) {
      for (const c of e.objects?.chains ?? []) addChain(c);
      for (const s of e.objects?.affinitySets ?? []) sets.set(s.name, { ...heldSetOf(s), name: s.name, flags: ['timeout'], elements: new Map() });
    }
    // Stale chains are in the table, empty, until they are deleted.
    for (const name of this.#stale.keys()) if (!chains.has(name)) addChain({ name, rules: [] });
    return { family: this.#nftFamily, name: KUBE_PROXY_TABLE, chains, sets };
  }

  /**
   * verify reads the table's counts (the netlink runner: one dump of the
   * chains' use counts and a few of set elements; see verify.ts) and compares
   * them with intended(), the table the last sync left.
   */
  async verify(): Promise<SyncVerification> {
    const clock = this.#o.clock;
    const t0 = clock.monotonic();
    const wanted = this.intended();
    if (!wanted) return skippedVerification(0, 'no successful sync yet');
    if (!this.runner.countTable) return skippedVerification(0, 'this nft runner cannot count a table');
    const ask = verifyRequest(wanted);
    let got;
    try {
      got = await this.runner.countTable(this.#nftFamily, KUBE_PROXY_TABLE, ask);
    } catch (err) {
      return skippedVerification(clock.monotonic() - t0, `counting the ${this.#nftFamily} ${KUBE_PROXY_TABLE} table failed: ${errorMessage(err)}`);
    }
    const check = new CountCheck();
    if (!got) check.compare(`table ${this.#nftFamily} ${KUBE_PROXY_TABLE}`, 'chains', wanted.chains.size, null);
    else {
      let owner: Map<string, string> | null = null;
      const servicePortOf = (chain: string) => {
        if (!owner) {
          owner = new Map();
          for (const [id, e] of this.#cache.builds) for (const c of e.objects?.chains ?? []) owner.set(c.name, id);
        }
        return owner.get(chain);
      };
      compareCounts(wanted, ask, got, check, servicePortOf);
    }
    return check.result(clock.monotonic() - t0);
  }

  /** afterSync: after a successful sync was recorded, the first one's removal of the other modes' leftovers. */
  async afterSync(): Promise<void> {
    await this.#housekeeping.afterSuccessfulSync();
  }

  sync(input: BackendSyncInput): Promise<BackendSyncResult & NftablesSyncReport> {
    return this.#envelope.run(input, (run) => this.#write(input.state, run));
  }

  async #write(state: StateCheckout, run: SyncRun<NftablesSyncReport>): Promise<SyncWritten & NftablesSyncReport> {
    const ctx = await run.io(() => this.#context(state));
    const key = JSON.stringify(ctx);
    const cleanupFailures = await run.io(() => this.#deleteStaleChains());
    if (cleanupFailures) run.report({ nftablesCleanupFailures: cleanupFailures });
    // A refused deletion: this sync is full, its listing finds the chains still there and retries them a second later.
    const full = run.decideFull(!this.#cache.sameContext(key) || cleanupFailures > 0);

    let listing: NftTable | null | 'unknown' = null;
    if (full) {
      try {
        listing = await run.io(() => (this.runner.listTableForSync ?? this.runner.listTable).call(this.runner, this.#nftFamily, KUBE_PROXY_TABLE));
      } catch (err) {
        // Without a listing every object is written afresh (flushed first); stale chains are found next time.
        this.#log.error('cannot list the kube-proxy table; rewriting all of it this sync', { err: errorMessage(err) });
        listing = 'unknown';
      }
    }
    const built = full ? this.#planFull(state, ctx, listing) : this.#planPartial(state, ctx);
    const ops = built.plan.ops();
    const text = formatTransaction(this.#nftFamily, KUBE_PROXY_TABLE, ops);
    run.sending(text);
    try {
      if (text !== '') await run.io(() => this.runner.run(text, { family: this.#nftFamily, table: KUBE_PROXY_TABLE, ops }));
    } catch (err) {
      if (err instanceof NftTransactionFailure) this.#leaveOutRefused(err, ops, built.cache);
      throw err;
    }

    // Success: the kernel holds what this sync planned.
    this.#cache.commit(built.cache, key);
    this.#fixed = built.fixed;
    this.#stale = built.stale;
    this.#rules = built.rules;
    for (const w of built.fixed.warnings) this.#warnOnce(w);
    return { linesWritten: ops.length, servicesWritten: built.servicesWritten, rulesByTable: { [KUBE_PROXY_TABLE]: this.#rules } };
  }

  /** #indexWritten rebuilds the element index from what the last successful sync wrote. */
  #indexWritten(): void {
    const index = new ElementIndex();
    for (const [id, e] of this.#cache.builds) index.replace(id, [], e.objects?.elements ?? []);
    this.#index = index;
  }

  #warnOnce(w: string): void {
    if (this.#warned.has(w)) return;
    this.#warned.add(w);
    this.#log.warn(w);
  }

  /** #describeFailure quotes the lines of a transaction nft refused. */
  #describeFailure(err: unknown, text: string | undefined): KproxyError | null {
    if (!(err instanceof NftTransactionFailure) || text === undefined) return null;
    const lines = text.split('\n');
    const shown = err.lines.slice(0, 5).map((n) => `  line ${n}: ${lines[n - 1] ?? ''}`);
    return new NftTransactionFailure(`${err.message}${shown.length ? `\n${shown.join('\n')}` : ''}`, err.lines, err.stderr, { cause: err });
  }

  /**
   * #deleteStaleChains deletes, in a transaction of its own before the sync's,
   * the chains that went stale at least STALE_CHAIN_DELAY_MS ago (kube-proxy
   * does the same). A refused deletion is counted and retried later; it never
   * holds up the sync. Returns how many transactions failed (0 or 1).
   */
  async #deleteStaleChains(): Promise<number> {
    if (this.#stale.size === 0) return 0;
    const now = this.#o.clock.monotonic();
    const due = [...this.#stale]
      .filter(([, at]) => now - at >= STALE_CHAIN_DELAY_MS)
      .map(([name]) => name)
      .sort();
    if (due.length === 0) return 0;
    const ops: NftOp[] = due.map((name) => ({ op: 'delete', kind: 'chain', name }));
    const text = formatTransaction(this.#nftFamily, KUBE_PROXY_TABLE, ops);
    try {
      await this.runner.run(text, { family: this.#nftFamily, table: KUBE_PROXY_TABLE, ops });
      for (const name of due) this.#stale.delete(name);
      this.#log.info('deleted stale chains', { chains: due.length });
    } catch (err) {
      // As kube-proxy: forget them; this sync is full, its listing finds those still there and retries them a second later.
      for (const name of due) this.#stale.delete(name);
      const lines = err instanceof NftTransactionFailure ? err.lines.map((n) => `line ${n}: ${formatOp(this.#nftFamily, KUBE_PROXY_TABLE, ops[n - 1] ?? ops[0])}`) : [];
      this.#log.error('deleting stale chains failed; retrying later', { chains: due.length, err: errorMessage(err), ...(lines.length ? { lines: lines.join('; ') } : {}) });
      return 1;
    }
    return 0;
  }

  /**
   * #leaveOutRefused: when every line the kernel refused belongs to service
   * ports (blame.ts), those ports are left out of the syncs that follow, each
   * reported skipped with the kernel's refusal, until their Service or
   * endpoints change; the next (full) sync then programs every other Service.
   * A refusal of a fixed object leaves nothing out: the sync fails as a whole.
   */
  #leaveOutRefused(err: NftTransactionFailure, ops: readonly NftOp[], cache: ReadonlyMap<string, CacheEntry>): void {
    const blamed = blameServicePorts(ops, err.lines, cache);
    if (!blamed) return;
    const lines = (text: string) => text.split('\n');
    for (const [id, at] of blamed) {
      const e = cache.get(id);
      if (!e) continue;
      const shown = at.slice(0, 3).map((n) => `line ${n}: ${lines(formatOp(this.#nftFamily, KUBE_PROXY_TABLE, ops[n - 1]))[0]}`);
      const reason = `the kernel refused its objects (${err.message.replace(/^.*?: /, '')}; ${shown.join('; ')}): left out until its Service or endpoints change`;
      this.#skipped.refuse(id, e.sp, e.eps, reason);
      this.#log.error('service port left out: the kernel refused its objects', { servicePort: id, err: err.message, lines: shown.join('; ') });
    }
  }

  /** #buildPorts builds every service port, reusing the last build of unchanged ones. */
  #buildPorts(state: StateCheckout, ctx: NftBuildContext, key: string): { cache: Map<string, CacheEntry>; rebuilt: Set<string> } {
    const cache = new Map<string, CacheEntry>();
    const rebuilt = new Set<string>();
    const changed = state.changedServices;
    for (const id of [...state.services.keys()].sort()) {
      const sp = state.services.get(id)!;
      const eps = state.endpoints.get(id);
      const prev = this.#cache.get(id);
      // A change (or a new Service under the same port) forgets a refusal and gets another try.
      const refused = this.#skipped.refusal(id, sp, eps);
      const same = this.#cache.unchanged(id, sp, eps, key);
      if (refused === undefined && same && !changed.has(sp.service)) {
        cache.set(id, same);
        continue;
      }
      if (refused !== undefined && prev?.objects && this.#cache.sameContext(key)) {
        // What the kernel took last time stays, as an invalid object keeps its last valid version.
        cache.set(id, prev);
        this.#skipped.skip(id, `${refused}; its previous objects stay programmed`, 'service port kept as last programmed: the kernel refused its new objects');
        continue;
      }
      const entry: CacheEntry = refused !== undefined ? { sp, eps, objects: null, error: refused } : buildServicePort(sp, eps, () => buildServicePortObjects(sp, eps, ctx));
      cache.set(id, entry);
      rebuilt.add(id);
      if (entry.objects === null) this.#skipped.skip(id, entry.error!, 'service port skipped: its objects cannot be written safely');
      else this.#skipped.programmed(id);
    }
    this.#skipped.forgetGone(state.services);
    return { cache, rebuilt };
  }

  /**
   * #planFull compares everything kproxy wants with the listed table: what
   * is right is left alone, what differs is rewritten, what nothing wants is
   * flushed (service chains, deleted a second later) or removed.
   */
  #planFull(state: StateCheckout, ctx: NftBuildContext, listing: NftTable | null | 'unknown') {
    const plan = new TxPlan();
    const fixed = buildFixedObjects(ctx);
    const { cache } = this.#buildPorts(state, ctx, JSON.stringify(ctx));
    const index = new ElementIndex();
    for (const [id, e] of cache) index.replace(id, [], e.objects?.elements ?? []);
    this.#index = index;
    const blind = listing === 'unknown';
    const held = blind || listing === null ? null : listing;
    if (!held) plan.addTable(TABLE_COMMENT);
    const stale = new Map(this.#stale);
    const now = this.#o.clock.monotonic();
    // Without a listing nothing is known: every object is added (a no-op if it exists), emptied and filled.
    const reconcileChain = (c: ChainSpec, force = false) => (blind ? plan.blindChain(c) : plan.chain(held?.chains.get(c.name), c, force));

    const recreated = new Set<string>();
    const wantedSets = new Set<string>();
    for (const spec of fixed.sets) {
      wantedSets.add(spec.name);
      const h = held?.sets.get(spec.name);
      const wanted: Iterable<NftElement> = spec.name === NODEPORT_IPS ? fixed.nodePortIPs.map((k) => ({ key: k, value: null, comment: null })) : index.elements(spec.name as ElementSet);
      if (blind) {
        plan.blindSet(spec);
        for (const e of wanted) plan.addElement(spec.name, e);
        continue;
      }
      const fresh = plan.set(h ? heldSetOf(h) : undefined, spec);
      if (fresh) {
        if (h) recreated.add(spec.name);
        for (const e of wanted) plan.addElement(spec.name, e);
        continue;
      }
      const seen = new Set<string>();
      for (const e of wanted) {
        seen.add(e.key);
        plan.element(spec.name, spec.map, h!.elements.get(e.key), e);
      }
      for (const e of h!.elements.values()) if (!seen.has(e.key)) plan.element(spec.name, spec.map, e, undefined);
    }
    const wantedChains = new Set<string>();
    const namesRecreated = (c: ChainSpec) => recreated.size > 0 && c.rules.some((r) => [...recreated].some((s) => r.includes(`@${s} `) || r.endsWith(`@${s}`)));
    for (const c of fixed.chains) {
      wantedChains.add(c.name);
      reconcileChain(c, namesRecreated(c));
    }
    let rules = 0;
    for (const c of fixed.chains) rules += c.rules.length;
    const services = new Set<string>();
    for (const e of cache.values()) {
      const o = e.objects;
      if (!o) continue;
      rules += countRules(o);
      const before = plan.size;
      for (const s of o.affinitySets) {
        wantedSets.add(s.name);
        if (blind) plan.blindSet(s);
        else plan.set(held?.sets.get(s.name) ? heldSetOf(held.sets.get(s.name)!) : undefined, s);
      }
      for (const c of o.chains) {
        wantedChains.add(c.name);
        stale.delete(c.name);
        reconcileChain(c);
      }
      if (plan.size !== before) services.add(o.service);
    }
    if (held) {
      for (const c of held.chains.values()) {
        if (wantedChains.has(c.name)) continue;
        if (c.base) {
          // A hook kproxy no longer uses (an older layout): unhooked at once.
          plan.removeChain(c.name, c);
          continue;
        }
        if (c.rules.length) plan.flushChain(c.name);
        if (!stale.has(c.name)) stale.set(c.name, now);
      }
      for (const s of held.sets.values()) if (!wantedSets.has(s.name)) plan.deleteSet(s.name, s.map);
    }
    for (const name of stale.keys()) if (wantedChains.has(name) || (held && !held.chains.has(name))) stale.delete(name);
    return { plan, cache, fixed, stale, rules, servicesWritten: services.size };
  }

  /**
   * #planPartial writes only what changed since the last successful sync: the
   * objects of service ports whose Service or endpoints changed (compared with
   * what that sync wrote for them), the elements they add or drop, and the
   * chains they no longer use (flushed now, deleted a second later).
   */
  #planPartial(state: StateCheckout, ctx: NftBuildContext) {
    const plan = new TxPlan();
    const fixed = this.#fixed!;
    const { cache, rebuilt } = this.#buildPorts(state, ctx, JSON.stringify(ctx));
    const stale = new Map(this.#stale);
    const now = this.#o.clock.monotonic();
    let rules = this.#rules;
    const services = new Set<string>();
    const changes: [string, ServicePortObjects | null, ServicePortObjects | null][] = [];
    for (const id of rebuilt) changes.push([id, this.#cache.get(id)?.objects ?? null, cache.get(id)!.objects]);
    for (const [id, prev] of this.#cache.builds) if (!cache.has(id)) changes.push([id, prev.objects, null]);
    changes.sort((a, b) => (a[0] < b[0] ? -1 : 1));
    for (const [id, prev, next] of changes) {
      const before = plan.size;
      rules += countRules(next) - countRules(prev);
      const prevChains = new Map((prev ?? EMPTY).chains.map((c) => [c.name, c]));
      const nextChains = new Set((next ?? EMPTY).chains.map((c) => c.name));
      const prevSets = new Map((prev ?? EMPTY).affinitySets.map((s) => [s.name, s]));
      const nextSets = new Set((next ?? EMPTY).affinitySets.map((s) => s.name));
      for (const s of (next ?? EMPTY).affinitySets) {
        const p = prevSets.get(s.name);
        plan.set(p ? heldSetOf(p) : undefined, s);
      }
      for (const c of (next ?? EMPTY).chains) {
        const p = prevChains.get(c.name);
        // A chain that went stale earlier is still in the table, empty.
        const held: HeldChain | undefined = p ? { base: null, rules: p.rules } : stale.has(c.name) ? { base: null, rules: [] } : undefined;
        stale.delete(c.name);
        plan.chain(held, c);
      }
      for (const c of prevChains.values()) {
        if (nextChains.has(c.name)) continue;
        if (c.rules.length) plan.flushChain(c.name);
        stale.set(c.name, now);
      }
      for (const s of prevSets.values()) if (!nextSets.has(s.name)) plan.deleteSet(s.name, false);
      for (const ch of this.#index.replace(id, prev?.elements ?? [], next?.elements ?? [])) {
        plan.element(ch.set, ch.set !== 'cluster-ips', ch.before, ch.after);
      }
      if (plan.size !== before) services.add((next ?? prev ?? { service: id }).service);
    }
    return { plan, cache, fixed, stale, rules, servicesWritten: services.size };
  }
}

/** isKproxyObject: a chain or set kproxy (or kube-proxy) makes in its table. */
export function isKproxyObject(name: string): boolean {
  return isServiceChainName(name) || name.startsWith(AFFINITY_PREFIX) || (ELEMENT_SETS as readonly string[]).includes(name);
}

import { release } from 'node:os';
import type { Clock } from '../../clock.ts';
import type { ProxyConfig } from '../../config/types.ts';
import { errorMessage, IpsetError, IpvsError, KproxyError, NetlinkError } from '../../errors.ts';
import { IPSET_MAXELEM, type IpsetRunner } from '../../kernel/ipset.ts';
import { virtualServerKey, type IpvsService } from '../../kernel/ipvs-batch.ts';
import type { IpvsRunner } from '../../kernel/ipvs.ts';
import type { IptablesRunner } from '../../kernel/iptables.ts';
import { parseIptablesSave } from '../../kernel/iptables-save-parser.ts';
import type { Netlink } from '../../kernel/netlink.ts';
import { ensureSysctl, type Sysctl } from '../../kernel/sysctl.ts';
import type { Logger } from '../../log.ts';
import type { Backend, BackendSyncInput, BackendSyncResult, CleanupResult } from '../backend.ts';
import { CountCheck, skippedVerification, type SyncVerification } from '../sync-verify.ts';
import { FirstSyncHousekeeping } from '../first-sync-housekeeping.ts';
import { cidrContains, isLinkLocalIPv6, isLoopbackIP, parseCIDR, type CIDR, type IPFamily } from '../../net/ip.ts';
import { CANARY_TABLES, startCanaryMonitor } from '../xtables/canary-monitor.ts';
import { KUBE_PROXY_CANARY } from '../xtables/chain-names.ts';
import { ensureJumpRules } from '../xtables/jump-chains.ts';
import { describeRestoreFailure } from '../xtables/restore-failure.ts';
import { compareChains, countRequest, readCounts, writtenChains, type ChainCheck } from '../xtables/verify.ts';
import { masqueradeMark } from '../masquerade-mark.ts';
import { localDetectorFor } from '../local-detector.ts';
import { NodePortAddresses } from '../node-port-addresses.ts';
import { nodeIPOf } from '../node-info.ts';
import type { StateCheckout } from '../proxy-state.ts';
import { buildServicePort, ServicePortCache, type ServicePortBuild } from '../service-port-cache.ts';
import { SkippedServicePorts } from '../skipped-service-ports.ts';
import { SyncEnvelope, type FailedInput, type SyncRun, type SyncWritten } from '../sync-envelope.ts';
import { buildServicePortObjects, ipvsContextKey, type IpvsContext, type OutFilterEntry, type ServicePortObjects, type WantedVirtualServer } from './builder.ts';
import { GracefulTermination, type DrainingRealServer } from './graceful-termination.ts';
import { buildIptablesRules, JUMP_RULES, NO_STALE, staleModeChains, type StaleChains } from './iptables-rules.ts';
import { DUMMY_DEVICE, IPSETS, setName, type SetKey } from './names.ts';
import { planAddresses, planIpsets, planIpvs, type Scope, type Wanted } from './plan.ts';
import { ipvsSysctls, validateScheduler } from './sysctls.ts';
import { compareBinds, compareSets, compareVirtualServers } from './verify.ts';

export interface IpvsBackendOptions {
  config: ProxyConfig;
  nodeName: string;
  family: IPFamily;
  ipvs: IpvsRunner;
  ipset: IpsetRunner;
  netlink: Netlink;
  iptables: IptablesRunner;
  sysctl: Sysctl;
  clock: Clock;
  logger: Logger;
  /** cleanup removes kproxy's IPVS objects (see cleanup.ts); default: virtual servers, sets, link of these runners. */
  cleanup: () => Promise<CleanupResult>;
  /**
   * afterFirstSync runs once, after the first successful sync (host.ts: the
   * nftables mode's tables are removed then, when this mode's objects serve).
   */
  afterFirstSync?: () => Promise<unknown>;
  /**
   * prepare makes the host objects the mode needs before its first sync
   * (host.ts: kube-ipvs0 and the scheduler probe), run first by init: never
   * at construction, so `--once` touches nothing before its source synced.
   */
  prepare?: () => Promise<void>;
  /** kernelRelease: `uname -r`, for conn_reuse_mode (default os.release()). */
  kernelRelease?: string;
  /** graceful termination timing; defaults as kube-proxy (1 min checks, 15 min timeout). */
  drainCheckIntervalMs?: number;
  drainTimeoutMs?: number;
  canaryIntervalMs?: number;
  /** simulated: the kernel runners are the simulated kernel of --dry-run (logs say "would set"). */
  simulated?: boolean;
}

/** IpvsRunners are the kernel runners a backend programs through (the dashboard reads through them too). */
export interface IpvsRunners {
  readonly ipvs: IpvsRunner;
  readonly ipset: IpsetRunner;
  readonly netlink: Netlink;
  readonly iptables: IptablesRunner;
}

/**
 * IpvsIntent is what kproxy believes the kernel holds after its last
 * successful sync: its own objects only, as the sync wanted them. A partial
 * sync leaves other services' objects alone, so a kernel that differs from
 * this has drifted (someone changed it, or a sync failed half way).
 */
export interface IpvsIntent {
  /** version: bumped by every successful sync and by cleanup. */
  readonly version: number;
  readonly family: IPFamily;
  readonly virtualServers: ReadonlyMap<string, WantedVirtualServer>;
  /** sets: entries per set; every set of IPVS mode is listed, empty ones too (a sync creates them all). */
  readonly sets: ReadonlyMap<SetKey, ReadonlySet<string>>;
  /** link: kube-ipvs0 exists (false after a cleanup); binds: the addresses on it. */
  readonly link: boolean;
  readonly binds: ReadonlySet<string>;
  /** iptables: the nat and filter restore input of the last sync; it declares every chain IPVS mode owns. */
  readonly iptables: string;
  /** draining: real servers at weight 0 waiting for their connections to end. */
  readonly draining: readonly DrainingRealServer[];
  /** objects: one service port's objects as that sync built them; null when it was skipped or is unknown. */
  objects(servicePortId: string): ServicePortObjects | null;
  /** manages: kproxy deletes unwanted virtual servers at this address (this family, outside ipvs.excludeCIDRs). */
  manages(address: string): boolean;
}

/** IpvsBackend is the IPVS Backend plus what the daemon and the dashboard read. */
export interface IpvsBackend extends Backend {
  readonly runners: IpvsRunners;
  /** draining lists real servers waiting for their connections to end. */
  draining(): DrainingRealServer[];
  /** intended: the objects of the last successful sync (null before one); a reference, nothing is copied. */
  intended(): IpvsIntent | null;
  /** lastFailedInput: the batches of the last sync that failed (each under the program it was for). */
  lastFailedInput(): FailedInput | null;
}

type CacheEntry = ServicePortBuild<ServicePortObjects>;

/** createIpvsBackend returns kube-proxy's IPVS mode as a kproxy Backend. */
export function createIpvsBackend(opts: IpvsBackendOptions): IpvsBackend {
  return new IpvsProxier(opts);
}

const RESTORE_HEADERS = { netlink: '# ip -batch -', ipset: '# ipset restore', ipvs: '# ipvsadm -R', iptables: '# iptables-restore --noflush' };

/**
 * IpvsProxier reads the kernel once per sync (ipvsadm, ipset, ip), builds the
 * wanted objects from a per-service-port cache, and applies the difference in
 * one batch per program: ip, ipset, ipvsadm, then iptables-restore (whose
 * rules reference the sets). A full sync (start, failure, context change, the
 * loop's request) diffs everything and removes leftovers; a partial sync only
 * the objects of changed services.
 */
class IpvsProxier implements IpvsBackend {
  readonly mode = 'ipvs' as const;

  get family(): IPFamily {
    return this.#o.family;
  }
  readonly #o: IpvsBackendOptions;
  readonly #log: Logger;
  readonly #scheduler: string;
  readonly #excludeCIDRs: CIDR[];
  readonly #graceful: GracefulTermination;
  readonly #cache = new ServicePortCache<ServicePortObjects>();
  readonly #skipped: SkippedServicePorts;
  readonly #envelope: SyncEnvelope;
  /** #overflowed: service ports the last successful sync left out because a set had no room for their entries. */
  #overflowed: ReadonlySet<string> = new Set();
  #lastIptables = '';
  #intent: IpvsIntent | null = null;
  #intentVersion = 0;
  /** #verifyPending: the last sync was full and succeeded, and verify() has not looked at it yet (#intent is what it wrote). */
  #verifyPending = false;
  readonly runners: IpvsRunners;

  readonly #housekeeping: FirstSyncHousekeeping;

  constructor(opts: IpvsBackendOptions) {
    this.#o = opts;
    this.runners = { ipvs: opts.ipvs, ipset: opts.ipset, netlink: opts.netlink, iptables: opts.iptables };
    this.#log = opts.logger.child('ipvs');
    this.#housekeeping = new FirstSyncHousekeeping(opts.afterFirstSync, this.#log, opts.clock);
    this.#skipped = new SkippedServicePorts(this.#log);
    this.#envelope = new SyncEnvelope({ name: 'IPVS', clock: opts.clock, logger: this.#log, skipped: this.#skipped, describe: describeFailure });
    this.#scheduler = validateScheduler(opts.config.ipvs.scheduler);
    this.#excludeCIDRs = opts.config.ipvs.excludeCIDRs.map((c) => parseCIDR(c.trim())).filter((c): c is CIDR => c !== null && c.family === opts.family);
    this.#graceful = new GracefulTermination({ clock: opts.clock, checkIntervalMs: opts.drainCheckIntervalMs, timeoutMs: opts.drainTimeoutMs });
  }

  draining(): DrainingRealServer[] {
    return this.#graceful.list();
  }

  intended(): IpvsIntent | null {
    return this.#intent;
  }

  lastFailedInput(): FailedInput | null {
    return this.#envelope.lastFailedInput();
  }

  requireFullSync(): void {
    this.#envelope.requireFullSync();
  }

  /** #manages mirrors planIpvs: virtual servers of the other family or in excludeCIDRs are never deleted. */
  readonly #manages = (address: string): boolean => (this.#o.family === 'IPv6') === address.includes(':') && !this.#excludeCIDRs.some((c) => cidrContains(c, address));

  /** init makes the host objects the mode needs (prepare), then sets its sysctls and the IPVS timeouts, as kube-proxy's NewProxier does. */
  async init(): Promise<void> {
    await this.#o.prepare?.();
    const { config, sysctl } = this.#o;
    for (const s of ipvsSysctls(config.ipvs.strictARP, this.#o.kernelRelease ?? release())) {
      if (s.value === null) {
        this.#log.info(s.why, { sysctl: s.name });
        continue;
      }
      if (await ensureSysctl(sysctl, s.name, s.value)) this.#log.info(this.#o.simulated ? 'would set sysctl (dry run)' : 'set sysctl', { sysctl: s.name, value: s.value, why: s.why });
    }
    const secs = (ms: number) => Math.floor(ms / 1000);
    const { tcpTimeoutMs, tcpFinTimeoutMs, udpTimeoutMs } = config.ipvs;
    if (tcpTimeoutMs > 0 || tcpFinTimeoutMs > 0 || udpTimeoutMs > 0) {
      try {
        await this.#o.ipvs.restore(`--set ${secs(tcpTimeoutMs)} ${secs(tcpFinTimeoutMs)} ${secs(udpTimeoutMs)}\n`);
      } catch (err) {
        // As kube-proxy: wrong timeouts only change how long idle connections live; proxying still works.
        this.#log.error('cannot set the IPVS timeouts', { err: errorMessage(err) });
      }
    }
  }

  watchTampering(onTampered: (reason: string) => void): () => void {
    return startCanaryMonitor({ runner: this.#o.iptables, clock: this.#o.clock, logger: this.#log, intervalMs: this.#o.canaryIntervalMs, onTampered });
  }

  async cleanup(): Promise<CleanupResult> {
    this.#envelope.requireFullSync();
    this.#verifyPending = false;
    this.#cache.clear();
    this.#lastIptables = '';
    // kproxy meant to remove everything: what is left afterwards is drift, not kproxy's.
    this.#intent = {
      version: ++this.#intentVersion,
      family: this.#o.family,
      virtualServers: new Map(),
      sets: new Map(),
      link: false,
      binds: new Set(),
      iptables: '',
      draining: [],
      objects: () => null,
      manages: this.#manages,
    };
    return this.#o.cleanup();
  }

  #context(state: StateCheckout, links: Map<string, { address: string; family: IPFamily }[]>): IpvsContext {
    const { config, family } = this.#o;
    const nodeAddresses = new Set<string>();
    const all: string[] = [];
    for (const [name, addrs] of links) {
      if (name === DUMMY_DEVICE) continue;
      for (const a of addrs) {
        all.push(a.address);
        // kube-proxy's isValidForSet: this family, no loopback, no IPv6 link-local.
        if (a.family !== family || isLoopbackIP(a.address) || isLinkLocalIPv6(a.address)) continue;
        nodeAddresses.add(a.address);
      }
    }
    const npa = new NodePortAddresses(family, config.nodePortAddresses, state.node.addresses);
    const nodePortIPs = npa.matchAll ? [...nodeAddresses] : npa.nodeIPs(all).filter((ip) => !isLoopbackIP(ip));
    return {
      family,
      nodeName: this.#o.nodeName,
      zone: state.node.zone,
      scheduler: this.#scheduler,
      nodePortIPs: nodePortIPs.sort(),
      nodeAddresses: [...nodeAddresses].sort(),
      nodeIP: nodeIPOf(state.node, family),
    };
  }

  /** afterSync: after a successful sync was recorded, the first one's removal of the other modes' leftovers. */
  async afterSync(): Promise<void> {
    await this.#housekeeping.afterSuccessfulSync();
  }

  sync(input: BackendSyncInput): Promise<BackendSyncResult> {
    // Whatever this sync does, the kernel no longer holds exactly what an earlier full sync wrote.
    this.#verifyPending = false;
    return this.#envelope.run(input, (run) => this.#write(input.state, run));
  }

  async #write(state: StateCheckout, run: SyncRun): Promise<SyncWritten> {
    run.step = 'read';
    // One read of each kernel table per sync; the IPVS listing carries
    // connection counts when draining real servers are due for a check.
    const sweepDue = this.#graceful.due();
    const [services, sets, links] = await run.io(() => Promise.all([sweepDue ? this.#o.ipvs.list() : this.#o.ipvs.save(), this.#o.ipset.save(), this.#o.netlink.show()]));
    const ctx = this.#context(state, links);
    const key = ipvsContextKey(ctx);
    let full = run.decideFull(!this.#cache.sameContext(key));
    const current = new Map<string, IpvsService>(services.map((s) => [virtualServerKey(s), s]));

    let stale: StaleChains = NO_STALE;
    if (full) {
      run.step = 'iptables-save';
      const dump = await run.io(async () => parseIptablesSave(await this.#o.iptables.save()));
      const report = await run.io(() => ensureJumpRules(this.#o.iptables, dump, JUMP_RULES));
      if (report.rulesInserted.length) this.#log.info('created jump rules', { rules: report.rulesInserted.join('; ') });
      stale = staleModeChains(dump);
      if (stale.nat.chains.length + stale.filter.chains.length) {
        this.#log.info('removing chains left by the iptables mode', { nat: stale.nat.chains.length, filter: stale.filter.chains.length });
      }
    }

    run.step = 'build';
    const built = this.#build(state, ctx, key);
    // Which service ports a full set leaves out can change with another Service's change: then compare everything.
    full = run.decideFull(!sameMembers(built.overflowed, this.#overflowed));
    const scope = full ? null : this.#scope(state.changedServices, built.cache);
    const bindList = links.get(DUMMY_DEVICE);
    const deletions = sweepDue ? this.#graceful.sweep(current) : [];
    for (const d of deletions)
      this.#log.info('deleting a drained real server', { virtualServer: `${d.vs.address}:${d.vs.port}/${d.vs.protocol}`, realServer: `${d.rs.address}:${d.rs.port}`, reason: d.reason });
    // Each family's proxier owns its family's addresses on kube-ipvs0; the kernel's own
    // IPv6 link-local address on the link is nobody's service address and stays.
    const bound = (bindList ?? []).filter((a) => a.family === ctx.family && !/^fe[89ab]/i.test(a.address)).map((a) => a.address);
    const netlinkBatch = planAddresses(built.wanted.binds, bindList !== undefined, new Set(bound), scope);
    const ipsetBatch = planIpsets(built.wanted.sets, sets, ctx.family, scope);
    const ipvsPlan = planIpvs({ wanted: built.wanted.virtualServers, current, scope, family: ctx.family, excludeCIDRs: this.#excludeCIDRs, draining: this.#graceful, deletions });
    const nonEmpty = new Set<SetKey>([...built.wanted.sets].filter(([, s]) => s.size > 0).map(([k]) => k));
    const rules = buildIptablesRules(
      {
        family: ctx.family,
        masqueradeMark: masqueradeMark(this.#o.config.iptables.masqueradeBit),
        masqueradeAll: this.#o.config.iptables.masqueradeAll,
        localDetector: localDetectorFor(this.#o.config, state.node, ctx.family),
        randomFully: this.#o.iptables.hasRandomFully,
      },
      nonEmpty,
      built.outFilter,
      stale,
    );
    const writeIptables = full || rules.text !== this.#lastIptables;

    // Addresses first (IPVS only sees packets to local addresses), then the
    // sets the iptables rules match, the virtual servers, and the rules.
    const apply = async (name: keyof typeof RESTORE_HEADERS, text: string, fn: (t: string) => Promise<void>) => {
      if (text === '') return;
      run.step = name;
      run.sending(`${RESTORE_HEADERS[name]}\n${text}`);
      await run.io(() => fn(text));
    };
    await apply('netlink', netlinkBatch.text(), (t) => this.#o.netlink.batch(t));
    await apply('ipset', ipsetBatch.text(), (t) => this.#o.ipset.restore(t));
    await apply('ipvs', ipvsPlan.batch.text(), (t) => this.#o.ipvs.restore(t));
    if (writeIptables) await apply('iptables', rules.text, (t) => this.#o.iptables.restore(t));

    // Success: the kernel holds this sync's objects.
    for (const c of ipvsPlan.drainCancel) this.#graceful.cancel(c.vsKey, c.rsKey);
    for (const k of ipvsPlan.deletedVirtualServers) this.#graceful.dropVirtualServer(k);
    for (const d of ipvsPlan.drainStart) this.#graceful.add(d.vs, d.rs);
    this.#cache.commit(built.cache, key);
    this.#overflowed = built.overflowed;
    this.#lastIptables = rules.text;
    // References only: the dashboard reads them later, off the sync's path.
    const cache = built.cache;
    this.#intent = {
      version: ++this.#intentVersion,
      family: ctx.family,
      ...built.wanted,
      link: true,
      iptables: rules.text,
      draining: this.#graceful.list(),
      objects: (id) => cache.get(id)?.objects ?? null,
      manages: this.#manages,
    };
    this.#verifyPending = full;
    return {
      linesWritten: netlinkBatch.lines + ipsetBatch.lines + ipvsPlan.batch.lines + (writeIptables ? rules.lines : 0),
      servicesWritten: full ? new Set([...built.cache.values()].map((e) => e.sp.service)).size : state.changedServices.size,
      rulesByTable: this.#counts(built.wanted, rules.rulesByTable),
    };
  }

  /**
   * verify checks the last full sync against the kernel (verify.ts): the
   * real servers of every virtual server (ipvsadm -Sn, one listing), the
   * entries of every set of the family (ipset list -t: the headers only),
   * the addresses on kube-ipvs0, and the glue chains, their jumps and the
   * canaries (xtables/verify.ts). The reads run side by side; one that
   * fails makes the verification skipped.
   */
  async verify(): Promise<SyncVerification> {
    const clock = this.#o.clock;
    const t0 = clock.monotonic();
    const intent = this.#intent;
    if (!this.#verifyPending || !intent) return skippedVerification(0, 'no full sync to verify since the last verification');
    this.#verifyPending = false;
    const chains: ChainCheck = {
      written: writtenChains(
        intent.iptables,
        CANARY_TABLES.map((table) => ({ table, chain: KUBE_PROXY_CANARY, rules: 0 })),
      ),
      jumps: JUMP_RULES,
    };
    const { ipvs, ipset, netlink, iptables } = this.#o;
    let read;
    try {
      read = await Promise.all([
        ipvs.save(),
        ipset.countEntries ? ipset.countEntries() : ipset.save().then((sets) => new Map([...sets].map(([n, s]) => [n, s.entries.size]))),
        netlink.show(),
        readCounts(iptables, countRequest(chains)),
      ]);
    } catch (err) {
      return skippedVerification(clock.monotonic() - t0, `reading the IPVS table, the sets, kube-ipvs0 or the chains failed: ${errorMessage(err)}`);
    }
    const [services, sets, links, counts] = read;
    const check = new CountCheck();
    let owners: Map<string, string> | null = null;
    compareVirtualServers(intent.virtualServers, intent.draining, services, this.#manages, check, (key) => {
      if (!owners) {
        owners = new Map();
        for (const [id, e] of this.#cache.builds) for (const v of e.objects?.virtualServers ?? []) if (!owners.has(v.key)) owners.set(v.key, id);
      }
      return owners.get(key);
    });
    compareSets(intent.sets, intent.family, sets, check);
    const bound = links.get(DUMMY_DEVICE);
    compareBinds(intent.binds, bound ? bound.filter((a) => a.family === intent.family && !/^fe[89ab]/i.test(a.address)).map((a) => a.address) : null, DUMMY_DEVICE, intent.family, check);
    await compareChains(chains, counts, check);
    return check.result(clock.monotonic() - t0);
  }

  #counts(wanted: Wanted, iptables: { nat: number; filter: number }): Record<string, number> {
    let reals = 0;
    for (const w of wanted.virtualServers.values()) reals += w.reals.size;
    let entries = 0;
    for (const s of wanted.sets.values()) entries += s.size;
    return { 'virtual-servers': wanted.virtualServers.size, 'real-servers': reals, 'ipset-entries': entries, nat: iptables.nat, filter: iptables.filter };
  }

  /** #scope collects what changed services had (last sync) and have (now): all a partial sync may touch. */
  #scope(changed: ReadonlySet<string>, cache: Map<string, CacheEntry>): Scope {
    const virtualServers = new Set<string>();
    const entries = new Map<SetKey, Set<string>>();
    const binds = new Set<string>();
    const take = (o: ServicePortObjects | null) => {
      if (!o) return;
      for (const v of o.virtualServers) virtualServers.add(v.key);
      for (const [k, list] of o.entries) {
        let s = entries.get(k);
        if (!s) entries.set(k, (s = new Set()));
        for (const e of list) s.add(e);
      }
      for (const b of o.binds) binds.add(b);
    };
    for (const e of this.#cache.builds.values()) if (changed.has(e.sp.service) || !cache.has(e.sp.id)) take(e.objects);
    for (const e of cache.values()) if (changed.has(e.sp.service)) take(e.objects);
    // KUBE-IPVS-IPS mirrors the addresses on kube-ipvs0.
    entries.set('ipvsIPs', new Set(binds));
    return { virtualServers, entries, binds };
  }

  #build(state: StateCheckout, ctx: IpvsContext, key: string) {
    const cache = new Map<string, CacheEntry>();
    const virtualServers = new Map<string, WantedVirtualServer>();
    const sets = new Map<SetKey, Set<string>>(IPSETS.map((i) => [i.key, new Set<string>()]));
    const binds = new Set<string>();
    const outFilter: OutFilterEntry[] = [];
    const owner = new Map<string, string>();
    const overflowed = new Set<string>();
    for (const id of [...state.services.keys()].sort()) {
      const sp = state.services.get(id)!;
      const eps = state.endpoints.get(id);
      const entry = this.#cache.unchanged(id, sp, eps, key) ?? buildServicePort(sp, eps, () => buildServicePortObjects(sp, eps, ctx));
      cache.set(id, entry);
      if (entry.error !== null) {
        this.#skipped.skip(id, entry.error, 'service port skipped: its objects cannot be programmed safely');
        continue;
      }
      const o = entry.objects!;
      const noRoom = this.#noRoom(o, sets, binds, ctx.family);
      if (noRoom !== null) {
        // The kernel would refuse the entries past maxelem and stop the whole `ipset restore`:
        // this service port is left out whole, the ones sorted before it keep theirs.
        this.#skipped.skip(id, noRoom, 'service port skipped: its ipset entries do not fit');
        overflowed.add(id);
        continue;
      }
      this.#skipped.programmed(id);
      for (const v of o.virtualServers) {
        const first = owner.get(v.key);
        if (first !== undefined && first !== id) {
          // Two service ports claim one address:port: IPVS holds one virtual server, the first (sorted) keeps it.
          this.#log.warn('virtual server claimed by two service ports; the first keeps it', { virtualServer: v.key, kept: first, skipped: id });
          continue;
        }
        owner.set(v.key, id);
        virtualServers.set(v.key, v);
      }
      for (const [k, list] of o.entries) for (const e of list) sets.get(k)!.add(e);
      for (const b of o.binds) binds.add(b);
      outFilter.push(...o.outFilter);
    }
    this.#skipped.forgetGone(state.services);
    sets.set('ipvsIPs', new Set(binds));
    const wanted: Wanted = { virtualServers, sets, binds };
    return { cache, wanted, outFilter, overflowed };
  }

  /**
   * #noRoom says why a service port's entries do not fit in the hash sets
   * the service ports before it filled (at most IPSET_MAXELEM entries each;
   * KUBE-IPVS-IPS holds every bound address), or null when they fit.
   */
  #noRoom(o: ServicePortObjects, sets: ReadonlyMap<SetKey, ReadonlySet<string>>, binds: ReadonlySet<string>, family: IPFamily): string | null {
    const check = (key: SetKey, have: ReadonlySet<string>, adding: readonly string[]): string | null => {
      let added = 0;
      for (const e of new Set(adding)) if (!have.has(e)) added++;
      if (have.size + added <= IPSET_MAXELEM) return null;
      return `its ${added} entries do not fit in ipset ${setName(key, family)}, which holds at most ${IPSET_MAXELEM} and has ${have.size} from the service ports sorted before it (the kernel would refuse the rest: "Hash is full")`;
    };
    for (const [key, list] of o.entries) {
      if (IPSET_TYPES_OF.get(key) === 'bitmap:port') continue;
      const why = check(key, sets.get(key)!, list);
      if (why !== null) return why;
    }
    return check('ipvsIPs', binds, o.binds);
  }
}

/**
 * describeFailure names a failed IPVS sync: a refused iptables-restore with
 * its lines, or the program that failed (ipvsadm, ipset, ip).
 */
function describeFailure(err: unknown, run: SyncRun): KproxyError | null {
  const last = run.lastInput;
  // The input carries a header line per program ("# iptables-restore --noflush"): the restore's own line numbers start after it.
  if (run.step === 'iptables') return describeRestoreFailure(err, last?.slice(last.indexOf('\n') + 1), "IPVS mode's nat and filter rules");
  if (err instanceof KproxyError) return null;
  const wrap = run.step === 'ipvs' ? IpvsError : run.step === 'ipset' ? IpsetError : run.step === 'netlink' ? NetlinkError : null;
  return wrap && new wrap(`IPVS sync failed (${run.step}): ${errorMessage(err)}`, { cause: err });
}

/** IPSET_TYPES_OF: each set's type (bitmap:port sets hold every port; only hash sets fill up). */
const IPSET_TYPES_OF = new Map(IPSETS.map((i) => [i.key, i.type]));

function sameMembers(a: ReadonlySet<string>, b: ReadonlySet<string>): boolean {
  if (a.size !== b.size) return false;
  for (const x of a) if (!b.has(x)) return false;
  return true;
}

import { PackedText } from '../packed-text.ts';
import type { Clock } from '../../clock.ts';
import type { IptablesRunner } from '../../kernel/iptables.ts';
import { silentLogger, type Logger } from '../../log.ts';
import { ruleComment, splitArgs } from '../../kernel/iptables-save-parser.ts';
import type { BackendSyncResult } from '../../proxy/backend.ts';
import type { Endpoint } from '../../proxy/endpoint.ts';
import { isServiceChainName } from '../../proxy/xtables/chain-names.ts';
import type { ServicePort } from '../../proxy/service-port.ts';
import type { SyncRecord } from '../../proxy/sync-loop.ts';
import type { CategorizedEndpoints } from '../../proxy/topology.ts';
import { KUBE_NODEPORT_CONTAINER, KUBE_PORTALS_CONTAINER, PORTAL_CHAINS, PORTAL_JUMPS, type RelayLimits, type RelayStats, type UserspaceIntent } from '../../proxy/userspace/index.ts';
import { iptablesRuleKey } from '../iptables/rule-key.ts';
import { iptablesSaveText } from '../iptables/save-text.ts';
import { IntendedIptables, readSaveOutput } from '../iptables/tables.ts';
import type { ConnectionsQuery, KernelRule, KernelTables, KernelViewProvider, RequiredRule, RestoreInput, ServicePortObjects } from '../kernel-view.ts';
import type { ConnectionRow, ConnectionsPage, FlowEntry, RelayPortFacts, RelayRate, RelayTotals } from '../protocol.ts';
import { yieldToEventLoop, type Yield } from '../yield.ts';

/** UserspaceViewSource is what the view needs of the userspace backend (UserspaceBackend satisfies it). */
export interface UserspaceViewSource {
  readonly runner: IptablesRunner;
  readonly stats: RelayStats;
  readonly limits: RelayLimits;
  intended(): UserspaceIntent | null;
  proxySockets(): number;
}

export interface UserspaceViewOptions {
  backend: UserspaceViewSource;
  simulated: boolean;
  clock: Clock;
  pause?: Yield;
  logger?: Logger;
}

/** LIVE_INTERVAL_MS: watching dashboards get the relay's figures this often. */
export const LIVE_INTERVAL_MS = 1000;
/** MAX_PAGE: connections per page of GET /api/v1/connections. */
export const MAX_PAGE = 500;

const OWN = new Set<string>([...PORTAL_CHAINS.nat, ...PORTAL_CHAINS.filter]);

function quoteWord(word: string): string {
  return /^[^\s"\\]+$/.test(word) ? word : `"${word.replace(/(["\\])/g, '\\$1')}"`;
}

/**
 * RateSampler turns counters into per-second rates between samples at least
 * `minMs` apart; a sample taken sooner returns the last rate, so several
 * readers of one page do not shrink the window to nothing.
 */
class RateSampler {
  readonly #last = new Map<string, { at: number; conns: number; bytes: number; rate: RelayRate | null }>();
  readonly #minMs: number;

  constructor(minMs: number) {
    this.#minMs = minMs;
  }

  sample(key: string, at: number, conns: number, bytes: number): RelayRate | null {
    const prev = this.#last.get(key);
    if (!prev) {
      this.#last.set(key, { at, conns, bytes, rate: null });
      return null;
    }
    const dt = (at - prev.at) / 1000;
    if (dt * 1000 < this.#minMs) return prev.rate;
    // A counter that went down was reset (the endpoint left and came back): no rate this time.
    const rate = conns < prev.conns || bytes < prev.bytes ? null : { conns: (conns - prev.conns) / dt, bytes: (bytes - prev.bytes) / dt };
    this.#last.set(key, { at, conns, bytes, rate });
    return rate;
  }

  /** forget drops samples of keys not seen for a while (services and endpoints that left). */
  forget(keep: ReadonlySet<string>): void {
    for (const k of this.#last.keys()) if (!keep.has(k)) this.#last.delete(k);
  }
}

/**
 * UserspaceView is the userspace mode's KernelViewProvider. Its kernel
 * objects are the portal chains (nat and filter, read with `iptables-save -c`
 * and compared with what the last sync wrote, as in iptables mode), and
 * beside them the relay itself: every service port's proxy sockets with
 * their rotations, each endpoint's open connections, totals, rates and share
 * of connections (relayPort), and the open connections (connections).
 */
export class UserspaceView implements KernelViewProvider {
  readonly kind = 'userspace' as const;
  readonly simulated: boolean;
  readonly liveIntervalMs = LIVE_INTERVAL_MS;
  readonly #src: UserspaceViewSource;
  readonly #clock: Clock;
  readonly #pause: Yield;
  readonly #intended = new IntendedIptables();
  readonly #required: readonly RequiredRule[];
  readonly #rates = new RateSampler(LIVE_INTERVAL_MS * 0.8);
  #plannedVersion = -1;
  #lastInput: RestoreInput | null = null;
  #lastFailed: RestoreInput | null = null;
  #sampled = 0;

  constructor(opts: UserspaceViewOptions) {
    this.#src = opts.backend;
    this.simulated = opts.simulated;
    this.#clock = opts.clock;
    this.#pause = opts.pause ?? yieldToEventLoop;
    void (opts.logger ?? silentLogger);
    this.#required = PORTAL_JUMPS.map((j) => ({ table: j.table, chain: j.from, spec: j.args.map(quoteWord).join(' ') }));
  }

  async read(): Promise<KernelTables> {
    return readSaveOutput(await this.#src.runner.save({ counters: true, background: true }), this.#pause);
  }

  intended(): Promise<KernelTables | null> {
    this.#follow();
    return this.#intended.tables(this.#pause);
  }

  intendedVersion(): number {
    this.#follow();
    return this.#intended.version;
  }

  /** #follow takes the portal chains of the backend's last successful sync (the whole of them, each time). */
  #follow(): void {
    const p = this.#src.intended();
    if (!p || p.version === this.#plannedVersion) return;
    this.#plannedVersion = p.version;
    if (p.text) this.#intended.accepted(p.text, true);
    else this.#intended.cleared();
  }

  noteSync(record: SyncRecord, result: BackendSyncResult): void {
    if (result.batch === undefined) return;
    const input: RestoreInput = { seq: record.seq, at: record.finishedAt, full: result.full, body: new PackedText(result.batch) };
    if (record.ok) this.#lastInput = input;
    else this.#lastFailed = { ...input, error: record.error?.message ?? 'failed' };
  }

  noteCleanup(): void {
    // The backend's cleanup() planned empty portals (a new planned version).
  }

  release(): void {
    this.#intended.release();
  }

  ruleKey(_table: string, rule: KernelRule): string {
    return iptablesRuleKey(rule.spec);
  }

  ownsChain(_table: string, chain: string): boolean {
    // Portal chains, and the iptables mode's, which a full sync removes: one present is drift.
    return OWN.has(chain) || isServiceChainName(chain);
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
    const port = this.#src.intended()?.port(sp.id) ?? null;
    const socketOf = (pool: 'cluster' | 'local') => port?.sockets.find((s) => s.pool === pool) ?? null;
    const proto = sp.protocol;
    const flows: FlowEntry[] = [];
    const flow = (kind: FlowEntry['kind'], address: string, entry: string, local: boolean, note?: string) => {
      const s = socketOf(local ? 'local' : 'cluster');
      const policy = local ? 'Local' : 'Cluster';
      if (!s) {
        flows.push({ kind, address, path: [entry], policy, outcome: 'drop', note: port ? 'no proxy socket for this policy' : 'not relayed (see why above)' });
        return;
      }
      const object = `proxy socket :${s.port}`;
      if (s.endpoints.length === 0) {
        const why = local ? 'no endpoint on this node' : 'no ready endpoint';
        flows.push({ kind, address, path: [entry, object], policy, outcome: 'reject', note: `${why}: kproxy accepts and resets the connection` });
        return;
      }
      flows.push({ kind, address, path: [entry, object], policy, outcome: 'endpoints', ...(note ? { note } : {}) });
    };
    const short = sp.externalPolicyLocal ? '; the node and its pods take the Cluster endpoints' : '';
    flow('clusterIP', `${sp.clusterIP}:${sp.port}/${proto}`, KUBE_PORTALS_CONTAINER, sp.internalPolicyLocal);
    if (sp.nodePort) flow('nodePort', `node:${sp.nodePort}/${proto}`, KUBE_NODEPORT_CONTAINER, sp.externalPolicyLocal, short ? `round robin${short}` : undefined);
    for (const ip of sp.externalIPs) flow('externalIP', `${ip}:${sp.port}/${proto}`, KUBE_PORTALS_CONTAINER, sp.externalPolicyLocal, short ? `round robin${short}` : undefined);
    for (const ip of sp.loadBalancerVIPs) flow('loadBalancerIP', `${ip}:${sp.port}/${proto}`, KUBE_PORTALS_CONTAINER, sp.externalPolicyLocal, short ? `round robin${short}` : undefined);
    const name = sp.name;
    const local = new Set(cat.local.map((e) => e.key));
    return {
      owned: [],
      entryChains: [...PORTAL_CHAINS.nat.map((chain) => ({ table: 'nat', chain })), ...PORTAL_CHAINS.filter.map((chain) => ({ table: 'filter', chain }))],
      isEntryRule: (rule) => {
        if (!rule.spec.includes(name)) return false;
        try {
          return ruleComment(splitArgs(rule.spec)) === name;
        } catch {
          return false; // unbalanced quotes: not a rule kproxy wrote
        }
      },
      flows,
      endpointObject: (key) => {
        const s = socketOf(local.has(key) && !cat.cluster.some((e) => e.key === key) ? 'local' : 'cluster') ?? socketOf('local');
        return s ? `proxy socket :${s.port}` : null;
      },
    };
  }

  relayPort(sp: ServicePort): RelayPortFacts | null {
    const port = this.#src.intended()?.port(sp.id) ?? null;
    const stats = this.#src.stats.ports.get(sp.id);
    if (!port && !stats) return null;
    const at = this.#clock.monotonic();
    let total = 0;
    for (const e of stats?.endpoints.values() ?? []) total += e.total;
    const endpoints = [...(stats?.endpoints.values() ?? [])]
      .map((e) => ({
        key: e.key,
        serving: e.serving,
        active: e.active,
        total: e.total,
        bytesToEndpoint: e.bytesToEndpoint,
        bytesToClient: e.bytesToClient,
        connectFailures: e.connectFailures,
        share: total > 0 ? e.total / total : 0,
        rate: this.#rates.sample(`${sp.id}|${e.key}`, at, e.total, e.bytesToEndpoint + e.bytesToClient),
      }))
      .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    this.#prune();
    return {
      sockets: (port?.sockets ?? []).map((s) => ({ pool: s.pool, port: s.port, rotation: s.endpoints, affinityClients: s.affinityClients })),
      active: stats?.active ?? 0,
      total: stats?.total ?? 0,
      bytesToEndpoint: stats?.bytesToEndpoint ?? 0,
      bytesToClient: stats?.bytesToClient ?? 0,
      retries: stats?.retries ?? 0,
      refused: { ...(stats?.refused ?? {}) },
      rate: stats ? this.#rates.sample(sp.id, at, stats.total, stats.bytesToEndpoint + stats.bytesToClient) : null,
      endpoints,
      claims: port?.claims ?? [],
      problems: port?.problems ?? [],
    };
  }

  /** #prune forgets rate samples of service ports and endpoints the relay no longer has (every 100 calls). */
  #prune(): void {
    if (++this.#sampled % 100 !== 0) return;
    const keep = new Set<string>();
    for (const p of this.#src.stats.ports.values()) {
      keep.add(p.id);
      for (const e of p.endpoints.keys()) keep.add(`${p.id}|${e}`);
    }
    this.#rates.forget(keep);
  }

  relayTotals(): RelayTotals {
    const s = this.#src.stats;
    const refused: Record<string, number> = {};
    for (const p of s.ports.values()) for (const [k, v] of Object.entries(p.refused)) if (v) refused[k] = (refused[k] ?? 0) + v;
    const l = this.#src.limits;
    return {
      tcpConnections: s.activeTcp,
      udpSessions: s.activeUdp,
      proxySockets: this.#src.proxySockets(),
      maxConnections: l.maxConnections,
      maxConnectionsPerService: l.maxConnectionsPerService,
      maxUDPSessions: l.maxUDPSessions,
      refused,
    };
  }

  connections(query: ConnectionsQuery): ConnectionsPage {
    const all = this.#src.stats.connections;
    const q = query.q.trim().toLowerCase();
    const limit = Math.max(0, Math.min(MAX_PAGE, query.limit));
    const rows: ConnectionRow[] = [];
    let total = 0;
    for (const c of all.values()) {
      if (q && !`${c.servicePort} ${c.client} ${c.endpoint} ${c.protocol.toLowerCase()}`.toLowerCase().includes(q)) continue;
      if (total >= query.offset && rows.length < limit) {
        rows.push({
          id: c.id,
          protocol: c.protocol,
          service: c.service,
          servicePort: c.servicePort,
          pool: c.pool,
          client: c.client,
          endpoint: c.endpoint,
          startedAt: c.startedAt,
          bytesToEndpoint: c.bytesToEndpoint,
          bytesToClient: c.bytesToClient,
          halfClosed: c.halfClosed,
          drainingSince: c.drainingSince,
        });
      }
      total++;
    }
    return { at: this.#clock.now(), open: all.size, total, offset: query.offset, rows };
  }
}

import { realClock, type Clock, type TimerHandle } from './clock.ts';
import { formatDuration } from './config/duration.ts';
import { modeSettings } from './config/modes.ts';
import type { ProxyConfig, RunOptions } from './config/types.ts';
import { errorMessage, NodeNotFoundError, SourceNotSyncedError } from './errors.ts';
import { nodeReference, type EventRecorder, type ObjectReference } from './events/event-recorder.ts';
import type { Logger } from './log.ts';
import type { IPFamily } from './net/ip.ts';
import { mergeCleanup, type Backend, type CleanupResult } from './proxy/backend.ts';
import { MetaProxier } from './proxy/meta-proxier.ts';
import { nodeNotFound } from './proxy/node-info.ts';
import type { ProxyState } from './proxy/proxy-state.ts';
import type { SyncObserver, SyncRecord } from './proxy/sync-loop.ts';
import type { Source } from './proxy/source.ts';

/** DaemonParts are the pieces a daemon is assembled from; tests pass fakes. */
export interface DaemonParts {
  config: ProxyConfig;
  run: RunOptions;
  nodeName: string;
  logger: Logger;
  clock?: Clock;
  /** backends: one per IP family this node proxies, the primary family first. */
  backends: readonly Backend[];
  source: Source;
  /** events: where Kubernetes Events go (the Node's events, invalid objects' warnings). */
  events: EventRecorder;
}

/** ALL_KINDS: every list a source delivers. */
const ALL_KINDS = ['Service', 'EndpointSlice', 'Node'] as const;

/** FAILURES_BEFORE_EVENT: consecutive failed syncs (the first try plus retries) before a Warning Event. */
export const FAILURES_BEFORE_EVENT = 3;

/**
 * Daemon wires one kproxy instance: a source feeds the meta proxier, which
 * hands every object to the proxier of each IP family (its ProxyState, its
 * SyncLoop deciding when its backend programs the kernel); observers
 * (metrics, health, dashboard, events) hear about every family's syncs.
 */
export class Daemon {
  readonly config: ProxyConfig;
  readonly run: RunOptions;
  readonly nodeName: string;
  readonly logger: Logger;
  readonly clock: Clock;
  /** proxy: the meta proxier, the sources' change handlers and the sync controls of every family. */
  readonly proxy: MetaProxier;
  readonly backends: readonly Backend[];
  readonly source: Source;
  readonly events: EventRecorder;
  #stopped = false;

  constructor(parts: DaemonParts) {
    this.config = parts.config;
    this.run = parts.run;
    this.nodeName = parts.nodeName;
    this.logger = parts.logger;
    this.clock = parts.clock ?? realClock;
    this.events = parts.events;
    this.source = parts.source;
    const { minSyncPeriodMs, syncPeriodMs } = modeSettings(parts.config);
    this.backends = parts.backends;
    this.proxy = new MetaProxier({
      backends: parts.backends.map((backend) => ({ family: backend.family, backend })),
      nodeName: parts.nodeName,
      clock: this.clock,
      logger: parts.logger,
      minSyncPeriodMs,
      syncPeriodMs,
      hooks: {
        onInvalid: (kind, _ref, error, obj) => {
          this.logger.warn(`${kind} skipped: ${error.message}`, { action: 'kept its last valid version, if any' });
          const meta = obj.metadata ?? {};
          if (typeof meta.name === 'string') {
            const regarding = { kind, name: meta.name, namespace: meta.namespace ?? '', ...(meta.uid ? { uid: meta.uid } : {}) };
            this.events.record(regarding, 'Warning', 'InvalidObject', 'Skip', `${error.message}; kproxy keeps its last valid version, if any`);
          }
        },
      },
    });
    this.proxy.addObserver(this.#failureEvents());
    this.proxy.addObserver(this.#skippedEvents());
  }

  /** state is the primary family's proxy state (the model of single-family readers). */
  get state(): ProxyState {
    return this.proxy.primary.state;
  }

  /** states: every proxied family's state, the primary first. */
  get states(): ProxyState[] {
    return this.proxy.proxiers.map((p) => p.state);
  }

  /** invalid: objects refused as invalid ("Service ns/name" -> why), once whatever family refused them. */
  get invalid(): ReadonlyMap<string, string> {
    return this.proxy.invalid;
  }

  /** #failureEvents records a Warning Event on the Node when syncs keep failing after retries. */
  #failureEvents(): SyncObserver {
    return {
      onSync: (rec) => {
        if (!rec.ok && rec.consecutiveFailures === FAILURES_BEFORE_EVENT) {
          this.events.record(
            nodeReference(this.nodeName),
            'Warning',
            'FailedToSyncProxyRules',
            'SyncProxyRules',
            `${rec.consecutiveFailures} ${rec.family} syncs in a row failed, the kernel keeps the ${rec.family} rules of the last good sync: ${rec.error?.message ?? 'unknown error'}`,
          );
        }
      },
    };
  }

  /**
   * #skippedEvents records a Warning Event on the Service when a backend
   * leaves one of its ports out (values it cannot write safely, a kernel
   * limit such as a full ipset), once per port and reason, per family: the
   * sync succeeded for every other Service, so nothing else would tell the
   * Service's owner. The log line is the backend's; the count is the
   * kproxy_service_ports_skipped gauge.
   */
  #skippedEvents(): SyncObserver {
    const told = new Map<IPFamily, ReadonlyMap<string, string>>();
    return {
      onSync: (rec, _checkout, result) => {
        const skipped = result.skippedServicePorts;
        if (!rec.ok || !skipped) return;
        const before = told.get(rec.family) ?? new Map<string, string>();
        told.set(rec.family, new Map(skipped));
        for (const [id, why] of skipped) {
          if (before.get(id) === why) continue;
          const regarding = serviceOfPortId(id);
          if (!regarding) continue;
          this.events.record(regarding, 'Warning', 'ServicePortSkipped', 'Skip', `${rec.family} service port ${id} is not programmed: ${why}; every other service port is`);
        }
      },
    };
  }

  /**
   * cleanup removes what every family's backend programmed (the dashboard's
   * cleanup action); the daemon keeps running.
   */
  async cleanup(): Promise<CleanupResult> {
    const results: CleanupResult[] = [];
    // One family after the other: IPVS mode's families share the sets and kube-ipvs0.
    for (const b of this.backends) results.push(await b.cleanup());
    return mergeCleanup(...results);
  }

  /** start begins watching and syncing; it resolves once the source is watching. */
  async start(): Promise<void> {
    for (const b of this.backends) await b.init?.();
    this.proxy.start();
    void this.state.whenListed(ALL_KINDS).then(() => {
      // The daemon proxies on without its Node (locality unknown); /readyz stays 503 and says why.
      if (this.#nodeMissing()) this.logger.warn(nodeNotFound(this.nodeName));
    });
    await this.source.start(this.proxy);
  }

  /** #nodeMissing: the API server listed the Nodes and none has this node's name (manifests need not describe Nodes). */
  #nodeMissing(): boolean {
    return this.source.status().kind === 'kubernetes' && !this.state.node.known;
  }

  /**
   * once reads the source, runs one full sync of each family and returns their records; rules stay
   * in place. The source is read before the backend touches anything: a source
   * that cannot be read completely (SourceNotSyncedError from start), or an API
   * server with no Node by this node's name (NodeNotFoundError), leaves the host
   * exactly as it was.
   */
  async once(opts: { timeoutMs?: number } = {}): Promise<SyncRecord[]> {
    const listed = (async () => {
      await this.source.start(this.proxy);
      // The one sync must know this node's Node (its zone, pod CIDR and addresses): all three lists first, in every family.
      await Promise.all(this.states.map((s) => s.whenListed(ALL_KINDS)));
    })();
    await this.#within(listed, opts.timeoutMs ?? 0);
    if (this.#nodeMissing()) throw new NodeNotFoundError(nodeNotFound(this.nodeName));
    for (const b of this.backends) await b.init?.();
    return this.proxy.syncOnce();
  }

  /**
   * #within waits for the source's first complete read at most timeoutMs (0:
   * as long as it takes), else throws SourceNotSyncedError naming the source and
   * what it still waits for; nothing after the wait runs then.
   */
  async #within(listed: Promise<void>, timeoutMs: number): Promise<void> {
    if (timeoutMs <= 0) return listed;
    let timer: TimerHandle | null = null;
    const late = new Promise<never>((_, reject) => {
      timer = this.clock.setTimeout(() => {
        const st = this.source.status();
        reject(new SourceNotSyncedError(`${st.description} did not sync within ${formatDuration(timeoutMs)} (--once-timeout): waiting for ${st.waitingFor ?? 'its first read'}`));
      }, timeoutMs);
    });
    try {
      await Promise.race([listed, late]);
    } finally {
      if (timer) this.clock.clearTimeout(timer);
    }
  }

  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    const results = await Promise.allSettled([this.source.stop(), this.proxy.stop()]);
    // After the loops: no sync may open sockets again (the userspace mode's relay).
    results.push(...(await Promise.allSettled(this.backends.map((b) => b.stop?.()))));
    for (const r of results) if (r.status === 'rejected') this.logger.error('stopping failed', { err: errorMessage(r.reason) });
  }
}

/** serviceOfPortId reads the Service out of a service port id ("ns/name:port/TCP", "ns/name/TCP" for an unnamed port). */
export function serviceOfPortId(id: string): ObjectReference | null {
  const m = /^([^/]+)\/([^/:]+)(?::[^/]*)?\/[A-Z]+$/.exec(id);
  return m ? { kind: 'Service', namespace: m[1], name: m[2] } : null;
}

import { realClock, type Clock } from './clock.ts';
import { modeSettings } from './config/modes.ts';
import type { ProxyConfig, RunOptions } from './config/types.ts';
import { errorMessage, NodeNotFoundError } from './errors.ts';
import { nodeReference, type EventRecorder } from './events/event-recorder.ts';
import type { Logger } from './log.ts';
import type { Backend } from './proxy/backend.ts';
import { nodeNotFound } from './proxy/node-info.ts';
import { ProxyState } from './proxy/proxy-state.ts';
import { SyncLoop, type SyncObserver, type SyncRecord } from './proxy/sync-loop.ts';
import type { Source } from './sources/source.ts';

/** DaemonParts are the pieces a daemon is assembled from; tests pass fakes. */
export interface DaemonParts {
  config: ProxyConfig;
  run: RunOptions;
  nodeName: string;
  logger: Logger;
  clock?: Clock;
  backend: Backend;
  source: Source;
  /** events: where Kubernetes Events go (the Node's events, invalid objects' warnings). */
  events: EventRecorder;
  observers?: SyncObserver[];
}

/** ALL_KINDS: every list a source delivers. */
const ALL_KINDS = ['Service', 'EndpointSlice', 'Node'] as const;

/** FAILURES_BEFORE_EVENT: consecutive failed syncs (the first try plus retries) before a Warning Event. */
export const FAILURES_BEFORE_EVENT = 3;

/**
 * Daemon wires one kproxy instance: a source feeds the ProxyState, the SyncLoop
 * decides when the backend programs the kernel, observers (metrics, health,
 * dashboard, events) hear about every sync.
 */
export class Daemon {
  readonly config: ProxyConfig;
  readonly run: RunOptions;
  readonly nodeName: string;
  readonly logger: Logger;
  readonly clock: Clock;
  readonly state: ProxyState;
  readonly loop: SyncLoop;
  readonly backend: Backend;
  readonly source: Source;
  readonly events: EventRecorder;
  #stopped = false;

  constructor(parts: DaemonParts) {
    this.config = parts.config;
    this.run = parts.run;
    this.nodeName = parts.nodeName;
    this.logger = parts.logger;
    this.clock = parts.clock ?? realClock;
    this.backend = parts.backend;
    this.events = parts.events;
    this.source = parts.source;
    this.state = new ProxyState({
      family: 'IPv4',
      nodeName: parts.nodeName,
      clock: this.clock,
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
    // The loop listens to the state's changes from here on.
    const { minSyncPeriodMs, syncPeriodMs } = modeSettings(parts.config);
    this.loop = new SyncLoop({
      state: this.state,
      backend: parts.backend,
      clock: this.clock,
      logger: parts.logger.child('sync'),
      minSyncPeriodMs,
      syncPeriodMs,
      observers: [...(parts.observers ?? []), this.#failureEvents()],
    });
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
            `${rec.consecutiveFailures} syncs in a row failed, the kernel keeps the rules of the last good sync: ${rec.error?.message ?? 'unknown error'}`,
          );
        }
      },
    };
  }

  /** start begins watching and syncing; it resolves once the source is watching. */
  async start(): Promise<void> {
    await this.backend.init?.();
    this.loop.start();
    void this.state.whenListed(ALL_KINDS).then(() => {
      // The daemon proxies on without its Node (locality unknown); /readyz stays 503 and says why.
      if (this.#nodeMissing()) this.logger.warn(nodeNotFound(this.nodeName));
    });
    await this.source.start(this.state);
  }

  /** #nodeMissing: the API server listed the Nodes and none has this node's name (manifests need not describe Nodes). */
  #nodeMissing(): boolean {
    return this.source.status().kind === 'kubernetes' && !this.state.node.known;
  }

  /**
   * once reads the source, runs one full sync and returns its record; rules stay
   * in place. The source is read before the backend touches anything: a source
   * that cannot be read completely (SourceNotSyncedError from start), or an API
   * server with no Node by this node's name (NodeNotFoundError), leaves the host
   * exactly as it was.
   */
  async once(): Promise<SyncRecord> {
    await this.source.start(this.state);
    // The one sync must know this node's Node (its zone, pod CIDR and addresses): all three lists first.
    await this.state.whenListed(ALL_KINDS);
    if (this.#nodeMissing()) throw new NodeNotFoundError(nodeNotFound(this.nodeName));
    await this.backend.init?.();
    return this.loop.syncOnce();
  }

  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    const results = await Promise.allSettled([this.source.stop(), this.loop.stop()]);
    for (const r of results) if (r.status === 'rejected') this.logger.error('stopping failed', { err: errorMessage(r.reason) });
  }
}

import type { SourceStatus } from '../../sources/source.ts';
import { nodeNotFound, type NodeInfo } from '../node-info.ts';
import type { SyncRecord } from '../sync-loop.ts';
import type { ProxyHealth } from './proxy-health.ts';

/** Readiness is what /readyz answers: ready or not, and why not. */
export interface Readiness {
  readonly ready: boolean;
  /** reason: why not ready (null when ready). */
  readonly reason: string | null;
  /** firstSyncAt: epoch ms of the first successful sync, null before it. */
  readonly firstSyncAt: number | null;
}

export interface ProxyReadinessOptions {
  health: ProxyHealth;
  source: () => SourceStatus;
  node: () => NodeInfo;
}

/**
 * ProxyReadiness means "has synced": not ready until the sources have listed
 * everything they were pointed at and a full sync has succeeded, then ready
 * as long as /healthz is (kube-proxy's health and node eligibility) and, with
 * the Kubernetes source, this node's Node exists. kube-proxy has no readiness
 * endpoint: its /healthz is 200 from start-up, before anything was programmed,
 * which is right for load balancers and the kubelet's liveness but lets a
 * rolling update count a proxy that never synced as available.
 */
export class ProxyReadiness {
  readonly #o: ProxyReadinessOptions;
  #firstSyncAt: number | null = null;
  #failure: SyncRecord['error'] | null = null;

  constructor(opts: ProxyReadinessOptions) {
    this.#o = opts;
  }

  /** observe takes every finished sync (the health observer passes them on). */
  observe(record: SyncRecord): void {
    if (record.ok) {
      this.#firstSyncAt ??= record.finishedAt;
      this.#failure = null;
    } else {
      this.#failure = record.error ?? { code: 'KPROXY_ERR_SYNC_FAILED', message: 'unknown error' };
    }
  }

  readiness(): Readiness {
    const reason = this.#reason();
    return { ready: reason === null, reason, firstSyncAt: this.#firstSyncAt };
  }

  #reason(): string | null {
    const src = this.#o.source();
    const waiting = `waiting for ${src.description} to sync: ${src.waitingFor ?? 'its initial lists'}`;
    if (this.#firstSyncAt === null) {
      if (!src.synced) return `nothing synced yet, ${waiting}`;
      if (this.#failure) return `the first sync failed and is retried: ${this.#failure.message} [${this.#failure.code}]`;
      return 'the first sync is running';
    }
    const node = this.#o.node();
    if (src.kind === 'kubernetes' && !node.known) {
      // kube-proxy waits for its Node before it proxies at all; kproxy keeps Services
      // working, but a node name that matches no Node is a bad configuration to stop a rollout on.
      return src.synced ? nodeNotFound(node.name) : waiting;
    }
    const { health } = this.#o;
    if (!health.health().healthy) return `not healthy: a change has waited more than ${Math.round(health.healthTimeoutMs / 1000)} s without a successful sync`;
    if (!health.nodeEligible()) return `Node ${node.name} is being deleted or is tainted ToBeDeletedByClusterAutoscaler`;
    return null;
  }
}

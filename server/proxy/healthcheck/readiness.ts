import type { IPFamily } from '../../net/ip.ts';
import type { SourceStatus } from '../../sources/source.ts';
import { nodeNotFound, type NodeInfo } from '../node-info.ts';
import type { SyncRecord } from '../sync-loop.ts';
import type { ProxyHealth } from './proxy-health.ts';

/** Readiness is what /readyz answers: ready or not, and why not. */
export interface Readiness {
  readonly ready: boolean;
  /** reason: why not ready (null when ready). */
  readonly reason: string | null;
  /** firstSyncAt: epoch ms at which the last family to sync had its first successful sync, null before every family has. */
  readonly firstSyncAt: number | null;
}

export interface ProxyReadinessOptions {
  health: ProxyHealth;
  /** families: every IP family the daemon proxies (dual-stack: both); each must have synced. */
  families: readonly IPFamily[];
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
  /** #synced: the first successful sync of each family. */
  readonly #synced = new Map<IPFamily, number>();
  readonly #failure = new Map<IPFamily, NonNullable<SyncRecord['error']>>();

  constructor(opts: ProxyReadinessOptions) {
    this.#o = opts;
  }

  /** observe takes every finished sync (the health observer passes them on). */
  observe(record: SyncRecord): void {
    if (record.ok) {
      if (!this.#synced.has(record.family)) this.#synced.set(record.family, record.finishedAt);
      this.#failure.delete(record.family);
    } else {
      this.#failure.set(record.family, record.error ?? { code: 'KPROXY_ERR_SYNC_FAILED', message: 'unknown error' });
    }
  }

  readiness(): Readiness {
    const reason = this.#reason();
    return { ready: reason === null, reason, firstSyncAt: this.#firstSyncAt() };
  }

  #firstSyncAt(): number | null {
    if (this.#o.families.some((f) => !this.#synced.has(f))) return null;
    return Math.max(...this.#o.families.map((f) => this.#synced.get(f) ?? 0));
  }

  #reason(): string | null {
    const src = this.#o.source();
    const waiting = `waiting for ${src.description} to sync: ${src.waitingFor ?? 'its initial lists'}`;
    const pending = this.#o.families.filter((f) => !this.#synced.has(f));
    if (pending.length > 0) {
      if (!src.synced) return `nothing synced yet, ${waiting}`;
      // A dual-stack node is ready once each family's proxier has programmed its rules.
      const which = this.#o.families.length > 1 ? ` (${pending.join(', ')})` : '';
      const failed = pending.find((f) => this.#failure.has(f));
      if (failed) {
        const e = this.#failure.get(failed)!;
        return `the first sync${which} failed and is retried: ${e.message} [${e.code}]`;
      }
      return `the first sync${which} is running`;
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

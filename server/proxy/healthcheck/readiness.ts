import type { IPFamily } from '../../net/ip.ts';
import type { SourceStatus } from '../source.ts';
import { nodeNotFound, type NodeInfo } from '../node-info.ts';
import type { SyncRecord } from '../sync-loop.ts';
import type { ProxyHealth } from './proxy-health.ts';

/**
 * Readiness is ready or not, and why not: in detail for the log and the
 * dashboard (behind auth), and in a few fixed words for /readyz (:10256, open
 * to anything that reaches the node).
 */
export interface Readiness {
  readonly ready: boolean;
  /**
   * reason: why not ready, in detail (null when ready): the file, line and
   * error a source waits on, the first sync's error (which quotes rules,
   * Service names and addresses). The dashboard shows it; never serve it on :10256.
   */
  readonly reason: string | null;
  /** probeReason: why not ready in one of the fixed PROBE_REASONS (null when ready): what /readyz says. */
  readonly probeReason: ProbeReason | null;
  /** firstSyncAt: epoch ms at which the last family to sync had its first successful sync, null before every family has. */
  readonly firstSyncAt: number | null;
}

/**
 * PROBE_REASONS are everything /readyz may say about why it is not ready:
 * fixed texts, nothing taken from an object, an error or a rule, so the
 * unauthenticated health port gives away neither the cluster's Services and
 * addresses nor a body whose size anyone else controls. Each points to where
 * the detail is: the log (where each cause is logged as it happens), the
 * dashboard's Overview and the Events.
 */
export const PROBE_REASONS = {
  sourceNotSynced: 'nothing synced yet: the source has not listed everything (see the log)',
  firstSyncRunning: 'the first sync is running',
  firstSyncFailed: 'the first sync failed and is retried (see the log)',
  nodeNotFound: "this node's Node was not found in the cluster (check --hostname-override; see the log)",
  unhealthy: 'not healthy: a change has waited too long without a successful sync (see the log)',
  nodeNotEligible: 'the Node is being deleted or is tainted ToBeDeletedByClusterAutoscaler',
} as const;

/** ProbeReason is one of PROBE_REASONS, with the family still pending on a dual-stack node ("(IPv4)"). */
export type ProbeReason = string;

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
    const why = this.#why();
    return { ready: why === null, reason: why?.detail ?? null, probeReason: why?.probe ?? null, firstSyncAt: this.#firstSyncAt() };
  }

  #firstSyncAt(): number | null {
    if (this.#o.families.some((f) => !this.#synced.has(f))) return null;
    return Math.max(...this.#o.families.map((f) => this.#synced.get(f) ?? 0));
  }

  #why(): { detail: string; probe: ProbeReason } | null {
    const src = this.#o.source();
    const waiting = `waiting for ${src.description} to sync: ${src.waitingFor ?? 'its initial lists'}`;
    const pending = this.#o.families.filter((f) => !this.#synced.has(f));
    if (pending.length > 0) {
      if (!src.synced) return { detail: `nothing synced yet, ${waiting}`, probe: PROBE_REASONS.sourceNotSynced };
      // A dual-stack node is ready once each family's proxier has programmed its rules.
      const which = this.#o.families.length > 1 ? ` (${pending.join(', ')})` : '';
      const failed = pending.find((f) => this.#failure.has(f));
      if (failed) {
        const e = this.#failure.get(failed)!;
        return { detail: `the first sync${which} failed and is retried: ${e.message} [${e.code}]`, probe: withFamilies(PROBE_REASONS.firstSyncFailed, which) };
      }
      return { detail: `the first sync${which} is running`, probe: withFamilies(PROBE_REASONS.firstSyncRunning, which) };
    }
    const node = this.#o.node();
    if (src.kind === 'kubernetes' && !node.known) {
      // kube-proxy waits for its Node before it proxies at all; kproxy keeps Services
      // working, but a node name that matches no Node is a bad configuration to stop a rollout on.
      return src.synced ? { detail: nodeNotFound(node.name), probe: PROBE_REASONS.nodeNotFound } : { detail: waiting, probe: PROBE_REASONS.sourceNotSynced };
    }
    const { health } = this.#o;
    if (!health.health().healthy) {
      return { detail: `not healthy: a change has waited more than ${Math.round(health.healthTimeoutMs / 1000)} s without a successful sync`, probe: PROBE_REASONS.unhealthy };
    }
    if (!health.nodeEligible()) return { detail: `Node ${node.name} is being deleted or is tainted ToBeDeletedByClusterAutoscaler`, probe: PROBE_REASONS.nodeNotEligible };
    return null;
  }
}

/** withFamilies puts the pending families (" (IPv4)", a fixed word each) after "the first sync". */
function withFamilies(reason: string, which: string): ProbeReason {
  return which === '' ? reason : reason.replace('the first sync', `the first sync${which}`);
}

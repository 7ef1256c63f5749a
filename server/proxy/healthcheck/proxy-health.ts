import type { Clock } from '../../clock.ts';
import type { IPFamily } from '../../net/ip.ts';
import type { NodeInfo } from '../node-info.ts';

/** ProxierHealth is the health of the proxier of one IP family (kube-proxy's ProxierHealth). */
export interface ProxierHealth {
  /** lastUpdated: epoch ms of the family's last successful sync (or of the sync loop's start). */
  readonly lastUpdated: number;
  readonly healthy: boolean;
}

/** ProxyHealthStatus is what /healthz and /livez report (kube-proxy's ProxyHealth). */
export interface ProxyHealthStatus {
  /** lastUpdated: the most recent family's lastUpdated; null before any (Go's zero time). */
  readonly lastUpdated: number | null;
  readonly currentTime: number;
  /** healthy: every family is healthy (node eligibility is not part of it). */
  readonly healthy: boolean;
  readonly status: Readonly<Partial<Record<IPFamily, ProxierHealth>>>;
}

export interface ProxyHealthOptions {
  clock: Clock;
  /** healthTimeoutMs: how long a queued update may wait for a sync (kube-proxy: 2 × syncPeriod). */
  healthTimeoutMs: number;
  /** node returns what kproxy currently knows about its Node. */
  node: () => NodeInfo;
}

/**
 * ProxyHealth is kube-proxy's ProxyHealthServer state machine without the
 * server: a proxier is unhealthy once an update has been queued for longer
 * than the health timeout without a successful sync since, and the node is
 * ineligible while it is being deleted or carries the cluster autoscaler's
 * ToBeDeletedByClusterAutoscaler taint.
 * See pkg/proxy/healthcheck/proxy_health.go.
 */
export class ProxyHealth {
  readonly #o: ProxyHealthOptions;
  readonly #lastUpdated = new Map<IPFamily, number>();
  readonly #oldestPendingQueued = new Map<IPFamily, number>();
  #nodeSeen = false;

  constructor(opts: ProxyHealthOptions) {
    this.#o = opts;
  }

  get healthTimeoutMs(): number {
    return this.#o.healthTimeoutMs;
  }

  /** updated records a successful sync of one family: whatever was queued is now programmed. */
  updated(family: IPFamily, at: number = this.#o.clock.now()): void {
    this.#oldestPendingQueued.delete(family);
    this.#lastUpdated.set(family, at);
  }

  /** queuedUpdate records a change waiting for a sync; only the oldest pending one counts. */
  queuedUpdate(family: IPFamily, at: number = this.#o.clock.now()): void {
    if (!this.#oldestPendingQueued.has(family)) this.#oldestPendingQueued.set(family, at);
  }

  /** health evaluates every family at the current time. */
  health(): ProxyHealthStatus {
    const now = this.#o.clock.now();
    const status: Partial<Record<IPFamily, ProxierHealth>> = {};
    let lastUpdated: number | null = null;
    let healthy = true;
    for (const [family, updatedAt] of this.#lastUpdated) {
      if (lastUpdated === null || updatedAt > lastUpdated) lastUpdated = updatedAt;
      const queuedAt = this.#oldestPendingQueued.get(family);
      // A proxier that is starting up or fully synced has nothing queued: healthy.
      // One with a queued update is healthy until the update is health-timeout late.
      const familyHealthy = queuedAt === undefined || now - queuedAt < this.#o.healthTimeoutMs;
      if (!familyHealthy) healthy = false;
      status[family] = { lastUpdated: updatedAt, healthy: familyHealthy };
    }
    return { lastUpdated, currentTime: now, healthy, status };
  }

  /**
   * nodeEligible: the Node is neither being deleted nor tainted for deletion.
   * A Node that was seen and then vanished counts as deleted; a Node never seen
   * (a manifest-file source without one) does not make the node ineligible.
   */
  nodeEligible(): boolean {
    const node = this.#o.node();
    if (node.known) this.#nodeSeen = true;
    else if (this.#nodeSeen) return false;
    return !node.deleting && !node.toBeDeleted;
  }

  /** noteNode lets a sync record that the Node object has been seen (so its later removal counts). */
  noteNode(node: NodeInfo): void {
    if (node.known) this.#nodeSeen = true;
  }
}

/**
 * goTimeJSON renders epoch ms the way Go's json.Marshal renders a time.Time
 * (RFC 3339 with trailing zeros of the fraction dropped); null is Go's zero time.
 */
export function goTimeJSON(ms: number | null): string {
  if (ms === null) return '0001-01-01T00:00:00Z';
  const iso = new Date(Math.floor(ms)).toISOString(); // 2026-01-01T00:00:00.120Z
  return iso.replace(/\.(\d*?)0*Z$/, (_m, digits: string) => (digits ? `.${digits}Z` : 'Z'));
}

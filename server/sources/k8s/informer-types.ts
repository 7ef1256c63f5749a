import type { ObjectKind } from '../../proxy/proxy-state.ts';

/** InformerKind: what an informer watches; ServiceCIDRs only in nftables mode (kube-proxy's ServiceCIDRConfig). */
export type InformerKind = ObjectKind | 'ServiceCIDR';
import { DEFAULT_BACKOFF, type BackoffOptions } from './backoff.ts';

/** WatchClient is the part of client-node's Watch the informer uses (a fake replaces it in unit tests). */
export interface WatchClient {
  watch(
    path: string,
    queryParams: Record<string, string | number | boolean | undefined>,
    callback: (phase: string, apiObj: any, watchObj?: any) => void,
    done: (err: any) => void,
  ): Promise<AbortController>;
}

/** InformerTuning holds the timings of list, watch and recovery. */
export interface InformerTuning {
  backoff: BackoffOptions;
  /** quietRelistMs: relist when a watch delivered nothing (no event, no BOOKMARK) this long. */
  quietRelistMs: number;
  /**
   * watchTimeoutSeconds: [min, max) of the timeoutSeconds asked of the server per
   * watch, random like client-go's reflector, so watches end and resume on their
   * own schedule instead of all at once.
   */
  watchTimeoutSeconds: readonly [number, number];
}

export const DEFAULT_TUNING: InformerTuning = { backoff: DEFAULT_BACKOFF, quietRelistMs: 10 * 60_000, watchTimeoutSeconds: [300, 600] };

/** InformerCounters are an informer's own metrics. */
export interface InformerCounters {
  lists: number;
  relists: number;
  /** quietRelists: relists because the watch went quiet (also counted in relists). */
  quietRelists: number;
  /** expired: 410 Gone answers (history compacted past our resourceVersion). */
  expired: number;
  connects: number;
  disconnects: number;
  errors: number;
  restarts: number;
  events: number;
  bookmarks: number;
  adds: number;
  updates: number;
  deletes: number;
  /** malformed: objects without a name, dropped before they reach the cache. */
  malformed: number;
  /** handlerErrors: exceptions thrown by the change handlers (a bug; logged). */
  handlerErrors: number;
}

/** InformerState: starting (listing or connecting the watch), watching, backoff (waiting to retry). */
export type InformerState = 'idle' | 'starting' | 'watching' | 'backoff' | 'stopped';

export interface InformerStatus {
  readonly kind: InformerKind;
  readonly state: InformerState;
  readonly synced: boolean;
  readonly objects: number;
  /** lastError: the failure the informer is recovering from (cleared once its watch is open again). */
  readonly lastError?: string;
  readonly lastErrorAt?: number;
  readonly counters: Readonly<InformerCounters>;
}

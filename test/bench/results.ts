/**
 * results: the shape of a benchmark run's JSON (test/bench/results/*.json),
 * what run.ts fills in and report.ts renders.
 */
import type { ApiChurnResult } from './api-churn.ts';
import type { ChurnResult } from './churn.ts';
import type { ColdStart } from './coldstart.ts';
import type { ConnectTimes } from './dataplane.ts';
import type { FullSyncRun, MemoryOnly } from './full-sync.ts';
import type { DualStackRun } from './dual-stack.ts';
import type { Machine } from './machine.ts';
import type { ClientConnected, ExampleIdle } from './memory.ts';
import type { NftablesRun } from './nftables.ts';
import type { TraceBench } from './trace.ts';
import type { ParseBench } from './parse.ts';
import type { LivezLoadResult } from './livez-load.ts';
import type { UserspaceRun } from './userspace.ts';
import type { PartialSample } from './partial-sync.ts';
import type { Flavor } from './replay.ts';
import type { Percentiles } from './stats.ts';

export interface Size {
  readonly services: number;
  readonly endpoints: number;
}

export const sizeName = (s: Size) => `${s.services.toLocaleString('en-US')} × ${s.endpoints}`;

export interface FullSyncResult {
  readonly size: Size;
  readonly flavor: Flavor;
  readonly runs: FullSyncRun[];
  readonly error?: string;
}

export interface PartialResult {
  readonly size: Size;
  readonly flavor: Flavor;
  readonly samples: PartialSample[];
  /** kernelFloorMs: a bare restore adding one chain and rule in the same namespace (partial-sync.ts). */
  readonly kernelFloorMs: number;
}

export interface ChurnEntry extends ChurnResult, Partial<Pick<ApiChurnResult, 'firstSyncMs' | 'startToSyncedMs' | 'apiLists' | 'apiWatches'>> {
  readonly size: Size;
  readonly flavor: Flavor;
  readonly minSyncPeriodMs: number;
  /** source: the path the changes took, the file source or the Kubernetes API (api-churn.ts); older results: file. */
  readonly source?: 'file' | 'api';
  /** mode: the proxy mode the daemon ran in (older results: iptables); nftables mode's flavor field is meaningless. */
  readonly mode?: 'iptables' | 'nftables';
  /** maxSumErrorMs: nftables mode, the latency attribution's check against the daemon's histogram (churn.ts). */
  readonly maxSumErrorMs?: number;
}

export interface DataPlaneResult {
  readonly size: Size;
  readonly flavor: Flavor;
  /** noRules: straight to the pod before kproxy started (the network alone). */
  readonly noRules: ConnectTimes;
  readonly withRules: ConnectTimes;
}

export interface DashboardResult {
  readonly size: Size;
  readonly flavor: Flavor;
  readonly snapshotBytes: number;
  /** snapshotBuildMs: the server's own time to build and serialise it (overview.stream.lastSnapshotMs). */
  readonly snapshotBuildMs: number | null;
  /** connectToSnapshotMs: WebSocket open to the snapshot received, in the agent. */
  readonly connectToSnapshotMs: number;
  readonly deltaBytes: number[];
}

export interface LeakResult {
  readonly services: number;
  readonly endpoints: number;
  readonly syncs: number;
  readonly wallS: number;
  readonly samples: { syncs: number; rssMiB: number; heapMiB: number; externalMiB: number; inputsKeptMiB: number; newSpaceMiB: number }[];
  /**
   * inputsKept: growth of the restore inputs the dashboard holds as text until it folds them (bounded, 16 MiB).
   * newSpace: growth of V8's young generation, which V8 resizes by itself (bounded by --max-semi-space-size).
   */
  readonly growthMiB: { rss: number; heap: number; inputsKept: number; newSpace: number; from: number; to: number };
  readonly syncMs: Percentiles;
  readonly observerMs: { metrics: Percentiles; health: Percentiles; dashboard: Percentiles };
}

/** ListDecode is list-decode.ts's answer: the same list bodies decoded both ways, best of a few runs. */
export interface ListDecode {
  readonly objects: number;
  readonly bytes: number;
  /** plainMs: JSON.parse and keeping the fields kproxy reads (what the Kubernetes source does). */
  readonly plainMs: number;
  /** modelsMs: JSON.parse and client-node's ObjectSerializer into its model classes (the generated list calls). */
  readonly modelsMs: number;
}

export interface TargetResult {
  readonly name: string;
  readonly target: string;
  readonly measured: string;
  readonly met: boolean | null;
  readonly note?: string;
}

export interface Results {
  readonly mode: 'quick' | 'full';
  readonly startedAt: string;
  durationS: number;
  readonly machine: Machine;
  /** loadAverageAtEnd: 1, 5 and 15 minute load averages when the run ended (older results: absent). */
  loadAverageAtEnd?: number[];
  readonly fullSync: FullSyncResult[];
  readonly partial: PartialResult[];
  readonly churn: ChurnEntry[];
  readonly dataPlane: DataPlaneResult[];
  readonly dashboard: DashboardResult[];
  leak: LeakResult | null;
  /** memoryVariants: the daemon's memory with parts switched off, at the RSS target's size. */
  readonly memoryVariants: (MemoryOnly & { size: Size; flavor: Flavor })[];
  /** exampleIdle: the example cluster in --dry-run, idle, per mode (memory part; older results: absent). */
  exampleIdle?: ExampleIdle[];
  /** clientConnected: memory while a dashboard client stays connected (memory part, at 10,000 × 10). */
  clientConnected?: (ClientConnected & { size: Size; flavor: Flavor })[];
  /** coldStart: spawn → first sync done through each source, with the breakdown (coldstart.ts). */
  coldStart?: ColdStart[];
  /** listDecode: decoding listed objects (list-decode.ts): kproxy's plain JSON against client-node's model classes. */
  listDecode?: ListDecode;
  /** dualStack: a dual-stack cluster, both families' full syncs and a partial sync per family (optional in older results). */
  dualStack?: DualStackRun[];
  /** nftables: nftables mode's own measurements (nftables.ts; its churn is in churn with mode nftables). */
  nftables?: NftablesRun[];
  /** userspace: the userspace mode's relay against iptables DNAT (userspace.ts). */
  userspace?: UserspaceRun;
  /** trace: the packet tracer over parsed reads of each mode (trace.ts). */
  trace?: TraceBench;
  /** parse: the file source's parse of a 20,000-document stream, JSON- and YAML-shaped (parse.ts). */
  parse?: ParseBench;
  /** livez: /livez latency while the dashboard and the health port are hammered (livez-load.ts). */
  livez?: LivezLoadResult;
  targets: TargetResult[];
  readonly notes: string[];
  /** only: the parts measured when the run was limited to some (run.ts --only). */
  readonly only?: string[];
}

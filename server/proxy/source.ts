import type { ChangeHandlers } from './proxy-state.ts';

/** SourceStatus is a source's state for logs, metrics and the dashboard. */
export interface SourceStatus {
  readonly kind: 'kubernetes' | 'file';
  /** description: where objects come from ("file:deploy/examples/", "https://10.0.0.1:6443"). */
  readonly description: string;
  readonly synced: boolean;
  /**
   * waitingFor: while not synced, what the source waits for, with the errors
   * that hold it ("a.yaml:2:1: invalid YAML: …", "Services not listed yet: …");
   * readiness, --once and the dashboard show it.
   */
  readonly waitingFor?: string;
  readonly objects: number;
  readonly lastError?: string;
  readonly lastErrorAt?: number;
  /** counters: connects, relists, errors, reloads... (kproxy's own metrics). */
  readonly counters: Readonly<Record<string, number>>;
}

/**
 * Source delivers Service, EndpointSlice and Node events for this node to the
 * change handlers. It is the proxy's contract, declared here where the proxy
 * consumes it (the sync observers, health, metrics); server/sources implements
 * it (informers, manifest files). start() resolves once watching has begun (not necessarily
 * after the initial list; handlers.onSynced says that). A source is synced
 * only once everything it was pointed at has been read completely at least
 * once; before that kproxy programs nothing.
 */
export interface Source {
  start(handlers: ChangeHandlers): Promise<void>;
  stop(): Promise<void>;
  status(): SourceStatus;
}

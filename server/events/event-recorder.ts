/**
 * Kubernetes Events kproxy records about the objects it serves (its Node at
 * start, sync failures, refused Services): the EventRecorder interface every
 * component calls, and the pieces shared by its implementations.
 */
export type EventType = 'Normal' | 'Warning';

/** ObjectReference names the object an Event is about (events.k8s.io/v1 `regarding`). */
export interface ObjectReference {
  readonly kind: string;
  readonly name: string;
  /** namespace: "" or absent for cluster-scoped objects such as Nodes. */
  readonly namespace?: string;
  readonly uid?: string;
  readonly apiVersion?: string;
}

/**
 * EventRecorder records an Event. record() never blocks and never throws:
 * delivery is best effort, and an implementation that cannot deliver logs and
 * counts the failure instead of disturbing the caller.
 */
export interface EventRecorder {
  record(regarding: ObjectReference, type: EventType, reason: string, action: string, note: string): void;
}

/** RecordedEvent is one record() call as the dashboard and logs see it. */
export interface RecordedEvent {
  /** seq: increasing number per recorder (the dashboard resumes a stream from it). */
  readonly seq: number;
  readonly time: number;
  readonly regarding: ObjectReference;
  readonly type: EventType;
  readonly reason: string;
  readonly action: string;
  readonly note: string;
}

/**
 * nodeReference is the reference kube-proxy records its Node events against:
 * kind Node, the node name, UID set to the node name (kube-proxy does not look
 * the Node up for its UID), and no namespace.
 */
export function nodeReference(nodeName: string): ObjectReference {
  return { kind: 'Node', name: nodeName, uid: nodeName, namespace: '' };
}

/** Reason and action of kube-proxy's start event ("birth cry"), which kproxy mirrors. */
export const REASON_STARTING = 'Starting';
export const ACTION_START = 'StartKubeProxy';

/** recordStarting records the Normal "Starting" event on this node, as kube-proxy does once its informers run. */
export function recordStarting(recorder: EventRecorder, nodeName: string): void {
  recorder.record(nodeReference(nodeName), 'Normal', REASON_STARTING, ACTION_START, '');
}

/** teeRecorder sends every event to each recorder (memory for the dashboard, the API for kubectl). */
export function teeRecorder(...recorders: EventRecorder[]): EventRecorder {
  return {
    record(regarding, type, reason, action, note) {
      for (const r of recorders) r.record(regarding, type, reason, action, note);
    },
  };
}

/** describeRef renders a reference for logs: "Node node-a", "Service default/web". */
export function describeRef(ref: ObjectReference): string {
  return `${ref.kind} ${ref.namespace ? `${ref.namespace}/` : ''}${ref.name}`;
}

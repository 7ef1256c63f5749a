import type { TraceStep } from '../dashboard/protocol.ts';
import type { Packet } from './packet.ts';

/**
 * A flow is one way a traced packet can go: its packet as the rules left it,
 * its chance (a statistic match or a numgen choice splits a flow in two or
 * more), the steps it took, and what the tracer had to assume on the way.
 * Flows are immutable: a step makes a new flow, so branches share their
 * common past and never each other's future.
 */
export interface Flow {
  readonly pkt: Packet;
  /** p: the chance of a new connection taking this way (0..1). */
  readonly p: number;
  readonly steps: readonly TraceStep[];
  /** notes: assumptions made on this way (a rule that could not be evaluated, an affinity entry). */
  readonly notes: readonly string[];
  /** affinity: ClientIP affinity met on this way: a client the kernel remembers in list/set `chain`'s entry goes to that chain's endpoint. */
  readonly affinity: readonly Affinity[];
}

/** Affinity is one "sticky if the client has an entry" rule a flow passed without knowing the answer. */
export interface Affinity {
  /** chain: the endpoint chain a remembered client goes to (KUBE-SEP-…, endpoint-…). */
  readonly chain: string;
  readonly text: string;
}

/** FlowEnd is how a flow leaves the rules: let through, or stopped. */
export type FlowEnd = 'accept' | 'drop' | 'reject';

/** Finished is a flow at its end; by is the step that stopped it (a DROP or REJECT rule, a policy), if one did. */
export interface Finished {
  readonly flow: Flow;
  readonly end: FlowEnd;
  readonly by: TraceStep | null;
}

export function newFlow(pkt: Packet): Flow {
  return { pkt, p: 1, steps: [], notes: [], affinity: [] };
}

export function withStep(f: Flow, s: TraceStep): Flow {
  return { ...f, steps: [...f.steps, s] };
}

export function withNote(f: Flow, note: string): Flow {
  return f.notes.includes(note) ? f : { ...f, notes: [...f.notes, note] };
}

/** MAX_DEPTH: jumps followed before the tracer gives up (netfilter itself refuses loops; this guards a corrupt read). */
export const MAX_DEPTH = 64;

/** MIN_CHANCE: branches less likely than this are not followed (a chain of statistic rules never gets there). */
export const MIN_CHANCE = 1e-9;

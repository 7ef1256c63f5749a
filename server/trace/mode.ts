import type { KernelKind, TraceQuery, TraceStep } from '../dashboard/protocol.ts';
import type { Finished } from './flow.ts';
import type { NodeFacts, Packet } from './packet.ts';
import type { Summary } from './result.ts';
import type { TraceTables } from './tables.ts';

/**
 * ServiceNames answers which service port an address belongs to, from
 * kproxy's own model of the cluster (the dashboard's, or --dry-run's): IPVS
 * mode's kernel objects carry no names. Optional: without it, names come from
 * the rules alone.
 */
export interface ServiceNames {
  /** byAddress: the service port with this cluster, external or load balancer IP and port, and which of them it is. */
  byAddress(proto: string, ip: string, port: number): { name: string; kind: string } | null;
  byNodePort(proto: string, port: number): string | null;
  /** portsOf: the ports ("80/tcp") and owner of a service address, for "port 81 is not a port of …". */
  portsOf(ip: string): { name: string; ports: string[] } | null;
}

/** ExplainInput is what a mode's explanation reads. */
export interface ExplainInput {
  readonly q: TraceQuery;
  readonly tables: TraceTables;
  readonly summary: Summary;
  readonly names: ServiceNames | null;
  readonly facts: NodeFacts;
}

/**
 * ModeTracer is one proxy mode's part of the tracer: how a packet walks its
 * kernel objects, which steps accept a packet for a Service, and how to say
 * the outcome in Service terms. Each mode has one in TRACERS (tracer.ts): a
 * new mode adds its own there.
 */
export interface ModeTracer {
  readonly kind: KernelKind;
  /** sharedTables: tables both IP families share (IPVS: ipvs, ipsets, addresses). */
  readonly sharedTables: readonly string[];
  walk(tables: TraceTables, pkt: Packet, facts: NodeFacts): Finished[];
  serviceAccept(step: TraceStep): boolean;
  explain(input: ExplainInput): { service: string | null; reason: string };
}

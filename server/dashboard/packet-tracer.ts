import type { Clock } from '../clock.ts';
import { TraceUnavailableError } from '../errors.ts';
import type { NodeInfo } from '../proxy/node-info.ts';
import type { ServicePort } from '../proxy/service-port.ts';
import type { KernelReader } from './kernel-reader.ts';
import type { KernelViewProvider } from './kernel-view.ts';
import type { TraceResult } from './protocol.ts';

/**
 * The packet tracer as the dashboard serves it (GET /api/v1/trace). The
 * tracer (server/trace/) walks the dashboard's kernel reads, so it sits above
 * the dashboard and the dashboard never imports it: the composition hands a
 * PacketTracerFactory in (server/assemble.ts, server/trace/dashboard-trace.ts).
 */

/** TraceRequest is a trace request as the client typed it (the query parameters); the tracer checks it. */
export interface TraceRequest {
  readonly proto?: string;
  readonly src?: string;
  readonly dst?: string;
  readonly from?: string;
}

/** PacketTracer answers one trace request through the dashboard's current kernel read. */
export interface PacketTracer {
  /** trace checks the request (TraceInputError, 400, names the field) and traces it. */
  trace(request: TraceRequest): Promise<TraceResult>;
}

/** DashboardTraceParts are what a tracer reads of the dashboard. */
export interface DashboardTraceParts {
  readonly reader: KernelReader;
  readonly provider: KernelViewProvider;
  /** states: each family's Services and Node (kproxy's model: names for IPVS objects, the simulated node's addresses). */
  readonly states: () => readonly { readonly services: ReadonlyMap<string, ServicePort>; readonly node: NodeInfo }[];
  readonly clock: Clock;
  /** touch: the dashboard is in use (keeps its parsed tables from the idle release). */
  readonly touch: () => void;
}

/** PacketTracerFactory builds the tracer over one dashboard's parts. */
export type PacketTracerFactory = (parts: DashboardTraceParts) => PacketTracer;

/** noPacketTracer answers every request with TraceUnavailableError (503): a dashboard built without a tracer. */
export const noPacketTracer: PacketTracer = {
  trace: async () => {
    throw new TraceUnavailableError('this dashboard has no packet tracer');
  },
};

import type { TraceStep } from '../dashboard/protocol.ts';
import type { Finished, Flow, FlowEnd } from './flow.ts';

/** Stage is one step of a packet's journey (a base chain, IPVS): flows in, the flows that go on and those that ended out. */
export type Stage = (flow: Flow) => { going: Flow[]; done: Finished[] };

/** chainStageOf makes a stage of a chain runner: accepted flows go on, dropped and rejected ones end. */
export function chainStageOf(run: (flow: Flow) => readonly { flow: Flow; end: FlowEnd; by: TraceStep | null }[]): Stage {
  return (flow) => {
    const going: Flow[] = [];
    const done: Finished[] = [];
    for (const o of run(flow)) {
      if (o.end === 'accept') going.push(o.flow);
      else done.push({ flow: o.flow, end: o.end, by: o.by });
    }
    return { going, done };
  };
}

/** runStages runs flows through stages in order; what no stage stopped comes out as going. */
export function runStages(flows: readonly Flow[], stages: readonly Stage[]): { going: Flow[]; done: Finished[] } {
  let going = [...flows];
  const done: Finished[] = [];
  for (const s of stages) {
    const next: Flow[] = [];
    for (const f of going) {
      const r = s(f);
      next.push(...r.going);
      done.push(...r.done);
    }
    going = next;
  }
  return { going, done };
}

import type { TraceDrift, TraceEndpoint, TraceStep, TraceVerdict } from '../dashboard/protocol.ts';
import type { Finished } from './flow.ts';
import { hostPort } from './packet.ts';

/**
 * From the flows a trace ended with to the answer: the verdict (the most
 * likely outcome; others are noted with their chances), the endpoints a DNAT
 * verdict leads to with their probabilities, the path every flow shares, and
 * each endpoint's own continuation.
 */

/** Outcome is one finished flow with its verdict. */
export interface Outcome {
  readonly f: Finished;
  readonly verdict: TraceVerdict;
}

export interface Summary {
  readonly verdict: TraceVerdict;
  /** main: the outcomes of the verdict, most likely first. */
  readonly main: readonly Outcome[];
  /** others: outcomes of other verdicts (with a chance the tracer could not rule out). */
  readonly others: readonly Outcome[];
  readonly endpoints: readonly TraceEndpoint[];
  readonly masquerade: boolean;
  readonly path: readonly TraceStep[];
  readonly notes: readonly string[];
}

/** verdictOf: a stopped flow is its stop; a DNATed one dnat; else accept when a Service rule accepted it, or none. */
export function verdictOf(f: Finished, serviceAccept: (s: TraceStep) => boolean): TraceVerdict {
  if (f.end === 'drop') return 'drop';
  if (f.end === 'reject') return 'reject';
  if (f.flow.pkt.dnat) return 'dnat';
  return f.flow.steps.some(serviceAccept) ? 'accept' : 'none';
}

function commonPrefix(lists: readonly (readonly TraceStep[])[]): number {
  if (lists.length === 0) return 0;
  let n = 0;
  for (;;) {
    const s = lists[0][n];
    if (s === undefined || !lists.every((l) => l[n] === s)) return n;
    n++;
  }
}

/** percent writes a chance for a sentence ("25%", "33.3%"). */
export function percent(p: number): string {
  const v = Math.round(p * 1000) / 10;
  return `${v}%`;
}

export function summarize(finished: readonly Finished[], serviceAccept: (s: TraceStep) => boolean): Summary {
  const outcomes = finished.filter((f) => f.flow.p > 0).map((f) => ({ f, verdict: verdictOf(f, serviceAccept) }));
  const byVerdict = new Map<TraceVerdict, number>();
  for (const o of outcomes) byVerdict.set(o.verdict, (byVerdict.get(o.verdict) ?? 0) + o.f.flow.p);
  let verdict: TraceVerdict = 'none';
  let best = -1;
  for (const [v, p] of byVerdict) {
    if (p > best + 1e-12) {
      verdict = v;
      best = p;
    }
  }
  const main = outcomes.filter((o) => o.verdict === verdict).sort((a, b) => b.f.flow.p - a.f.flow.p);
  const others = outcomes.filter((o) => o.verdict !== verdict);
  const prefix = commonPrefix(outcomes.map((o) => o.f.flow.steps));
  const path = outcomes.length ? outcomes[0].f.flow.steps.slice(0, prefix) : [];

  const notes = new Set<string>();
  for (const o of outcomes) for (const n of o.f.flow.notes) notes.add(n);
  for (const [v, p] of byVerdict) {
    if (v !== verdict) notes.add(`with probability ${percent(p)} the outcome is ${v} instead (see the rules after the shared path)`);
  }

  const endpoints: TraceEndpoint[] = [];
  if (verdict === 'dnat') {
    const affinity = outcomes.flatMap((o) => o.f.flow.affinity);
    const byAddress = new Map<string, { p: number; masquerade: boolean; path: readonly TraceStep[]; sticky?: string }>();
    for (const o of main) {
      const address = hostPort(o.f.flow.pkt.dst, o.f.flow.pkt.dstPort);
      const own = o.f.flow.steps.slice(prefix);
      const sticky = affinity.find((a) => o.f.flow.steps.some((s) => s.chain === a.chain))?.text;
      const have = byAddress.get(address);
      if (have) {
        have.p += o.f.flow.p;
        have.masquerade &&= o.f.flow.pkt.masquerade;
      } else byAddress.set(address, { p: o.f.flow.p, masquerade: o.f.flow.pkt.masquerade, path: own, ...(sticky ? { sticky } : {}) });
    }
    for (const [address, e] of byAddress) endpoints.push({ address, probability: e.p, masquerade: e.masquerade, path: e.path, ...(e.sticky ? { sticky: e.sticky } : {}) });
    endpoints.sort((a, b) => b.probability - a.probability || (a.address < b.address ? -1 : 1));
    if (affinity.length) notes.add('ClientIP affinity: the chances are for a client the kernel does not remember yet; a remembered one goes back to its endpoint');
  }
  const masquerade = main.length > 0 && main.every((o) => o.f.flow.pkt.masquerade);
  return { verdict, main, others, endpoints, masquerade, path, notes: [...notes] };
}

/**
 * markDrift puts drift findings on the steps of the chains they concern and
 * returns the findings on the traced chains (null when none were given: not checked).
 */
export function markDrift(
  path: readonly TraceStep[],
  endpoints: readonly TraceEndpoint[],
  others: readonly TraceStep[][],
  findings: readonly TraceDrift[] | null,
): { path: TraceStep[]; endpoints: TraceEndpoint[]; drift: TraceDrift[] | null } {
  if (findings === null) return { path: [...path], endpoints: [...endpoints], drift: null };
  const byChain = new Map<string, TraceDrift>();
  for (const d of findings) if (!byChain.has(`${d.table}/${d.chain}`)) byChain.set(`${d.table}/${d.chain}`, d);
  const seen = new Set<string>();
  const mark = (s: TraceStep): TraceStep => {
    const d = byChain.get(`${s.table}/${s.chain}`);
    if (!d) return s;
    seen.add(`${s.table}/${s.chain}`);
    return { ...s, drift: d.kind };
  };
  const p = path.map(mark);
  const e = endpoints.map((ep) => ({ ...ep, path: ep.path.map(mark) }));
  for (const o of others) o.forEach(mark);
  return { path: p, endpoints: e, drift: findings.filter((d) => seen.has(`${d.table}/${d.chain}`)) };
}

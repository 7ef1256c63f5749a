import { href, type TraceForm } from './router.svelte.ts';
import type { FlowEntry, TraceStep, TraceVerdict } from './protocol.ts';

/** The Trace page's pure parts: labels, links, grouping, and the form a Service page's flow pre-fills. */

export const VERDICT_VIEW: Record<TraceVerdict, { label: string; tone: 'ok' | 'bad' | 'info' | 'muted' }> = {
  dnat: { label: 'DNAT', tone: 'ok' },
  reject: { label: 'REJECT', tone: 'bad' },
  drop: { label: 'DROP', tone: 'bad' },
  accept: { label: 'ACCEPT', tone: 'info' },
  none: { label: 'not a Service packet', tone: 'muted' },
};

const HOOK_LABEL: Record<string, string> = {
  prerouting: 'PREROUTING · arriving',
  input: 'INPUT · for this node',
  forward: 'FORWARD · passing through',
  output: 'OUTPUT · sent by this node',
  postrouting: 'POSTROUTING · leaving',
  ipvs: 'IPVS',
};

export function hookLabel(hook: string): string {
  return HOOK_LABEL[hook] ?? hook;
}

/** stepHref links a step to its rule on the Rules page (its chain, for a chain's end). */
export function stepHref(s: TraceStep): string {
  return href({ page: 'rules', table: s.table, chain: s.chain, q: '', ...(s.index !== null ? { rule: s.index } : {}) });
}

/** HookGroup is a run of steps in one hook, as the page draws them. */
export interface HookGroup {
  readonly hook: string;
  readonly steps: readonly TraceStep[];
}

/** byHook cuts a path into runs of the same hook, in order. */
export function byHook(steps: readonly TraceStep[]): HookGroup[] {
  const out: { hook: string; steps: TraceStep[] }[] = [];
  for (const s of steps) {
    const last = out.at(-1);
    if (last && last.hook === s.hook) last.steps.push(s);
    else out.push({ hook: s.hook, steps: [s] });
  }
  return out;
}

/** stepTone colours a step by what it does to the packet. */
export function stepTone(s: TraceStep): 'ok' | 'bad' | 'info' | '' {
  if (/^(DROP|REJECT|drop|reject|no real server)/.test(s.verdict)) return 'bad';
  if (/^(DNAT|dnat|MASQUERADE|masquerade)/.test(s.verdict)) return 'ok';
  if (/^(jump|goto|vmap)/.test(s.verdict)) return 'info';
  return '';
}

/** traceSearch is the API query of a form (empty fields left out: the server names what is missing). */
export function traceSearch(f: TraceForm): string {
  const p = new URLSearchParams();
  for (const k of ['proto', 'src', 'dst', 'from'] as const) if (f[k].trim()) p.set(k, f[k].trim());
  return p.toString();
}

/**
 * formForFlow pre-fills the Trace page from one way into a service port
 * (a FlowEntry's address: "10.96.0.10:80/TCP", "[fd00::a]:80/TCP",
 * "node:30080/TCP", where the node's first address stands in for "node").
 */
export function formForFlow(flow: Pick<FlowEntry, 'address' | 'kind'>, nodeIPs: readonly string[]): TraceForm {
  const slash = flow.address.lastIndexOf('/');
  const proto = flow.address.slice(slash + 1).toLowerCase();
  let dst = flow.address.slice(0, slash);
  if (dst.startsWith('node:')) {
    const ip = nodeIPs[0] ?? '';
    dst = ip ? `${ip.includes(':') ? `[${ip}]` : ip}:${dst.slice('node:'.length)}` : dst.slice('node'.length);
  }
  return { proto, src: '', dst, from: '' };
}

/** percent writes a probability for the page ("33.3%"). */
export function percent(p: number): string {
  return `${Math.round(p * 1000) / 10}%`;
}

import type { KernelChain, KernelRule } from '../dashboard/kernel-view.ts';
import type { TraceStep } from '../dashboard/protocol.ts';
import { MAX_DEPTH, MIN_CHANCE, withNote, withStep, type Finished, type Flow, type FlowEnd } from './flow.ts';
import { compileIptablesRule, testRule, type IptRule, type MatchEnv } from './iptables-rule.ts';
import { hostPort, isLocalAddress, parseHostPort, redirectTarget, type Packet } from './packet.ts';
import { candidates } from './dst-index.ts';
import { chainStageOf, runStages, type Stage } from './stages.ts';
import type { TraceTables } from './tables.ts';

/**
 * The iptables half of the tracer: a packet through the built-in chains of
 * the tables a node holds, in netfilter's order, following jumps, marks,
 * DNAT and masquerade, and splitting where `-m statistic` decides. Used by
 * iptables mode (both flavours list the same way) and by IPVS mode, which adds
 * its virtual servers between the hooks.
 */

/** Compiled rules, per listed rule object: a read kept by the dashboard is traced again without reading its rules again. */
const compiled = new WeakMap<KernelRule, IptRule>();

function compile(rule: KernelRule): IptRule {
  let c = compiled.get(rule);
  if (!c) {
    c = compileIptablesRule(rule.spec);
    compiled.set(rule, c);
  }
  return c;
}

/** Targets that do something and let the packet go on to the next rule. */
const NON_TERMINATING = new Set(['LOG', 'NFLOG', 'TRACE', 'CT', 'NOTRACK', 'CONNMARK', 'TCPMSS', 'CHECKSUM', 'AUDIT', 'CLASSIFY', 'DSCP', 'TOS', 'TTL', 'HL']);

type ChainOutcome = { readonly flow: Flow; readonly kind: 'return' } | { readonly flow: Flow; readonly kind: 'final'; readonly end: FlowEnd; readonly by: TraceStep | null };

/** HookOutcome is a flow after one built-in chain: on (accepted, NATed, or the policy let it pass) or stopped. */
export interface HookOutcome {
  readonly flow: Flow;
  readonly end: FlowEnd;
  readonly by: TraceStep | null;
}

function markAfter(mark: number, opts: ReadonlyMap<string, string>): number | null {
  const num = (t: string) => (t.startsWith('0x') ? parseInt(t.slice(2), 16) : Number(t)) >>> 0;
  const pair = (t: string) => {
    const [v, m] = t.split('/');
    return { v: num(v), m: m === undefined ? 0xffffffff : num(m) };
  };
  const x = opts.get('--set-xmark');
  if (x !== undefined) {
    const { v, m } = pair(x);
    return ((mark & ~m) ^ v) >>> 0;
  }
  const s = opts.get('--set-mark');
  if (s !== undefined) {
    const { v, m } = pair(s);
    return ((mark & ~m) | v) >>> 0;
  }
  const or = opts.get('--or-mark');
  if (or !== undefined) return (mark | num(or)) >>> 0;
  const xor = opts.get('--xor-mark');
  if (xor !== undefined) return (mark ^ num(xor)) >>> 0;
  const and = opts.get('--and-mark');
  if (and !== undefined) return (mark & num(and)) >>> 0;
  return null;
}

function hex(n: number): string {
  return '0x' + n.toString(16);
}

/** IptablesWalker walks one family's iptables tables. */
export class IptablesWalker {
  readonly #t: TraceTables;
  readonly #env: MatchEnv;

  constructor(tables: TraceTables, env: MatchEnv) {
    this.#t = tables;
    this.#env = env;
  }

  /**
   * builtin runs a flow through a built-in chain (its table may be missing:
   * then nothing happens). Empty built-in chains with an ACCEPT policy add no
   * step: every node has them in raw, mangle and security, and they decide nothing.
   */
  builtin(table: string, chain: string, hook: string, flow: Flow): HookOutcome[] {
    const c = this.#t.chain(table, chain);
    if (!c) return [{ flow, end: 'accept', by: null }];
    return this.#run(table, c, 0, flow, hook, 0).map((o) => {
      if (o.kind === 'final') return { flow: o.flow, end: o.end, by: o.by };
      // Only a built-in chain's policy can end it here (RETURN from a built-in chain also applies the policy).
      const policy = (c.policy ?? 'ACCEPT').toUpperCase();
      if (c.rules.length === 0 && policy === 'ACCEPT') return { flow: o.flow, end: 'accept', by: null };
      const s: TraceStep = { table: this.#t.name(table), chain: c.name, hook, rule: null, index: null, packets: c.packets, bytes: c.bytes, verdict: `policy ${policy}` };
      const end: FlowEnd = policy === 'DROP' ? 'drop' : 'accept';
      return { flow: withStep(o.flow, s), end, by: end === 'drop' ? s : null };
    });
  }

  #step(table: string, chain: KernelChain, index: number, rule: KernelRule, hook: string, verdict: string, note?: string): TraceStep {
    return { table: this.#t.name(table), chain: chain.name, hook, rule: rule.spec, index, packets: rule.packets, bytes: rule.bytes, verdict, ...(note ? { note } : {}) };
  }

  #run(table: string, chain: KernelChain, from: number, flow: Flow, hook: string, depth: number): ChainOutcome[] {
    if (flow.p < MIN_CHANCE) return [];
    if (depth > MAX_DEPTH) return [{ flow: withNote(flow, `gave up after ${MAX_DEPTH} jumps in ${table} ${chain.name}`), kind: 'final', end: 'accept', by: null }];
    const rules = chain.rules;
    // A probability rule splits the flow: what it takes is followed at once, the rest goes on
    // down this loop (not a call per rule: a Service with 10,000 endpoints has 10,000 such rules).
    const out: ChainOutcome[] = [];
    for (const i of candidates(chain, flow.pkt.dst, from)) {
      const rule = rules[i];
      const c = compile(rule);
      if (c.unknown !== null) {
        // Only worth a note when the rest of the rule would have matched.
        if (c.tests.length === 0 || testRule(c, flow.pkt, this.#env) !== false)
          flow = withNote(flow, `${this.#t.name(table)} ${chain.name} rule ${i + 1} (${c.unknown}) could not be evaluated: taken as not matching`);
        continue;
      }
      const m = testRule(c, flow.pkt, this.#env);
      if (m === false) continue;
      if (m === null) {
        flow = withNote(flow, `${this.#t.name(table)} ${chain.name} rule ${i + 1} could not be decided for this packet: taken as not matching`);
        continue;
      }
      let note: string | undefined;
      if (c.recent && (c.recent.op === 'rcheck' || c.recent.op === 'update')) {
        const entries = this.#env.facts.recentEntries?.(c.recent.name) ?? null;
        const within = c.recent.seconds !== null ? ` (seen within ${c.recent.seconds} s)` : '';
        if (entries === null) {
          // Unknown: a new client does not match; one the list remembers would.
          if (c.target) flow = { ...flow, affinity: [...flow.affinity, { chain: c.target, text: `a client in recent list ${c.recent.name}${within} comes back here` }] };
          continue;
        }
        if (!entries.has(flow.pkt.src)) continue;
        note = `the client ${flow.pkt.src} is in recent list ${c.recent.name}${within}: affinity sends it here`;
      } else if (c.recent?.op === 'set') {
        note = `remembers the client in recent list ${c.recent.name} (ClientIP affinity)`;
      }
      if (c.probability !== null) {
        const p = c.probability;
        const taken = { ...flow, p: flow.p * p };
        const rest = { ...flow, p: flow.p * (1 - p) };
        const share = `probability ${round(p)} of what reaches this rule`;
        for (const o of this.#apply(table, chain, i, rule, c, taken, hook, depth, note ? `${share}; ${note}` : share)) out.push(o);
        flow = rest;
        if (flow.p < MIN_CHANCE) return out;
        continue;
      }
      for (const o of this.#apply(table, chain, i, rule, c, flow, hook, depth, note)) out.push(o);
      return out;
    }
    if (chain.builtin) {
      out.push({ flow, kind: 'return' });
      return out;
    }
    const end: TraceStep = { table: this.#t.name(table), chain: chain.name, hook, rule: null, index: null, packets: 0, bytes: 0, verdict: 'return' };
    out.push({ flow: withStep(flow, end), kind: 'return' });
    return out;
  }

  #apply(table: string, chain: KernelChain, i: number, rule: KernelRule, c: IptRule, flow: Flow, hook: string, depth: number, note?: string): ChainOutcome[] {
    const target = c.target;
    const tableName = this.#t.name(table);
    const step = (verdict: string, extra?: string) => this.#step(table, chain, i, rule, hook, verdict, [note, extra].filter(Boolean).join('; ') || undefined);
    const next = (f: Flow) => this.#run(table, chain, i + 1, f, hook, depth);
    if (target === null) return next(withStep(flow, step('continue')));
    const sub = this.#t.chain(table, target);
    if (sub && !sub.builtin) {
      const entered = withStep(flow, step(`${c.goto ? 'goto' : 'jump'} ${target}`));
      return this.#run(table, sub, 0, entered, hook, depth + 1).flatMap((o) => {
        if (o.kind === 'final') return [o];
        // A goto's chain returns to whoever called this one.
        return c.goto ? [o] : next(o.flow);
      });
    }
    switch (target) {
      case 'ACCEPT': {
        const s = step('ACCEPT');
        return [{ flow: withStep(flow, s), kind: 'final', end: 'accept', by: s }];
      }
      case 'DROP': {
        const s = step('DROP');
        return [{ flow: withStep(flow, s), kind: 'final', end: 'drop', by: s }];
      }
      case 'REJECT': {
        const how = c.targetOptions.get('--reject-with');
        const s = step(how ? `REJECT (${how})` : 'REJECT');
        return [{ flow: withStep(flow, s), kind: 'final', end: 'reject', by: s }];
      }
      case 'RETURN':
        return [{ flow: withStep(flow, step('return')), kind: 'return' }];
      case 'DNAT': {
        const to = c.targetOptions.get('--to-destination') ?? '';
        const first = to.split('-')[0];
        const hp = parseHostPort(first);
        if (!hp) return next(withNote(withStep(flow, step(`DNAT ${to}`)), `${tableName} ${chain.name}: DNAT target ${JSON.stringify(to)} not understood; the packet is taken as unchanged`));
        const pkt: Packet = { ...flow.pkt, dst: hp.ip, dstPort: hp.port ?? flow.pkt.dstPort, dnat: true };
        const s = step(`DNAT to ${hostPort(pkt.dst, pkt.dstPort)}`);
        return [{ flow: { ...withStep(flow, s), pkt }, kind: 'final', end: 'accept', by: s }];
      }
      case 'REDIRECT': {
        // REDIRECT is DNAT to the node itself (the arriving interface's address; loopback for the node's own packets).
        const to = c.targetOptions.get('--to-ports')?.split('-')[0];
        const pkt: Packet = { ...flow.pkt, dst: redirectTarget(this.#env.facts, flow.pkt), dstPort: to ? Number(to) : flow.pkt.dstPort, dnat: true };
        const s = step(`REDIRECT to ${hostPort(pkt.dst, pkt.dstPort)}`);
        return [{ flow: { ...withStep(flow, s), pkt }, kind: 'final', end: 'accept', by: s }];
      }
      case 'MASQUERADE':
      case 'SNAT': {
        const s = step(target === 'SNAT' ? `SNAT to ${c.targetOptions.get('--to-source') ?? '?'}` : 'MASQUERADE');
        return [{ flow: { ...withStep(flow, s), pkt: { ...flow.pkt, masquerade: true } }, kind: 'final', end: 'accept', by: s }];
      }
      case 'MARK': {
        const mark = markAfter(flow.pkt.mark, c.targetOptions);
        if (mark === null) return next(withNote(withStep(flow, step('MARK')), `${tableName} ${chain.name} rule ${i + 1}: MARK options not understood; the mark is taken as unchanged`));
        return next({ ...withStep(flow, step(`MARK ${hex(mark)}`)), pkt: { ...flow.pkt, mark } });
      }
      default:
        if (NON_TERMINATING.has(target)) return next(withStep(flow, step(target)));
        if (sub?.builtin)
          return next(withNote(withStep(flow, step(`jump ${target}`)), `${tableName} ${chain.name} rule ${i + 1} jumps to the built-in chain ${target}, which iptables does not allow; ignored`));
        return next(withNote(withStep(flow, step(target)), `${tableName} ${chain.name} rule ${i + 1}: target ${target} is taken to let the packet go on`));
    }
  }
}

export function round(p: number): number {
  return Math.round(p * 10000) / 10000;
}

/** chainStage runs the built-in chain `chain` of `table` (hook named for the steps). */
export function chainStage(w: IptablesWalker, table: string, chain: string, hook: string): Stage {
  return chainStageOf((flow) => w.builtin(table, chain, hook, flow));
}

/** IpvsStages is what IPVS mode adds to the journey: its virtual servers on LOCAL_IN (after filter INPUT) and LOCAL_OUT (after nat OUTPUT). */
export interface IpvsStages {
  readonly localIn: Stage;
  readonly localOut: Stage;
}

/**
 * iptablesJourney takes a new connection's first packet through the hooks in
 * netfilter's order: PREROUTING (raw, mangle, nat), the routing decision on
 * the destination as NAT left it (a local address: INPUT; else FORWARD and
 * POSTROUTING), or for the node's own packets OUTPUT and POSTROUTING (then
 * INPUT when it is for the node itself). With IPVS, virtual servers take
 * packets for their addresses where IPVS hooks in; a packet IPVS forwards
 * goes out through OUTPUT's filter and POSTROUTING, as ip_vs_nat_xmit sends it.
 */
export function iptablesJourney(w: IptablesWalker, flow: Flow, facts: { isLocal(ip: string): boolean }, ipvs?: IpvsStages): Finished[] {
  const st = (table: string, chain: string) => chainStage(w, table, chain, chain.toLowerCase());
  const input = [st('mangle', 'INPUT'), st('filter', 'INPUT'), st('security', 'INPUT'), st('nat', 'INPUT')];
  const done: Finished[] = [];
  const finish = (flows: readonly Flow[]) => flows.map((f): Finished => ({ flow: f, end: 'accept', by: null }));
  if (flow.pkt.from === 'node') {
    const out = runStages(
      [flow],
      [
        st('raw', 'OUTPUT'),
        st('mangle', 'OUTPUT'),
        st('nat', 'OUTPUT'),
        ...(ipvs ? [ipvs.localOut] : []),
        st('filter', 'OUTPUT'),
        st('security', 'OUTPUT'),
        st('mangle', 'POSTROUTING'),
        st('nat', 'POSTROUTING'),
      ],
    );
    done.push(...out.done);
    const local = out.going.filter((f) => facts.isLocal(f.pkt.dst));
    const away = out.going.filter((f) => !facts.isLocal(f.pkt.dst));
    const inp = runStages(local, input);
    return [...done, ...inp.done, ...finish(inp.going), ...finish(away)];
  }
  const pre = runStages([flow], [st('raw', 'PREROUTING'), st('mangle', 'PREROUTING'), st('nat', 'PREROUTING')]);
  done.push(...pre.done);
  for (const f of pre.going) {
    if (facts.isLocal(f.pkt.dst)) {
      const inp = runStages([f], ipvs ? [...input, ipvs.localIn] : input);
      done.push(...inp.done);
      const forwarded = inp.going.filter((g) => g.pkt.ipvs);
      done.push(...finish(inp.going.filter((g) => !g.pkt.ipvs)));
      const out = runStages(forwarded, [st('mangle', 'OUTPUT'), st('filter', 'OUTPUT'), st('security', 'OUTPUT'), st('mangle', 'POSTROUTING'), st('nat', 'POSTROUTING')]);
      done.push(...out.done, ...finish(out.going));
    } else {
      const fwd = runStages([f], [st('mangle', 'FORWARD'), st('filter', 'FORWARD'), st('security', 'FORWARD'), st('mangle', 'POSTROUTING'), st('nat', 'POSTROUTING')]);
      done.push(...fwd.done, ...finish(fwd.going));
    }
  }
  return done;
}

/** localFacts adapts NodeFacts for the routing decision. */
export function localOf(env: MatchEnv): { isLocal(ip: string): boolean } {
  return { isLocal: (ip) => isLocalAddress(env.facts, ip) };
}

import type { KernelChain, KernelRule, KernelTable } from '../dashboard/kernel-view.ts';
import type { TraceStep } from '../dashboard/protocol.ts';
import { MAX_DEPTH, MIN_CHANCE, newFlow, withNote, withStep, type Finished, type Flow, type FlowEnd } from './flow.ts';
import { chainStageOf, runStages, type Stage } from './stages.ts';
import type { ExplainInput, ModeTracer } from './mode.ts';
import { applyBitwise, compileNftRule, fieldValue, keyMatches, type NftRule, type NftStatement, type NftVerdict } from './nft-rule.ts';
import { hostPort, isLocalAddress, parseHostPort, type NodeFacts, type Packet } from './packet.ts';
import { dnatReason, noEndpointsReason, noLocalReason, notServiceReason, sourceRangeReason, target, unknownPortReason } from './reason.ts';
import { percent } from './result.ts';
import { serviceOfNftChain } from './service-names.ts';
import type { TraceTables } from './tables.ts';

/**
 * nftables mode: the packet through the `kube-proxy` table's base chains in
 * hook and priority order, its verdict maps and sets looked up as the kernel
 * would, numgen splitting the way to endpoints, and affinity sets answered
 * from their listed elements (the kernel's: clients it remembers).
 */

const TABLE = 'kube-proxy';
const compiled = new WeakMap<KernelRule, NftRule>();

function compile(rule: KernelRule): NftRule {
  let c = compiled.get(rule);
  if (!c) {
    c = compileNftRule(rule.spec);
    compiled.set(rule, c);
  }
  return c;
}

interface Element {
  readonly key: string;
  readonly value: string | null;
  readonly comment: string | null;
  readonly index: number;
  readonly rule: KernelRule;
}

interface SetIndex {
  readonly exact: Map<string, Element>;
  readonly fuzzy: readonly Element[];
}

const indexes = new WeakMap<KernelChain, SetIndex>();
const baseChainsOf = new WeakMap<KernelTable, Map<string, KernelChain[]>>();

/** parseElement reads a listed element ("key : value comment \"…\""). */
function parseElement(rule: KernelRule, index: number): Element {
  let text = rule.spec;
  let comment: string | null = null;
  const c = text.indexOf(' comment "');
  if (c >= 0) {
    comment = text.slice(c + ' comment "'.length).replace(/"$/, '');
    text = text.slice(0, c);
  }
  const v = text.indexOf(' : ');
  return v >= 0 ? { key: text.slice(0, v), value: text.slice(v + 3), comment, index, rule } : { key: text, value: null, comment, index, rule };
}

function setIndex(chain: KernelChain): SetIndex {
  let ix = indexes.get(chain);
  if (!ix) {
    const exact = new Map<string, Element>();
    const fuzzy: Element[] = [];
    chain.rules.forEach((r, i) => {
      const e = parseElement(r, i);
      if (/[/-]/.test(e.key.replace(/[a-z]+-[a-z]+/g, ''))) fuzzy.push(e);
      else exact.set(e.key, e);
    });
    ix = { exact, fuzzy };
    indexes.set(chain, ix);
  }
  return ix;
}

function lookup(chain: KernelChain, values: readonly string[]): Element | null {
  const ix = setIndex(chain);
  return ix.exact.get(values.join(' . ')) ?? ix.fuzzy.find((e) => keyMatches(e.key, values)) ?? null;
}

/** hookOf reads a base chain's "filter hook prerouting priority -110". */
function hookOf(chain: KernelChain): { hook: string; priority: number } | null {
  const m = /hook (\w+) priority (-?\d+)/.exec(chain.policy ?? '');
  return chain.builtin && m ? { hook: m[1], priority: Number(m[2]) } : null;
}

type ChainOutcome = { readonly flow: Flow; readonly kind: 'return' } | { readonly flow: Flow; readonly kind: 'final'; readonly end: FlowEnd | 'nat'; readonly by: TraceStep | null };

function verdictText(v: NftVerdict): string {
  return v.kind === 'jump' || v.kind === 'goto' ? `${v.kind} ${v.chain}` : v.kind;
}

export class NftWalker {
  readonly #table: KernelTable | undefined;
  readonly #facts: NodeFacts;
  readonly #name: string;

  constructor(tables: TraceTables, facts: NodeFacts) {
    this.#table = tables.table(TABLE);
    this.#name = tables.name(TABLE);
    this.#facts = facts;
  }

  /** baseChains lists the base chains on a hook, lowest priority first. */
  baseChains(hook: string): readonly KernelChain[] {
    const t = this.#table;
    if (!t) return [];
    let byHook = baseChainsOf.get(t);
    if (!byHook) {
      // Once per read: a big table has tens of thousands of (regular) chains, and a trace asks for each hook.
      const all: { c: KernelChain; hook: string; p: number }[] = [];
      for (const c of t.chains.values()) {
        if (!c.builtin) continue;
        const h = hookOf(c);
        if (h) all.push({ c, hook: h.hook, p: h.priority });
      }
      byHook = new Map();
      for (const x of all.sort((a, b) => a.p - b.p)) (byHook.get(x.hook) ?? byHook.set(x.hook, []).get(x.hook)!).push(x.c);
      baseChainsOf.set(t, byHook);
    }
    return byHook.get(hook) ?? [];
  }

  /** base runs a flow through one base chain: accepted (or NATed, or fell off its end: policy accept) goes on. */
  base(chain: KernelChain, hook: string, flow: Flow): { flow: Flow; end: FlowEnd; by: TraceStep | null }[] {
    return this.#run(chain, 0, flow, hook, 0).map((o) => {
      if (o.kind === 'final') return { flow: o.flow, end: o.end === 'nat' ? 'accept' : o.end, by: o.by };
      // Falling off a base chain applies its policy (kube-proxy's are all accept), as the kernel's trace says.
      const policy = /policy (\w+)/.exec(chain.policy ?? '')?.[1] ?? 'accept';
      const s = this.#step(chain, null, null, hook, `policy ${policy}`);
      return { flow: withStep(o.flow, s), end: policy === 'drop' ? 'drop' : 'accept', by: policy === 'drop' ? s : null };
    });
  }

  #step(chain: KernelChain, index: number | null, rule: KernelRule | null, hook: string, verdict: string, note?: string): TraceStep {
    return { table: this.#name, chain: chain.name, hook, rule: rule?.spec ?? null, index, packets: rule?.packets ?? 0, bytes: rule?.bytes ?? 0, verdict, ...(note ? { note } : {}) };
  }

  #set(name: string): KernelChain | undefined {
    return this.#table?.chains.get(`@${name}`);
  }

  #run(chain: KernelChain, from: number, flow: Flow, hook: string, depth: number): ChainOutcome[] {
    if (flow.p < MIN_CHANCE) return [];
    if (depth > MAX_DEPTH) return [{ flow: withNote(flow, `gave up after ${MAX_DEPTH} jumps in ${chain.name}`), kind: 'final', end: 'accept', by: null }];
    for (let i = from; i < chain.rules.length; i++) {
      const rule = chain.rules[i];
      const c = compile(rule);
      if (c.unknown !== null) {
        flow = withNote(flow, `${this.#name} ${chain.name} rule ${i + 1} (${c.unknown}) could not be evaluated: taken as not matching`);
        continue;
      }
      const r = this.#rule(chain, i, rule, c, flow, hook, depth);
      if (r === null) continue;
      return r;
    }
    if (hookOf(chain)) return [{ flow, kind: 'return' }];
    return [{ flow: withStep(flow, this.#step(chain, null, null, hook, 'return')), kind: 'return' }];
  }

  /** #rule runs one rule: null when it does not match (the chain goes on), else where the flows went. */
  #rule(chain: KernelChain, i: number, rule: KernelRule, c: NftRule, flow: Flow, hook: string, depth: number): ChainOutcome[] | null {
    let pkt = flow.pkt;
    let f = flow;
    const notes: string[] = [];
    const next = (g: Flow) => this.#run(chain, i + 1, g, hook, depth);
    const stepped = (g: Flow, verdict: string, extra: TraceStep[] = []) => {
      let h = withStep({ ...g, pkt }, this.#step(chain, i, rule, hook, verdict, notes.join('; ') || undefined));
      for (const s of extra) h = withStep(h, s);
      return h;
    };
    for (let k = 0; k < c.statements.length; k++) {
      const s = c.statements[k];
      switch (s.s) {
        case 'match': {
          const m = this.#match(s, pkt);
          if (m === null) {
            f = withNote(f, `${this.#name} ${chain.name} rule ${i + 1} (${s.text}) could not be decided for this packet: taken as not matching`);
            return this.#noMatch(f, chain, i, c, hook, depth);
          }
          if (!m) return this.#noMatch(f, chain, i, c, hook, depth);
          if ('set' in s.value && s.value.set.startsWith('affinity-')) notes.push(`the client ${pkt.src} is in @${s.value.set}: affinity sends it here`);
          break;
        }
        case 'counter':
          break;
        case 'mark': {
          const m = pkt.mark;
          pkt = { ...pkt, mark: (s.op === 'or' ? m | s.value : s.op === 'xor' ? m ^ s.value : s.op === 'and' ? m & s.value : s.value) >>> 0 };
          break;
        }
        case 'update':
          notes.push(`remembers the client in @${s.set} (ClientIP affinity)`);
          break;
        case 'dnat': {
          const hp = parseHostPort(s.to);
          if (!hp) return [{ flow: withNote(stepped(f, s.text), `dnat target ${s.to} not understood`), kind: 'final', end: 'nat', by: null }];
          pkt = { ...pkt, dst: hp.ip, dstPort: hp.port ?? pkt.dstPort, dnat: true };
          const g = stepped(f, `dnat to ${hostPort(pkt.dst, pkt.dstPort)}`);
          return [{ flow: g, kind: 'final', end: 'nat', by: g.steps.at(-1)! }];
        }
        case 'masquerade':
        case 'snat': {
          pkt = { ...pkt, masquerade: true };
          const g = stepped(f, s.text);
          return [{ flow: g, kind: 'final', end: 'nat', by: g.steps.at(-1)! }];
        }
        case 'verdict': {
          const g = stepped(f, verdictText(s.v));
          return this.#verdict(s.v, g, chain, i, hook, depth);
        }
        case 'vmap': {
          const sel = s.expr.sel;
          if (sel.length === 1 && sel[0].f === 'numgen') {
            if (!('pairs' in s.map)) return this.#noMatch(withNote(f, `${chain.name} rule ${i + 1}: numgen over a named map is not traced`), chain, i, c, hook, depth);
            const { mod, offset } = sel[0];
            const out: ChainOutcome[] = [];
            let missed = 0;
            for (let n = 0; n < mod; n++) {
              const pair = s.map.pairs.find(([key]) => key === String(n + offset));
              if (!pair) {
                missed++;
                continue;
              }
              const g = stepped({ ...f, p: f.p / mod }, verdictText(pair[1]));
              const last = g.steps.at(-1)!;
              const withChance = { ...g, steps: [...g.steps.slice(0, -1), { ...last, note: [last.note, `numgen: ${n + offset} of ${mod} (${percent(1 / mod)})`].filter(Boolean).join('; ') }] };
              out.push(...this.#verdict(pair[1], withChance, chain, i, hook, depth));
            }
            // numgen values without an element fall through to the next rule.
            if (missed) out.push(...next({ ...f, p: (f.p * missed) / mod }));
            return out;
          }
          const values: string[] = [];
          for (const x of sel) {
            const v = fieldValue(x, pkt, this.#facts);
            if (v === null) return this.#noMatch(withNote(f, `${this.#name} ${chain.name} rule ${i + 1}: ${s.text} could not be looked up for this packet`), chain, i, c, hook, depth);
            values.push(applyBitwise(v, s.expr.bitwise));
          }
          if ('pairs' in s.map) {
            const pair = s.map.pairs.find(([key]) => keyMatches(key, values));
            if (!pair) return this.#noMatch(f, chain, i, c, hook, depth);
            return this.#verdict(pair[1], stepped(f, verdictText(pair[1])), chain, i, hook, depth);
          }
          const set = this.#set(s.map.set);
          if (!set) return this.#noMatch(withNote(f, `${this.#name} ${chain.name} rule ${i + 1}: map @${s.map.set} is not in the read: taken as not matching`), chain, i, c, hook, depth);
          const el = lookup(set, values);
          if (!el) return this.#noMatch(f, chain, i, c, hook, depth);
          const v = el.value ? compileNftRule(el.value).statements[0] : undefined;
          if (!v || v.s !== 'verdict') return this.#noMatch(withNote(f, `@${s.map.set} element ${el.key}: verdict ${el.value} not understood`), chain, i, c, hook, depth);
          const elementStep: TraceStep = { table: this.#name, chain: set.name, hook, rule: el.rule.spec, index: el.index, packets: 0, bytes: 0, verdict: verdictText(v.v) };
          return this.#verdict(v.v, stepped(f, `vmap @${s.map.set}`, [elementStep]), chain, i, hook, depth);
        }
      }
    }
    // Every match held and no verdict: the rule's actions ran, the chain goes on.
    return next(stepped(f, 'continue'));
  }

  /** #noMatch: the rule does not apply; an affinity lookup that missed still says where a remembered client would go. */
  #noMatch(f: Flow, chain: KernelChain, i: number, c: NftRule, hook: string, depth: number): ChainOutcome[] {
    const aff = c.statements.find((s): s is Extract<NftStatement, { s: 'match' }> => s.s === 'match' && 'set' in s.value && s.value.set.startsWith('affinity-'));
    const go = c.statements.find((s): s is Extract<NftStatement, { s: 'verdict' }> => s.s === 'verdict' && (s.v.kind === 'goto' || s.v.kind === 'jump'));
    if (aff && go && 'set' in aff.value && 'chain' in go.v) {
      const set = this.#set(aff.value.set);
      const timeout = set ? /timeout (\d+)s/.exec(set.policy ?? '')?.[1] : undefined;
      f = { ...f, affinity: [...f.affinity, { chain: go.v.chain, text: `a client in @${aff.value.set}${timeout ? ` (remembered for ${timeout} s)` : ''} comes back here` }] };
      if (!set) f = withNote(f, `@${aff.value.set} is not in the read: whether the client has an affinity entry is unknown`);
    }
    return this.#run(chain, i + 1, f, hook, depth);
  }

  #verdict(v: NftVerdict, g: Flow, chain: KernelChain, i: number, hook: string, depth: number): ChainOutcome[] {
    const last = g.steps.at(-1) ?? null;
    switch (v.kind) {
      case 'accept':
        return [{ flow: g, kind: 'final', end: 'accept', by: last }];
      case 'drop':
        return [{ flow: g, kind: 'final', end: 'drop', by: last }];
      case 'reject':
        return [{ flow: g, kind: 'final', end: 'reject', by: last }];
      case 'return':
        return [{ flow: g, kind: 'return' }];
      case 'continue':
        return this.#run(chain, i + 1, g, hook, depth);
      case 'jump':
      case 'goto': {
        const sub = this.#table?.chains.get(v.chain);
        if (!sub) return this.#run(chain, i + 1, withNote(g, `${chain.name} rule ${i + 1}: chain ${v.chain} is not in the read`), hook, depth);
        return this.#run(sub, 0, g, hook, depth + 1).flatMap((o) => {
          if (o.kind === 'final') return [o];
          return v.kind === 'goto' ? [o] : this.#run(chain, i + 1, o.flow, hook, depth);
        });
      }
    }
  }

  #match(s: Extract<NftStatement, { s: 'match' }>, pkt: Packet): boolean | null {
    const values: string[] = [];
    for (const x of s.expr.sel) {
      if (x.f === 'iif') {
        // Interfaces are not modelled: a pod's packets are taken to arrive on the pod interface the rule names.
        const hit = pkt.from === 'pod';
        return s.op === '!=' ? !hit : hit;
      }
      const v = fieldValue(x, pkt, this.#facts);
      if (v === null) return x.f === 'saddr' || x.f === 'daddr' || x.f === 'dport' || x.f === 'sport' ? (x.f === 'sport' ? null : false) : null;
      values.push(applyBitwise(v, s.expr.bitwise));
    }
    let hit: boolean;
    if ('set' in s.value) {
      const set = this.#set(s.value.set);
      if (!set) return null;
      hit = lookup(set, values) !== null;
    } else if ('items' in s.value) hit = s.value.items.some((k) => keyMatches(k, values));
    else {
      const lit = s.value.literal.replace(/^"|"$/g, '');
      if (s.op === '<' || s.op === '>' || s.op === '<=' || s.op === '>=') {
        const a = Number(values[0]);
        const b = Number(lit);
        return s.op === '<' ? a < b : s.op === '>' ? a > b : s.op === '<=' ? a <= b : a >= b;
      }
      hit = lit.split(',').some((l) => keyMatches(l, values));
    }
    return s.op === '!=' ? !hit : hit;
  }
}

/** nftJourney: a new connection's first packet through the hooks (see iptablesJourney for the order). */
function nftJourney(w: NftWalker, flow: Flow, facts: NodeFacts): Finished[] {
  const hook = (h: string): Stage[] => w.baseChains(h).map((c) => chainStageOf((f) => w.base(c, h, f)));
  const local = (ip: string) => isLocalAddress(facts, ip);
  const finish = (flows: readonly Flow[]) => flows.map((f): Finished => ({ flow: f, end: 'accept', by: null }));
  const done: Finished[] = [];
  if (flow.pkt.from === 'node') {
    const out = runStages([flow], [...hook('output'), ...hook('postrouting')]);
    done.push(...out.done);
    const inp = runStages(
      out.going.filter((f) => local(f.pkt.dst)),
      hook('input'),
    );
    return [...done, ...inp.done, ...finish(inp.going), ...finish(out.going.filter((f) => !local(f.pkt.dst)))];
  }
  const pre = runStages([flow], hook('prerouting'));
  done.push(...pre.done);
  for (const f of pre.going) {
    const r = local(f.pkt.dst) ? runStages([f], hook('input')) : runStages([f], [...hook('forward'), ...hook('postrouting')]);
    done.push(...r.done, ...finish(r.going));
  }
  return done;
}

/** elementOf finds the map element a step stands for ("@service-ips"), if the path has one. */
function elementStep(steps: readonly TraceStep[], set: string): TraceStep | undefined {
  return steps.find((s) => s.chain === `@${set}`);
}

function serviceOfSteps(steps: readonly TraceStep[]): string | null {
  for (const s of steps) {
    const byChain = serviceOfNftChain(s.chain) ?? serviceOfNftChain(/goto (\S+)/.exec(s.verdict)?.[1] ?? '');
    if (byChain) return byChain;
    if (s.chain.startsWith('@no-endpoint-')) {
      const c = /comment "([^"]*)"$/.exec(s.rule ?? '')?.[1];
      if (c) return c;
    }
  }
  return null;
}

function hasElement(t: TraceTables, set: string, values: string[]): boolean {
  const c = t.chain(TABLE, `@${set}`);
  return c !== undefined && lookup(c, values) !== null;
}

function kindOf(i: ExplainInput, steps: readonly TraceStep[]): string | null {
  const { q, tables } = i;
  if (elementStep(steps, 'service-nodeports') || elementStep(steps, 'no-endpoint-nodeports')) return 'node port';
  if (hasElement(tables, 'cluster-ips', [q.dst])) return 'cluster IP';
  if (hasElement(tables, 'firewall-ips', [q.dst, q.proto, String(q.dstPort)])) return 'load balancer IP';
  if (elementStep(steps, 'service-ips') || elementStep(steps, 'no-endpoint-services')) return 'external or load balancer IP';
  return null;
}

/** keysByIP indexes a map's elements by the address that starts their key, once per read. */
function keysByIP(chain: KernelChain): ReadonlyMap<string, readonly string[]> {
  let m = byIPOf.get(chain);
  if (!m) {
    const out = new Map<string, string[]>();
    for (const r of chain.rules) {
      const ip = r.spec.slice(0, r.spec.indexOf(' '));
      (out.get(ip) ?? out.set(ip, []).get(ip)!).push(r.spec);
    }
    m = out;
    byIPOf.set(chain, m);
  }
  return m;
}

const byIPOf = new WeakMap<KernelChain, ReadonlyMap<string, readonly string[]>>();

/** owner lists a service address's ports from the maps ("80/tcp"), for "port 81 is not a port of …". */
function owner(t: TraceTables, ip: string): { name: string; ports: string[] } | null {
  const ports = new Set<string>();
  let name: string | null = null;
  for (const set of ['service-ips', 'no-endpoint-services']) {
    const c = t.chain(TABLE, `@${set}`);
    for (const spec of c ? (keysByIP(c).get(ip) ?? []) : []) {
      const m = /^\S+ \. (\w+) \. (\d+)/.exec(spec);
      if (m) ports.add(`${m[2]}/${m[1]}`);
      name ??= serviceOfNftChain(/goto (\S+)/.exec(spec)?.[1] ?? '') ?? /comment "([^"]*)"/.exec(spec)?.[1] ?? null;
    }
  }
  return name ? { name: name.replace(/:[^:/]*$/, ''), ports: [...ports].sort() } : null;
}

export const nftablesTracer: ModeTracer = {
  kind: 'nftables',
  sharedTables: [],
  walk(tables: TraceTables, pkt: Packet, facts: NodeFacts): Finished[] {
    return nftJourney(new NftWalker(tables, facts), newFlow(pkt), facts);
  },
  serviceAccept(s: TraceStep): boolean {
    return s.verdict === 'accept';
  },
  explain(i: ExplainInput): { service: string | null; reason: string } {
    const { summary: s, q } = i;
    const top = s.main[0]?.f;
    const steps = top ? top.flow.steps : s.path;
    const svc = serviceOfSteps(steps);
    const kind = kindOf(i, steps);
    const by = top?.by ?? null;
    switch (s.verdict) {
      case 'dnat': {
        const local = [...s.path, ...(s.endpoints[0]?.path ?? [])].some((x) => x.chain.startsWith('local-'));
        return { service: svc, reason: dnatReason(svc, kind, q, s, local ? (kind === 'cluster IP' ? 'internalTrafficPolicy' : 'externalTrafficPolicy') : null, 'numgen random') };
      }
      case 'reject':
        if (
          by?.chain === 'reject-chain' ||
          elementStep(steps, 'no-endpoint-services')?.verdict === 'goto reject-chain' ||
          elementStep(steps, 'no-endpoint-nodeports')?.verdict === 'goto reject-chain'
        ) {
          const map = elementStep(steps, 'no-endpoint-services') ?? elementStep(steps, 'no-endpoint-nodeports');
          return { service: svc, reason: noEndpointsReason(svc, q, `${map?.chain ?? 'a no-endpoint map'} → reject-chain`) };
        }
        if (by?.chain === 'cluster-ips-check') {
          const o = i.names?.portsOf(q.dst) ?? owner(i.tables, q.dst);
          return { service: null, reason: unknownPortReason(q, o, 'ClusterIP', 'refused (cluster-ips-check rejects invalid ports of ClusterIPs)') };
        }
        return { service: svc, reason: `${target(q)} is refused by ${by ? `${by.table} ${by.chain}` : 'the rules'}` };
      case 'drop': {
        if (by?.chain === '@no-endpoint-services' || by?.chain === '@no-endpoint-nodeports') {
          const policy = by.chain === '@no-endpoint-services' && hasElement(i.tables, 'cluster-ips', [q.dst]) ? 'internalTrafficPolicy' : 'externalTrafficPolicy';
          return { service: svc, reason: noLocalReason(policy, svc, q, `${by.chain}: drop`) };
        }
        if (by?.chain.startsWith('firewall-')) return { service: svc, reason: sourceRangeReason(svc, q, `${by.chain}, before DNAT`) };
        if (by?.chain === 'cluster-ips-check') return { service: null, reason: `${q.dst} is inside the cluster's Service CIDR but no Service holds it: dropped (cluster-ips-check)` };
        return { service: svc, reason: `${target(q)} is dropped by ${by ? `${by.table} ${by.chain}` : 'the rules'}` };
      }
      case 'accept':
        return { service: svc, reason: `${target(q)} is accepted by ${by ? `${by.table} ${by.chain}` : 'the rules'} without DNAT` };
      default: {
        const local = isLocalAddress(i.facts, q.dst);
        const o = i.names?.portsOf(q.dst) ?? owner(i.tables, q.dst);
        const outcome = `no rule changes the packet, which ${local ? 'goes to the node itself' : 'is routed as it is'}`;
        if (o) return { service: null, reason: unknownPortReason(q, o, kind ?? 'service address', outcome) };
        return { service: null, reason: notServiceReason(q, local) };
      }
    }
  },
};

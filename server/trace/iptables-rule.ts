import { splitArgs } from '../kernel/iptables-save-parser.ts';
import { cidrContains, parseCIDR } from '../net/ip.ts';
import { isLocalAddress, PROTO_NUMBERS, type NodeFacts, type Packet } from './packet.ts';

/**
 * An iptables rule, as `iptables-save` lists it, made into tests on a Packet.
 * Only what a kube-proxy node holds is understood: addresses, protocols and
 * ports, interfaces, and the matches comment, tcp/udp/sctp, multiport,
 * addrtype, conntrack, state, mark, statistic, recent, set, physdev, ipvs and
 * nfacct. A rule with anything else cannot be evaluated: the tracer assumes
 * it does not match and says so.
 */

/** SetMatcher answers `-m set --match-set NAME FLAGS` (IPVS mode's ipsets); null when the set is not in the read. */
export type SetMatcher = (name: string, flags: readonly string[], pkt: Packet) => boolean | null;

/** MatchEnv is what a rule tests besides the packet. */
export interface MatchEnv {
  readonly facts: NodeFacts;
  readonly sets: SetMatcher;
}

/** Test is one condition of a rule; null: it cannot be decided (the rule is assumed not to match). */
type Test = (pkt: Packet, env: MatchEnv) => boolean | null;

/** Recent is an xt_recent match (kube-proxy's ClientIP affinity). */
export interface Recent {
  readonly name: string;
  readonly op: 'rcheck' | 'update' | 'set' | 'remove';
  readonly seconds: number | null;
}

export interface IptRule {
  readonly tests: readonly { readonly test: Test; readonly what: string }[];
  /** probability: a `-m statistic --mode random` match's chance (negation applied); null without one. */
  readonly probability: number | null;
  readonly recent: Recent | null;
  /** target: the -j/-g target, null for a rule without one. */
  readonly target: string | null;
  readonly goto: boolean;
  /** targetOptions: the target's options ("--to-destination" → "10.244.0.11:8080"; a flag maps to ""). */
  readonly targetOptions: ReadonlyMap<string, string>;
  readonly comment: string | null;
  /** unknown: what the tracer cannot evaluate in this rule (it is then assumed not to match). */
  readonly unknown: string | null;
  /** assumption: what evaluating it assumed (an interface a pod arrives on). */
  readonly assumption: string | null;
}

function address(text: string, which: 'src' | 'dst' | 'origDst', negate: boolean): Test | null {
  const cidr = text.includes('/') ? parseCIDR(text) : parseCIDR(`${text}/${text.includes(':') ? 128 : 32}`);
  if (!cidr) return null;
  const full = cidr.prefix === (cidr.family === 'IPv4' ? 32 : 128);
  if (full) {
    const ip = cidr.ip;
    return (p) => (p[which] === ip) !== negate;
  }
  return (p) => (p.family === cidr.family && cidrContains(cidr, p[which])) !== negate;
}

function protoName(text: string): string {
  const t = text.toLowerCase();
  return PROTO_NUMBERS[t] ?? t;
}

/** portRanges reads "80", "30000:32767", "80,443" into inclusive ranges; null when it is none. */
function portRanges(text: string): [number, number][] | null {
  const out: [number, number][] = [];
  for (const part of text.split(',')) {
    const m = /^(\d{1,5})(?::(\d{1,5}))?$/.exec(part);
    if (!m) return null;
    out.push([Number(m[1]), Number(m[2] ?? m[1])]);
  }
  return out;
}

function portTest(text: string, which: 'srcPort' | 'dstPort', negate: boolean): Test | null {
  const ranges = portRanges(text);
  if (!ranges) return null;
  return (p) => {
    const port = p[which];
    if (port === null) return null;
    return ranges.some(([a, b]) => port >= a && port <= b) !== negate;
  };
}

function parseNumber(text: string): number | null {
  const n = text.startsWith('0x') ? parseInt(text.slice(2), 16) : Number(text);
  return Number.isFinite(n) ? n >>> 0 : null;
}

/** markValue reads "0x4000/0x4000" (value/mask; mask all ones when left out). */
function markValue(text: string): { value: number; mask: number } | null {
  const [v, m] = text.split('/');
  const value = parseNumber(v);
  const mask = m === undefined ? 0xffffffff : parseNumber(m);
  return value === null || mask === null ? null : { value, mask };
}

/** ctStates are the conntrack states of a new connection's first packet (DNAT once NAT rewrote it). */
function ctStates(p: Packet): Set<string> {
  const s = new Set(['NEW']);
  if (p.dnat) s.add('DNAT');
  return s;
}

/** OPTION_VALUES: options of the matches the tracer knows, with how many values each takes. */
const MODULE_OPTIONS: Readonly<Record<string, Readonly<Record<string, number>>>> = {
  comment: { '--comment': 1 },
  tcp: { '--dport': 1, '--destination-port': 1, '--sport': 1, '--source-port': 1, '--syn': 0 },
  udp: { '--dport': 1, '--destination-port': 1, '--sport': 1, '--source-port': 1 },
  sctp: { '--dport': 1, '--destination-port': 1, '--sport': 1, '--source-port': 1 },
  multiport: { '--dports': 1, '--destination-ports': 1, '--sports': 1, '--source-ports': 1, '--ports': 1 },
  addrtype: { '--src-type': 1, '--dst-type': 1, '--limit-iface-in': 0, '--limit-iface-out': 0 },
  conntrack: { '--ctstate': 1, '--ctstatus': 1 },
  state: { '--state': 1 },
  mark: { '--mark': 1 },
  statistic: { '--mode': 1, '--probability': 1, '--every': 1, '--packet': 1 },
  recent: { '--rcheck': 0, '--update': 0, '--set': 0, '--remove': 0, '--seconds': 1, '--reap': 0, '--hitcount': 1, '--name': 1, '--mask': 1, '--rsource': 0, '--rdest': 0, '--rttl': 0 },
  set: { '--match-set': 2, '--return-nomatch': 0, '--update-counters': 0, '--update-subcounters': 0 },
  physdev: { '--physdev-is-in': 0, '--physdev-is-out': 0, '--physdev-is-bridged': 0, '--physdev-in': 1, '--physdev-out': 1 },
  ipvs: { '--ipvs': 0, '--vaddr': 1, '--vport': 1, '--vproto': 1, '--vdir': 1, '--vmethod': 1, '--vportctl': 1 },
  nfacct: { '--nfacct-name': 1 },
};

/**
 * compileIptablesRule reads one listed rule (its spec, without "-A CHAIN").
 * It never throws: what it cannot read makes the rule `unknown`.
 */
export function compileIptablesRule(spec: string): IptRule {
  let args: string[];
  try {
    args = splitArgs(spec);
  } catch {
    return { tests: [], probability: null, recent: null, target: null, goto: false, targetOptions: new Map(), comment: null, unknown: 'unbalanced quotes', assumption: null };
  }
  const tests: { test: Test; what: string }[] = [];
  let unknown: string | null = null;
  let assumption: string | null = null;
  let comment: string | null = null;
  let probability: number | null = null;
  let recent = null as { name: string; op: Recent['op'] | null; seconds: number | null } | null;
  let target: string | null = null;
  let goto = false;
  const targetOptions = new Map<string, string>();
  let modules: string[] = [];
  let negate = false;
  let statMode: string | null = null;
  const fail = (what: string) => {
    unknown ??= what;
  };
  const add = (test: Test | null, what: string) => {
    if (test) tests.push({ test, what });
    else fail(what);
  };

  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '!') {
      negate = true;
      continue;
    }
    const neg = negate;
    negate = false;
    const value = () => args[++i] ?? '';
    switch (a) {
      case '-s':
      case '--source': {
        const v = value();
        add(address(v, 'src', neg), `${neg ? '! ' : ''}-s ${v}`);
        continue;
      }
      case '-d':
      case '--destination': {
        const v = value();
        add(address(v, 'dst', neg), `${neg ? '! ' : ''}-d ${v}`);
        continue;
      }
      case '-p':
      case '--protocol': {
        const v = protoName(value());
        if (v !== 'all') add((p) => (p.proto === v) !== neg, `-p ${v}`);
        else if (neg) add((): boolean => false, '! -p all');
        continue;
      }
      case '-i':
      case '--in-interface': {
        const v = value();
        // The tracer does not know interfaces: a pod's packets are taken to arrive on a pod interface
        // (the local traffic detector's), anything else on another one; the node's own have none.
        add((p) => (p.from === 'pod') !== neg, `${neg ? '! ' : ''}-i ${v}`);
        assumption = `pods are taken to arrive on ${v}, other packets on another interface`;
        continue;
      }
      case '-o':
      case '--out-interface':
        fail(`${neg ? '! ' : ''}-o ${value()} (the tracer does not route to interfaces)`);
        continue;
      case '-f':
      case '--fragment':
        add(() => neg, '-f');
        continue;
      case '-m':
      case '--match': {
        const m = value();
        modules = [...modules, m];
        if (!(m in MODULE_OPTIONS)) fail(`-m ${m}`);
        continue;
      }
      case '-j':
      case '--jump':
      case '-g':
      case '--goto': {
        target = value();
        goto = a === '-g' || a === '--goto';
        for (i++; i < args.length; i++) {
          const o = args[i];
          if (!o.startsWith('--')) continue;
          const next = args[i + 1];
          if (next !== undefined && !next.startsWith('--')) {
            targetOptions.set(o, next);
            i++;
          } else targetOptions.set(o, '');
        }
        continue;
      }
      case '-c':
        i += 2; // counters inside a rule ("-c 1 2"), as some listings print them
        continue;
      default:
        break;
    }
    if (!a.startsWith('--')) {
      fail(a);
      continue;
    }
    // A match option: it belongs to the last module that knows it.
    const mod = [...modules].reverse().find((m) => MODULE_OPTIONS[m]?.[a] !== undefined);
    if (!mod) {
      fail(a);
      continue;
    }
    const n = MODULE_OPTIONS[mod][a];
    const vals = args.slice(i + 1, i + 1 + n);
    i += n;
    const v = vals[0] ?? '';
    const what = `${neg ? '! ' : ''}${a}${vals.length ? ' ' + vals.join(' ') : ''}`;
    switch (`${mod} ${a}`) {
      case 'comment --comment':
        comment = v;
        break;
      case 'tcp --dport':
      case 'tcp --destination-port':
      case 'udp --dport':
      case 'udp --destination-port':
      case 'sctp --dport':
      case 'sctp --destination-port':
        add((p) => p.proto === mod, `-m ${mod}`);
        add(portTest(v, 'dstPort', neg), what);
        break;
      case 'tcp --sport':
      case 'tcp --source-port':
      case 'udp --sport':
      case 'udp --source-port':
      case 'sctp --sport':
      case 'sctp --source-port':
        add(portTest(v, 'srcPort', neg), what);
        break;
      case 'tcp --syn':
        // A new connection's first packet is a SYN.
        add((p) => (p.proto === 'tcp') !== neg, what);
        break;
      case 'multiport --dports':
      case 'multiport --destination-ports':
        add(portTest(v, 'dstPort', neg), what);
        break;
      case 'multiport --sports':
      case 'multiport --source-ports':
        add(portTest(v, 'srcPort', neg), what);
        break;
      case 'multiport --ports': {
        const d = portTest(v, 'dstPort', false);
        const s = portTest(v, 'srcPort', false);
        add(d && s ? (p, e) => (d(p, e) === true || s(p, e) === true) !== neg : null, what);
        break;
      }
      case 'addrtype --src-type':
      case 'addrtype --dst-type': {
        const which = a === '--src-type' ? 'src' : 'dst';
        const types = v.toUpperCase().split(',');
        add((p, e) => {
          const local = isLocalAddress(e.facts, p[which]);
          const hit = types.some((t) => (t === 'LOCAL' ? local : t === 'UNICAST' ? !local : false));
          return hit !== neg;
        }, what);
        break;
      }
      case 'addrtype --limit-iface-in':
      case 'addrtype --limit-iface-out':
        break;
      case 'conntrack --ctstate':
      case 'conntrack --ctstatus':
      case 'state --state': {
        const want = v.toUpperCase().split(',');
        add((p) => {
          const have = ctStates(p);
          if (a === '--state') have.delete('DNAT');
          return want.some((s) => have.has(s)) !== neg;
        }, what);
        break;
      }
      case 'mark --mark': {
        const m = markValue(v);
        add(m ? (p) => ((p.mark & m.mask) >>> 0 === (m.value & m.mask) >>> 0) !== neg : null, what);
        break;
      }
      case 'statistic --mode':
        statMode = v;
        if (v !== 'random') fail(`-m statistic --mode ${v}`);
        break;
      case 'statistic --probability': {
        const pr = Number(v);
        if (!Number.isFinite(pr) || pr < 0 || pr > 1) fail(what);
        else probability = neg ? 1 - pr : pr;
        break;
      }
      case 'statistic --every':
      case 'statistic --packet':
        fail(`-m statistic ${a}`);
        break;
      case 'recent --rcheck':
      case 'recent --update':
      case 'recent --set':
      case 'recent --remove':
        recent = { name: recent?.name ?? 'DEFAULT', op: a.slice(2) as Recent['op'], seconds: recent?.seconds ?? null };
        if (neg) fail(`! ${a}`);
        break;
      case 'recent --name':
        recent = { name: v, op: recent?.op ?? null, seconds: recent?.seconds ?? null };
        break;
      case 'recent --seconds':
        recent = { name: recent?.name ?? 'DEFAULT', op: recent?.op ?? null, seconds: Number(v) };
        break;
      case 'recent --hitcount':
        fail(what);
        break;
      case 'recent --rdest':
        fail(what);
        break;
      case 'recent --reap':
      case 'recent --mask':
      case 'recent --rsource':
      case 'recent --rttl':
        break;
      case 'set --match-set': {
        const name = v;
        const flags = (vals[1] ?? '').split(',');
        add((p, e) => {
          const hit = e.sets(name, flags, p);
          return hit === null ? null : hit !== neg;
        }, what);
        break;
      }
      case 'set --return-nomatch':
      case 'set --update-counters':
      case 'set --update-subcounters':
        break;
      case 'physdev --physdev-is-in':
      case 'physdev --physdev-is-out':
      case 'physdev --physdev-is-bridged':
        // No bridge is modelled: a packet never crossed one.
        add(() => neg, what);
        break;
      case 'physdev --physdev-in':
      case 'physdev --physdev-out':
        add(() => neg, what);
        break;
      case 'ipvs --ipvs':
        add((p) => p.ipvs !== neg, what);
        break;
      case 'ipvs --vaddr': {
        const t = address(v, 'origDst', false);
        add(t ? (p, e) => (p.ipvs && t(p, e) === true) !== neg : null, what);
        break;
      }
      case 'ipvs --vport':
        add((p) => (p.ipvs && p.origDstPort === Number(v)) !== neg, what);
        break;
      case 'ipvs --vproto':
        add((p) => (p.ipvs && p.proto === protoName(v)) !== neg, what);
        break;
      case 'nfacct --nfacct-name':
        break;
      default:
        fail(what);
    }
  }
  if (statMode === null && probability !== null) fail('-m statistic without --mode');
  const rec: Recent | null = recent && recent.op ? { name: recent.name, op: recent.op, seconds: recent.seconds } : null;
  return { tests, probability, recent: rec, target, goto, targetOptions, comment, unknown, assumption };
}

/** matches evaluates a rule's tests (not its probability or recent match): true, false, or null when one cannot be decided. */
export function testRule(rule: IptRule, pkt: Packet, env: MatchEnv): boolean | null {
  let open = false;
  for (const t of rule.tests) {
    const r = t.test(pkt, env);
    if (r === false) return false;
    if (r === null) open = true;
  }
  return open ? null : true;
}

import { cidrContains, parseCIDR, ipv4ToInt, compareIPs } from '../net/ip.ts';
import { isLocalAddress, type NodeFacts, type Packet } from './packet.ts';

/**
 * An nftables rule, in the dialect kproxy writes and reads back
 * (kernel/nft-listing.ts renders the kernel's JSON the same way), made into
 * statements a Packet can be run through. It reads what a kube-proxy table
 * holds: address, protocol, port, mark, interface, conntrack state and fib
 * matches, concatenations looked up in sets and verdict maps (named or
 * anonymous), numgen, jump/goto and the verdicts, mark, dnat, masquerade,
 * set updates, counters and comments. Anything else makes the rule unknown;
 * the tracer then takes it as not matching and says so.
 */

/** Selector is one packet field a rule looks at. */
type Selector =
  | { readonly f: 'saddr' | 'daddr'; readonly family: 'ip' | 'ip6' }
  | { readonly f: 'l4proto' | 'mark' | 'iif' | 'ctstate' }
  | { readonly f: 'dport' | 'sport'; readonly proto: string | null }
  | { readonly f: 'fibtype'; readonly of: 'saddr' | 'daddr' }
  | { readonly f: 'numgen'; readonly mod: number; readonly offset: number };

interface Expr {
  readonly sel: readonly Selector[];
  readonly bitwise: { readonly op: 'and' | 'or' | 'xor'; readonly value: number } | null;
}

/** Value is the right side of a match: a named set, an anonymous set, or one literal. */
type Value = { readonly set: string } | { readonly items: readonly string[] } | { readonly literal: string };

export type NftVerdict = { readonly kind: 'accept' | 'drop' | 'return' | 'continue' | 'reject' } | { readonly kind: 'jump' | 'goto'; readonly chain: string };

export type NftStatement =
  | { readonly s: 'match'; readonly expr: Expr; readonly op: string; readonly value: Value; readonly text: string }
  | { readonly s: 'vmap'; readonly expr: Expr; readonly map: { readonly set: string } | { readonly pairs: readonly (readonly [string, NftVerdict])[] }; readonly text: string }
  | { readonly s: 'verdict'; readonly v: NftVerdict; readonly text: string }
  | { readonly s: 'dnat'; readonly to: string; readonly text: string }
  | { readonly s: 'masquerade'; readonly text: string }
  | { readonly s: 'snat'; readonly to: string; readonly text: string }
  | { readonly s: 'mark'; readonly op: 'or' | 'xor' | 'and' | 'set'; readonly value: number; readonly text: string }
  | { readonly s: 'update'; readonly set: string; readonly text: string }
  | { readonly s: 'counter'; readonly text: string };

export interface NftRule {
  readonly statements: readonly NftStatement[];
  readonly comment: string | null;
  readonly unknown: string | null;
}

/** tokens splits a rule into words; a quoted string is one word (with its quotes). */
function tokens(text: string): string[] {
  const out: string[] = [];
  const re = /"(?:[^"\\]|\\.)*"|\S+/g;
  for (const m of text.matchAll(re)) out.push(m[0]);
  return out;
}

function num(t: string | undefined): number | null {
  if (t === undefined) return null;
  const n = t.startsWith('0x') ? parseInt(t.slice(2), 16) : /^\d+$/.test(t) ? Number(t) : NaN;
  return Number.isFinite(n) ? n >>> 0 : null;
}

function verdictAt(tk: string[], i: number): { v: NftVerdict; n: number } | null {
  const t = tk[i];
  if (t === 'accept' || t === 'drop' || t === 'return' || t === 'continue') return { v: { kind: t }, n: 1 };
  if ((t === 'jump' || t === 'goto') && tk[i + 1]) return { v: { kind: t, chain: tk[i + 1] }, n: 2 };
  return null;
}

class Unknown extends Error {}

/** compileNftRule reads one listed rule; it never throws (what it cannot read makes the rule unknown). */
export function compileNftRule(text: string): NftRule {
  const tk = tokens(text);
  const st: NftStatement[] = [];
  let comment: string | null = null;
  let i = 0;
  const at = (k: number) => tk[i + k];
  const selector = (): Selector | null => {
    const t = at(0);
    if ((t === 'ip' || t === 'ip6') && (at(1) === 'saddr' || at(1) === 'daddr')) {
      i += 2;
      return { f: at(-1) as 'saddr' | 'daddr', family: t };
    }
    if (t === 'meta' && ['l4proto', 'mark', 'iif', 'iifname'].includes(at(1))) {
      i += 2;
      const k = at(-1);
      return { f: k === 'l4proto' ? 'l4proto' : k === 'mark' ? 'mark' : 'iif' };
    }
    if (t === 'mark' && at(1) !== 'set') {
      i += 1;
      return { f: 'mark' };
    }
    if (t === 'iif' || t === 'iifname') {
      i += 1;
      return { f: 'iif' };
    }
    if ((t === 'th' || t === 'tcp' || t === 'udp' || t === 'sctp') && (at(1) === 'dport' || at(1) === 'sport')) {
      i += 2;
      return { f: at(-1) as 'dport' | 'sport', proto: t === 'th' ? null : t };
    }
    if (t === 'ct' && at(1) === 'state') {
      i += 2;
      return { f: 'ctstate' };
    }
    if (t === 'fib' && (at(1) === 'saddr' || at(1) === 'daddr') && at(2) === 'type') {
      i += 3;
      return { f: 'fibtype', of: at(-2) as 'saddr' | 'daddr' };
    }
    if (t === 'numgen' && at(1) === 'random' && at(2) === 'mod') {
      const mod = num(at(3));
      if (mod === null || mod === 0) throw new Unknown(`numgen mod ${at(3)}`);
      i += 4;
      let offset = 0;
      if (at(0) === 'offset') {
        offset = num(at(1)) ?? 0;
        i += 2;
      }
      return { f: 'numgen', mod, offset };
    }
    return null;
  };
  /** braced reads "{ a , b }" (i at "{") into its comma-separated items. */
  const braced = (): string[][] => {
    const items: string[][] = [[]];
    for (i++; i < tk.length && tk[i] !== '}'; i++) {
      if (tk[i] === ',') items.push([]);
      else items[items.length - 1].push(tk[i]);
    }
    if (tk[i] !== '}') throw new Unknown('an unclosed {');
    i++;
    return items.filter((x) => x.length > 0);
  };
  try {
    while (i < tk.length) {
      const start = i;
      const t = at(0);
      if (t === 'comment') {
        comment = (at(1) ?? '').replace(/^"|"$/g, '');
        i += 2;
        continue;
      }
      const v = verdictAt(tk, i);
      if (v) {
        i += v.n;
        st.push({ s: 'verdict', v: v.v, text: tk.slice(start, i).join(' ') });
        continue;
      }
      if (t === 'reject') {
        i++;
        if (at(0) === 'with') i += 3;
        st.push({ s: 'verdict', v: { kind: 'reject' }, text: tk.slice(start, i).join(' ') });
        continue;
      }
      if (t === 'counter') {
        i++;
        while (at(0) === 'packets' || at(0) === 'bytes') i += 2;
        st.push({ s: 'counter', text: tk.slice(start, i).join(' ') });
        continue;
      }
      if (t === 'masquerade') {
        i++;
        while (at(0) === 'fully-random' || at(0) === 'random' || at(0) === 'persistent' || at(0) === 'fully-random,persistent') i++;
        st.push({ s: 'masquerade', text: tk.slice(start, i).join(' ') });
        continue;
      }
      if ((t === 'dnat' || t === 'snat') && at(1) === 'to' && at(2)) {
        i += 3;
        st.push({ s: t, to: at(-1), text: tk.slice(start, i).join(' ') });
        continue;
      }
      if ((t === 'mark' || (t === 'meta' && at(1) === 'mark')) && tk[i + (t === 'meta' ? 2 : 1)] === 'set') {
        i += t === 'meta' ? 3 : 2;
        // "mark set mark or 0x4000" | "mark set 0x4000"
        if (at(0) === 'mark' || (at(0) === 'meta' && at(1) === 'mark')) {
          i += at(0) === 'meta' ? 2 : 1;
          const op = at(0) as 'or' | 'xor' | 'and';
          const value = num(at(1));
          if (!['or', 'xor', 'and'].includes(op) || value === null) throw new Unknown(tk.slice(start, i + 2).join(' '));
          i += 2;
          st.push({ s: 'mark', op, value, text: tk.slice(start, i).join(' ') });
        } else {
          const value = num(at(0));
          if (value === null) throw new Unknown(tk.slice(start, i + 1).join(' '));
          i += 1;
          st.push({ s: 'mark', op: 'set', value, text: tk.slice(start, i).join(' ') });
        }
        continue;
      }
      if ((t === 'update' || t === 'add') && at(1)?.startsWith('@') && at(2) === '{') {
        const set = at(1).slice(1);
        i += 2;
        braced();
        st.push({ s: 'update', set, text: tk.slice(start, i).join(' ') });
        continue;
      }
      // A match or a verdict map: selector [. selector]* [and|or|xor N] then vmap/op/value.
      const sels: Selector[] = [];
      const first = selector();
      if (!first) throw new Unknown(t);
      sels.push(first);
      while (at(0) === '.') {
        i++;
        const s = selector();
        if (!s) throw new Unknown(`. ${at(0)}`);
        sels.push(s);
      }
      let bitwise: Expr['bitwise'] = null;
      if (at(0) === 'and' || at(0) === 'or' || at(0) === 'xor') {
        const value = num(at(1));
        if (value === null) throw new Unknown(`${at(0)} ${at(1)}`);
        bitwise = { op: at(0) as 'and' | 'or' | 'xor', value };
        i += 2;
      }
      const expr: Expr = { sel: sels, bitwise };
      if (at(0) === 'vmap') {
        i++;
        if (at(0)?.startsWith('@')) {
          const set = at(0).slice(1);
          i++;
          st.push({ s: 'vmap', expr, map: { set }, text: tk.slice(start, i).join(' ') });
          continue;
        }
        if (at(0) !== '{') throw new Unknown(`vmap ${at(0)}`);
        const pairs = braced().map((item): [string, NftVerdict] => {
          const colon = item.indexOf(':');
          const verdict = colon > 0 ? verdictAt(item, colon + 1) : null;
          if (!verdict) throw new Unknown(`vmap element ${item.join(' ')}`);
          return [item.slice(0, colon).join(' '), verdict.v];
        });
        st.push({ s: 'vmap', expr, map: { pairs }, text: tk.slice(start, i).join(' ') });
        continue;
      }
      let op = '==';
      if (['!=', '==', '<', '>', '<=', '>='].includes(at(0))) {
        op = at(0);
        i++;
      }
      let value: Value;
      if (at(0) === undefined) throw new Unknown(`${t} without a value`);
      if (at(0).startsWith('@')) {
        value = { set: at(0).slice(1) };
        i++;
      } else if (at(0) === '{') value = { items: braced().map((x) => x.join(' ')) };
      else {
        value = { literal: at(0) };
        i++;
      }
      st.push({ s: 'match', expr, op, value, text: tk.slice(start, i).join(' ') });
    }
  } catch (err) {
    if (err instanceof Unknown) return { statements: st, comment, unknown: err.message };
    throw err;
  }
  return { statements: st, comment, unknown: null };
}

/** fieldValue is a selector's value for a packet, as nft would print it; null when the tracer cannot know it. */
export function fieldValue(sel: Selector, p: Packet, facts: NodeFacts): string | null {
  switch (sel.f) {
    case 'saddr':
    case 'daddr':
      if ((sel.family === 'ip6') !== (p.family === 'IPv6')) return null;
      return sel.f === 'saddr' ? p.src : p.dst;
    case 'l4proto':
      return p.proto;
    case 'mark':
      return String(p.mark);
    case 'iif':
      return null;
    case 'ctstate':
      return 'new';
    case 'dport':
      if (sel.proto && sel.proto !== p.proto) return null;
      return String(p.dstPort);
    case 'sport':
      if (sel.proto && sel.proto !== p.proto) return null;
      return p.srcPort === null ? null : String(p.srcPort);
    case 'fibtype':
      return isLocalAddress(facts, sel.of === 'saddr' ? p.src : p.dst) ? 'local' : 'unicast';
    case 'numgen':
      return null;
  }
}

/** partMatches compares one element part (an address, prefix, range, number or name) with one value. */
export function partMatches(part: string, value: string): boolean {
  if (part === value) return true;
  if (part.includes('/')) {
    const c = parseCIDR(part);
    return c !== null && (c.family === 'IPv6') === value.includes(':') && cidrContains(c, value);
  }
  const dash = part.indexOf('-');
  if (dash > 0) {
    const lo = part.slice(0, dash);
    const hi = part.slice(dash + 1);
    if (/^\d+$/.test(lo) && /^\d+$/.test(hi) && /^\d+$/.test(value)) return Number(value) >= Number(lo) && Number(value) <= Number(hi);
    if (lo.includes('.') && !value.includes(':') && value.includes('.')) return ipv4ToInt(value) >= ipv4ToInt(lo) && ipv4ToInt(value) <= ipv4ToInt(hi);
    if (lo.includes(':') && value.includes(':')) return compareIPs(value, lo) >= 0 && compareIPs(value, hi) <= 0;
  }
  const a = num(part);
  const b = num(value);
  return a !== null && b !== null && a === b;
}

/** keyMatches: an element key ("10.96.0.10 . tcp . 80") holds the values (one per concatenated field). */
export function keyMatches(key: string, values: readonly string[]): boolean {
  const parts = key.split(' . ');
  return parts.length === values.length && parts.every((p, i) => partMatches(p, values[i]));
}

/** applyBitwise applies an expression's "and 0x4000" to a numeric value. */
export function applyBitwise(value: string, bitwise: Expr['bitwise']): string {
  if (!bitwise) return value;
  const n = Number(value) >>> 0;
  const r = bitwise.op === 'and' ? n & bitwise.value : bitwise.op === 'or' ? n | bitwise.value : n ^ bitwise.value;
  return String(r >>> 0);
}

import { NftListError } from '../errors.ts';
import { NFT_HOOKS, type NftBaseChain, type NftChain, type NftChainType, type NftElement, type NftFamily, type NftHook, type NftSet, type NftTable } from './nft-types.ts';

/**
 * nft-listing reads `nft -j list table …` (libnftables' JSON schema, as nft
 * 1.0.6 prints it) into the plain NftTable kproxy diffs against. Rules come as
 * expression trees; renderRule writes each in the dialect kproxy's nftables
 * backend writes, so a rule kproxy wrote reads back as the same text. An
 * expression kproxy never writes is rendered as "<json>": such a rule can
 * never equal a wanted one, so its chain is rewritten, never trusted.
 */

type Json = unknown;
type Obj = Record<string, Json>;

const isObj = (v: Json): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** MARK_HEX: bit operations on the packet mark render their operand as 0x%08x, as kproxy writes the mark. */
function hex8(n: Json): string {
  return typeof n === 'number' ? '0x' + n.toString(16).padStart(8, '0') : renderExpr(n);
}

const META_BARE = new Set(['mark', 'iif', 'iifname', 'oif', 'oifname']);
const VERDICTS = ['accept', 'drop', 'continue', 'return'];

/** renderExpr writes one expression (a value or a selector). */
export function renderExpr(e: Json): string {
  if (typeof e === 'string') return e;
  if (typeof e === 'number' || typeof e === 'boolean') return String(e);
  if (Array.isArray(e)) return e.map(renderExpr).join(',');
  if (!isObj(e)) return `<${JSON.stringify(e)}>`;
  const [k, v] = Object.entries(e)[0] ?? ['', null];
  const o = isObj(v) ? v : {};
  switch (k) {
    case 'payload':
      return `${o.protocol} ${o.field}`;
    case 'meta':
      return META_BARE.has(String(o.key)) ? String(o.key) : `meta ${o.key}`;
    case 'ct':
      return `ct ${o.key}`;
    case 'fib': {
      const flags = Array.isArray(o.flags) ? o.flags : [o.flags];
      return `fib ${flags.join(' . ')} ${o.result}`;
    }
    case 'concat':
      return (v as Json[]).map(renderExpr).join(' . ');
    case 'prefix':
      return `${o.addr}/${o.len}`;
    case 'range':
      return `${renderExpr((v as Json[])[0])}-${renderExpr((v as Json[])[1])}`;
    case 'set': {
      const items = (Array.isArray(v) ? v : [v]).map((it) => (Array.isArray(it) ? `${renderExpr(it[0])} : ${renderExpr(it[1])}` : renderExpr(it)));
      return `{ ${items.join(' , ')} }`;
    }
    case 'elem':
      return renderExpr(o.val);
    case 'numgen':
      return `numgen ${o.mode} mod ${o.mod}${o.offset ? ` offset ${o.offset}` : ''}`;
    case '&':
    case '|':
    case '^': {
      const [a, b] = v as Json[];
      return `${renderExpr(a)} ${k === '&' ? 'and' : k === '|' ? 'or' : 'xor'} ${hex8(b)}`;
    }
    case 'goto':
    case 'jump':
      return `${k} ${o.target}`;
    default:
      if (VERDICTS.includes(k)) return k;
      return `<${JSON.stringify(e)}>`;
  }
}

const QUOTED_META = new Set(['iif', 'iifname', 'oif', 'oifname']);

function renderMatch(o: Obj): string {
  const left = renderExpr(o.left);
  const l = o.left;
  let right = renderExpr(o.right);
  if (isObj(l) && isObj(l.meta) && QUOTED_META.has(String(l.meta.key)) && typeof o.right === 'string') right = `"${o.right}"`;
  const bitwise = isObj(l) && ('&' in l || '|' in l || '^' in l);
  if (o.op === '==' || o.op === 'in') return bitwise ? `${left} == ${right}` : `${left} ${right}`;
  return `${left} ${o.op} ${right}`;
}

/** renderStatement writes one statement of a rule. */
export function renderStatement(s: Json, family: NftFamily): string {
  if (!isObj(s)) return `<${JSON.stringify(s)}>`;
  const [k, v] = Object.entries(s)[0] ?? ['', null];
  const o = isObj(v) ? v : {};
  switch (k) {
    case 'match':
      return renderMatch(o);
    case 'jump':
    case 'goto':
      return `${k} ${o.target}`;
    case 'reject': {
      // "reject" alone is ICMP(v6) port unreachable, what kproxy writes.
      const def = family === 'ip' ? 'icmp' : 'icmpv6';
      if (v === null || ((o.type === def || o.type === 'icmpx') && o.expr === 'port-unreachable')) return 'reject';
      return `reject with ${o.type} ${o.expr}`;
    }
    case 'masquerade': {
      const flags = o.flags === undefined ? [] : Array.isArray(o.flags) ? o.flags : [o.flags];
      return flags.length ? `masquerade ${flags.join(',')}` : 'masquerade';
    }
    case 'mangle':
      return `${renderExpr(o.key)} set ${renderExpr(o.value)}`;
    case 'dnat': {
      const addr = renderExpr(o.addr);
      const host = family === 'ip6' ? `[${addr}]` : addr;
      return o.port === undefined ? `dnat to ${addr}` : `dnat to ${host}:${renderExpr(o.port)}`;
    }
    case 'vmap':
      return `${renderExpr(o.key)} vmap ${renderExpr(o.data)}`;
    case 'set':
      return `${o.op} ${o.set} { ${renderExpr(o.elem)} }`;
    case 'counter':
      // kproxy writes no counters (as kube-proxy); one added by hand reads as nft prints it, and the dashboard shows its figures.
      return `counter packets ${Number(o.packets ?? 0)} bytes ${Number(o.bytes ?? 0)}`;
    default:
      if (VERDICTS.includes(k)) return k;
      return `<${JSON.stringify(s)}>`;
  }
}

/** renderRule writes a listed rule: its statements, then its comment. */
export function renderRule(rule: Obj, family: NftFamily): string {
  const exprs = Array.isArray(rule.expr) ? rule.expr : [];
  const text = exprs.map((s) => renderStatement(s, family)).join(' ');
  return typeof rule.comment === 'string' ? `${text} comment "${rule.comment}"` : text;
}

function listedElement(raw: Json, map: boolean): NftElement {
  let keyExpr: Json = raw;
  let value: string | null = null;
  if (map && Array.isArray(raw)) {
    keyExpr = raw[0];
    value = renderExpr(raw[1]);
  }
  let comment: string | null = null;
  if (isObj(keyExpr) && isObj(keyExpr.elem)) {
    if (typeof keyExpr.elem.comment === 'string') comment = keyExpr.elem.comment;
    keyExpr = keyExpr.elem.val;
  }
  return { key: renderExpr(keyExpr), value, comment };
}

const CHAIN_TYPES = new Set<NftChainType>(['filter', 'nat', 'route']);
const HOOKS = new Set<NftHook>(NFT_HOOKS);

/**
 * parseNftTableJson turns the output of `nft -j list table FAMILY NAME` into
 * an NftTable. It throws NftListError when the text is not nft's JSON.
 */
export function parseNftTableJson(text: string, family: NftFamily, name: string): NftTable {
  let doc: Json;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new NftListError(`nft -j list table ${family} ${name} printed something that is not JSON`, { cause: err });
  }
  const items = isObj(doc) && Array.isArray(doc.nftables) ? doc.nftables : null;
  if (!items) throw new NftListError(`nft -j list table ${family} ${name}: no "nftables" array in its output`);
  const chains = new Map<string, { name: string; base: NftBaseChain | null; comment: string | null; rules: string[] }>();
  const sets = new Map<string, NftSet>();
  const rules: Obj[] = [];
  for (const item of items) {
    if (!isObj(item)) continue;
    if (isObj(item.chain)) {
      const c = item.chain;
      const hook = c.hook as NftHook;
      const base = CHAIN_TYPES.has(c.type as NftChainType) && HOOKS.has(hook) ? { type: c.type as NftChainType, hook, priority: Number(c.prio) } : null;
      chains.set(String(c.name), { name: String(c.name), base, comment: typeof c.comment === 'string' ? c.comment : null, rules: [] });
    } else if (isObj(item.set) || isObj(item.map)) {
      const map = isObj(item.map);
      const s = (map ? item.map : item.set) as Obj;
      const type = Array.isArray(s.type) ? s.type.join(' . ') : String(s.type);
      const flags = s.flags === undefined ? [] : (Array.isArray(s.flags) ? s.flags : [s.flags]).map(String);
      const elements = new Map<string, NftElement>();
      for (const raw of Array.isArray(s.elem) ? s.elem : []) {
        const el = listedElement(raw, map);
        elements.set(el.key, el);
      }
      sets.set(String(s.name), {
        name: String(s.name),
        map,
        type,
        flags: flags.filter((f) => f !== 'dynamic').sort(),
        timeoutSeconds: typeof s.timeout === 'number' ? s.timeout : null,
        comment: typeof s.comment === 'string' ? s.comment : null,
        elements,
      });
    } else if (isObj(item.rule)) rules.push(item.rule);
  }
  // Rules come after every chain; each lists in the chain's order.
  for (const r of rules) chains.get(String(r.chain))?.rules.push(renderRule(r, family));
  return { family, name, chains: chains as Map<string, NftChain>, sets };
}

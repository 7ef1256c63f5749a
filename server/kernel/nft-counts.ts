import { compileRule, hasAnonymousSet, NftCompileError } from './nft-netlink-rules.ts';
import type { NftFamily, NftTable } from './nft-types.ts';

/**
 * Counts for verifying a sync: what a table holds, read cheaply, in numbers
 * that kproxy can work out from what it meant to write. After a full sync the
 * proxier compares the kernel's counts with the same counts of its intended
 * table (proxy/nftables/verify.ts): a silent truncation (a set's elements
 * cut short by an encoding limit) shows as a number that differs.
 *
 * A chain's count is nf_tables' own use count (NFTA_CHAIN_USE): one for each
 * of its rules and one for each verdict that names it (a rule's jump or goto,
 * an element of a verdict map, named or anonymous). One dump of the chains
 * reads it for every chain of a table (about 1 s for the 111,000 chains of
 * 10,000 Services x 10 endpoints), where counting the rules alone would take a
 * dump per chain, and the elements of each anonymous map a dump per set, each
 * a walk of the table's list of sets (the kernel finds sets by name in a list).
 * Elements of sets that are not verdict maps (cluster IPs, source ranges) are
 * counted by their own dumps, only for the sets and chains asked for.
 */

/** NftCountRequest: what to count besides every chain's use: these named sets' elements, and the anonymous sets of these chains' rules. */
export interface NftCountRequest {
  readonly sets: readonly string[];
  readonly anonymousIn: readonly string[];
}

/** NftTableCounts: see the file's comment. */
export interface NftTableCounts {
  /** chainUse: every chain of the table: its rules plus the verdicts that name it. */
  readonly chainUse: ReadonlyMap<string, number>;
  /** setNames: every named set and map of the table. */
  readonly setNames: ReadonlySet<string>;
  /** elements: the element count of each set asked for that exists. */
  readonly elements: ReadonlyMap<string, number>;
  /**
   * anonymous: for each chain asked for that exists, the elements of each
   * rule's anonymous sets, in rule order, in the kernel's units (an interval
   * is a start and an end element, as the netlink encoder writes it); 0 for a
   * rule without one.
   */
  readonly anonymous: ReadonlyMap<string, readonly number[]>;
}

/** verdictTargets: the chains a rule or an element value names in a verdict (`jump X`, `goto X`, each element of a `vmap { … }`). */
export function verdictTargets(text: string): string[] {
  const out: string[] = [];
  forEachVerdictTarget(text, (t) => out.push(t));
  return out;
}

/**
 * forEachVerdictTarget calls `f` with each chain `text` names in a verdict:
 * `jump X` or `goto X` where a word starts (the text's start, a space, "{",
 * "," or ":"), before the rule's comment (which comes last and may say
 * anything). One sticky pass of a regular expression: a full sync's
 * verification runs it over every rule of the table (232,000 at 10,000
 * Services x 10 endpoints, about 45 ms).
 */
function forEachVerdictTarget(text: string, f: (chain: string) => void): void {
  if (!text.includes('jump ') && !text.includes('goto ')) return;
  const comment = text.indexOf(' comment "');
  const rule = comment >= 0 ? text.slice(0, comment) : text;
  VERDICT.lastIndex = 0;
  for (let m = VERDICT.exec(rule); m; m = VERDICT.exec(rule)) f(m[1]);
}

const VERDICT = /(?:^|[\s{,:])(?:jump|goto) ([^\s,}"]+)/g;

/**
 * anonymousElements: the elements a rule's anonymous sets hold in the
 * kernel, as the netlink encoder writes them (0 without one); null when the
 * rule is not one kproxy's compiler reads.
 */
export function anonymousElements(rule: string, family: NftFamily): number | null {
  if (!hasAnonymousSet(rule)) return 0;
  let id = 0;
  try {
    const compiled = compileRule(rule, { family, setId: () => null, newSetId: () => ++id, ifindex: () => 1 });
    let n = 0;
    for (const s of compiled.sets) n += s.elements.length;
    return n;
  } catch (err) {
    if (err instanceof NftCompileError) return null;
    throw err;
  }
}

/**
 * countsOf works the counts out from a table as text (kproxy's intended
 * table, or a listing read with `nft -j`): what the kernel's own counters
 * must say when it holds that table. A rule the compiler cannot read counts
 * its anonymous sets as -1, which no kernel count equals.
 */
export function countsOf(table: NftTable, ask: NftCountRequest): NftTableCounts {
  const chainUse = new Map<string, number>();
  const bump = (name: string) => chainUse.set(name, (chainUse.get(name) ?? 0) + 1);
  for (const c of table.chains.values()) chainUse.set(c.name, c.rules.length);
  for (const c of table.chains.values()) for (const r of c.rules) forEachVerdictTarget(r, bump);
  for (const s of table.sets.values()) {
    if (!s.map) continue;
    for (const e of s.elements.values()) if (e.value) forEachVerdictTarget(e.value, bump);
  }
  // A verdict naming a chain that is not in the table (the kernel refuses it) counts nowhere.
  for (const name of chainUse.keys()) if (!table.chains.has(name)) chainUse.delete(name);
  const elements = new Map<string, number>();
  for (const name of ask.sets) {
    const s = table.sets.get(name);
    if (s) elements.set(name, s.elements.size);
  }
  const anonymous = new Map<string, number[]>();
  for (const name of ask.anonymousIn) {
    const c = table.chains.get(name);
    if (c)
      anonymous.set(
        name,
        c.rules.map((r) => anonymousElements(r, table.family) ?? -1),
      );
  }
  return { chainUse, setNames: new Set(table.sets.keys()), elements, anonymous };
}

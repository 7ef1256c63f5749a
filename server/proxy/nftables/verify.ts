import { countsOf, type NftCountRequest, type NftTableCounts } from '../../kernel/nft-counts.ts';
import { hasAnonymousSet } from '../../kernel/nft-netlink-rules.ts';
import type { NftTable } from '../../kernel/nft-types.ts';
import type { CountCheck } from '../sync-verify.ts';
import { isAffinitySetName } from './names.ts';

/**
 * What a full sync's verification reads of the table (kernel/nft-counts.ts)
 * and how it compares: every chain's use count (its rules and the verdicts
 * naming it: this covers the numgen verdict maps, whose every element names
 * an endpoint chain, and the named verdict maps), the elements of every
 * named set but the affinity sets (their elements come from packets), and
 * the anonymous sets that name no chain (source ranges, ServiceCIDRs), rule
 * by rule. Pure: the proxier hands it its intended table and the kernel's
 * counts.
 */

/** verifyRequest: the counts to read for an intended table. */
export function verifyRequest(wanted: NftTable): NftCountRequest {
  const sets = [...wanted.sets.keys()].filter((s) => !isAffinitySetName(s)).sort();
  const anonymousIn: string[] = [];
  for (const c of wanted.chains.values()) if (c.rules.some((r) => r.includes('{') && hasAnonymousSet(r) && !r.includes('vmap {'))) anonymousIn.push(c.name);
  return { sets, anonymousIn: anonymousIn.sort() };
}

/**
 * compareCounts checks the kernel's counts against the intended table's:
 * every chain and set in both, with the same counts, and nothing else.
 * servicePortOf names the service port a chain belongs to (for the message).
 */
export function compareCounts(wanted: NftTable, ask: NftCountRequest, got: NftTableCounts, check: CountCheck, servicePortOf: (chain: string) => string | undefined): void {
  const want = countsOf(wanted, ask);
  let found = 0;
  for (const [name, n] of want.chainUse) {
    const held = got.chainUse.get(name) ?? null;
    if (held !== null) found++;
    // The owner is looked up only for a mismatch: a clean check at 10,000 x 10 compares 111,000 chains.
    check.compare(`chain ${name}`, 'rules and verdicts naming it', n, held, held === n ? undefined : servicePortOf(name));
  }
  // When every chain the kernel holds was found above, none is left to look for.
  if (found !== got.chainUse.size) for (const [name, n] of got.chainUse) if (!want.chainUse.has(name)) check.unexpected(`chain ${name}`, 'rules and verdicts naming it', n);
  for (const s of wanted.sets.values()) {
    const object = `${s.map ? 'map' : 'set'} ${s.name}`;
    const n = want.elements.get(s.name);
    if (n !== undefined) check.compare(object, 'elements', n, got.setNames.has(s.name) ? (got.elements.get(s.name) ?? null) : null);
    else check.compare(object, 'set', 1, got.setNames.has(s.name) ? 1 : null);
  }
  for (const name of got.setNames) if (!wanted.sets.has(name)) check.unexpected(`set ${name}`, 'set', 1);
  for (const [chain, rules] of want.anonymous) {
    const held = got.anonymous.get(chain);
    rules.forEach((n, i) => {
      if (n === 0 && (held?.[i] ?? 0) === 0) return;
      check.compare(`rule ${i + 1} of chain ${chain}`, 'elements in its anonymous set', n, held ? (held[i] ?? null) : null, servicePortOf(chain));
    });
  }
}

import type { NftElement } from '../../kernel/nft-types.ts';
import type { WantedElement } from './builder.ts';
import type { ElementSet } from './names.ts';

/**
 * ElementIndex knows, for every element of the shared sets and maps, which
 * service ports want it. Several ports may want one key (every port of a
 * Service puts its cluster IP in cluster-ips; two Services may claim one
 * external IP and port): the element the table holds is the one wanted by the
 * first port in id order, whatever order the ports were added in, so partial
 * syncs end where a full sync would. replace() returns the keys whose element
 * changed, with the element before and after: O(that port's elements).
 */

interface Claim {
  readonly value: string | null;
  readonly comment: string | null;
}

/** ElementChange: one key whose effective element changed (before/after may be absent). */
export interface ElementChange {
  readonly set: ElementSet;
  readonly key: string;
  readonly before: NftElement | undefined;
  readonly after: NftElement | undefined;
}

function first(claims: Map<string, Claim>, key: string): NftElement | undefined {
  let best: string | null = null;
  for (const id of claims.keys()) if (best === null || id < best) best = id;
  if (best === null) return undefined;
  const c = claims.get(best)!;
  return { key, value: c.value, comment: c.comment };
}

export class ElementIndex {
  readonly #sets = new Map<ElementSet, Map<string, Map<string, Claim>>>();
  /** conflicts: keys claimed by several ports with different verdicts (a misconfiguration worth a warning). */
  #conflicts = 0;

  /** effective is the element the table should hold for a key. */
  effective(set: ElementSet, key: string): NftElement | undefined {
    const claims = this.#sets.get(set)?.get(key);
    return claims ? first(claims, key) : undefined;
  }

  /** elements lists every effective element of a set. */
  *elements(set: ElementSet): Iterable<NftElement> {
    for (const [key, claims] of this.#sets.get(set) ?? []) yield first(claims, key)!;
  }

  get conflicts(): number {
    return this.#conflicts;
  }

  /** replace swaps one port's claims (before → after) and returns the keys whose element changed. */
  replace(portId: string, before: readonly WantedElement[], after: readonly WantedElement[]): ElementChange[] {
    const touched = new Map<string, { set: ElementSet; key: string; before: NftElement | undefined }>();
    const touch = (set: ElementSet, key: string) => {
      const k = `${set}\u0000${key}`;
      if (!touched.has(k)) touched.set(k, { set, key, before: this.effective(set, key) });
    };
    for (const e of before) touch(e.set, e.key);
    for (const e of after) touch(e.set, e.key);
    for (const e of before) {
      const keys = this.#sets.get(e.set);
      const claims = keys?.get(e.key);
      if (!claims) continue;
      claims.delete(portId);
      if (claims.size === 0) keys!.delete(e.key);
    }
    for (const e of after) {
      let keys = this.#sets.get(e.set);
      if (!keys) this.#sets.set(e.set, (keys = new Map()));
      let claims = keys.get(e.key);
      if (!claims) keys.set(e.key, (claims = new Map()));
      for (const [id, c] of claims) if (id !== portId && c.value !== e.value) this.#conflicts++;
      claims.set(portId, { value: e.value, comment: e.comment });
    }
    const out: ElementChange[] = [];
    for (const t of touched.values()) {
      const now = this.effective(t.set, t.key);
      const same = t.before && now ? t.before.value === now.value && t.before.comment === now.comment : t.before === now;
      if (!same) out.push({ set: t.set, key: t.key, before: t.before, after: now });
    }
    return out;
  }
}

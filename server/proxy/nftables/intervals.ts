import { ipFromBigInt, ipToBigInt, parseCIDR, type IPFamily } from '../../net/ip.ts';

/**
 * nft merges the elements of an anonymous interval set ("ip saddr != { … }")
 * when it loads a rule: overlapping and adjacent ranges become one, and the
 * listing shows each result as an address, a prefix or a range, lowest first
 * (measured with nft 1.0.6: { 10.0.0.0/25, 10.0.0.128/25, 10.0.1.5 } lists as
 * { 10.0.0.0/24, 10.0.1.5 }). mergeAddresses writes a list of CIDRs and
 * addresses the way nft will list it, so the rule kproxy writes reads back
 * from the kernel as the same text.
 */

/** BITS: an address's width in each family. */
const BITS: Record<IPFamily, number> = { IPv4: 32, IPv6: 128 };

/** toInterval reads "a.b.c.d", "a.b.c.d/n" (or IPv6) as [first, last]; null when neither. */
function toInterval(text: string, family: IPFamily): [bigint, bigint] | null {
  if (text.includes('/')) {
    const c = parseCIDR(text);
    if (!c) return null;
    const size = 1n << BigInt(BITS[family] - c.prefix);
    const first = ipToBigInt(c.ip)!;
    return [first, first + size - 1n];
  }
  const n = ipToBigInt(text);
  return n === null ? null : [n, n];
}

/** render writes one merged interval as nft lists it: an address, a prefix, or "first-last". */
function render([lo, hi]: [bigint, bigint], family: IPFamily): string {
  if (lo === hi) return ipFromBigInt(lo, family);
  const size = hi - lo + 1n;
  const isPow2 = (size & (size - 1n)) === 0n;
  if (isPow2 && lo % size === 0n) {
    let bits = 0;
    for (let s = size; s > 1n; s >>= 1n) bits++;
    return `${ipFromBigInt(lo, family)}/${BITS[family] - bits}`;
  }
  return `${ipFromBigInt(lo, family)}-${ipFromBigInt(hi, family)}`;
}

/**
 * mergeAddresses merges CIDRs and addresses of one family into nft's listing
 * form. Entries of the other family, or unreadable ones, are left out (the
 * callers pass validated values).
 */
export function mergeAddresses(entries: readonly string[], family: IPFamily): string[] {
  const ivs: [bigint, bigint][] = [];
  for (const e of entries) {
    if ((family === 'IPv6') !== e.includes(':')) continue;
    const iv = toInterval(e, family);
    if (iv) ivs.push(iv);
  }
  ivs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const merged: [bigint, bigint][] = [];
  for (const iv of ivs) {
    const last = merged.at(-1);
    if (last && iv[0] <= last[1] + 1n) {
      if (iv[1] > last[1]) last[1] = iv[1];
    } else merged.push([iv[0], iv[1]]);
  }
  return merged.map((iv) => render(iv, family));
}

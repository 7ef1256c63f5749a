import { canonicalIP, parseCIDR } from '../../net/ip.ts';

/**
 * nft merges the elements of an anonymous interval set ("ip saddr != { … }")
 * when it loads a rule: overlapping and adjacent ranges become one, and the
 * listing shows each result as an address, a prefix or a range, lowest first
 * (measured with nft 1.0.6: { 10.0.0.0/25, 10.0.0.128/25, 10.0.1.5 } lists as
 * { 10.0.0.0/24, 10.0.1.5 }). mergeAddresses writes a list of CIDRs and
 * addresses the way nft will list it, so the rule kproxy writes reads back
 * from the kernel as the same text.
 */

function v6ToBigInt(ip: string): bigint {
  const [head, tail = null] = ip.split('::');
  const parse = (s: string) => (s === '' ? [] : s.split(':').map((g) => BigInt(Number.parseInt(g, 16))));
  const a = parse(head);
  const b = tail === null ? [] : parse(tail);
  const groups = [...a, ...new Array(8 - a.length - b.length).fill(0n), ...b];
  return groups.reduce((n, g) => (n << 16n) | g, 0n);
}

function v6FromBigInt(n: bigint): string {
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((n >> BigInt(i * 16)) & 0xffffn));
  // canonicalIP compresses the zero run the way Go prints it.
  return canonicalIP(groups.map((g) => g.toString(16)).join(':'))!;
}

interface Family {
  bits: number;
  toInt(ip: string): bigint;
  fromInt(n: bigint): string;
}

const V4: Family = {
  bits: 32,
  toInt: (ip) => ip.split('.').reduce((n, o) => (n << 8n) | BigInt(Number(o)), 0n),
  fromInt: (n) => [24n, 16n, 8n, 0n].map((s) => String((n >> s) & 255n)).join('.'),
};
const V6: Family = { bits: 128, toInt: v6ToBigInt, fromInt: v6FromBigInt };

/** toInterval reads "a.b.c.d", "a.b.c.d/n" (or IPv6) as [first, last]; null when neither. */
function toInterval(text: string, f: Family): [bigint, bigint] | null {
  if (text.includes('/')) {
    const c = parseCIDR(text);
    if (!c) return null;
    const size = 1n << BigInt(f.bits - c.prefix);
    const first = f.toInt(c.ip);
    return [first, first + size - 1n];
  }
  const ip = canonicalIP(text);
  if (!ip) return null;
  const n = f.toInt(ip);
  return [n, n];
}

/** render writes one merged interval as nft lists it: an address, a prefix, or "first-last". */
function render([lo, hi]: [bigint, bigint], f: Family): string {
  if (lo === hi) return f.fromInt(lo);
  const size = hi - lo + 1n;
  const isPow2 = (size & (size - 1n)) === 0n;
  if (isPow2 && lo % size === 0n) {
    let bits = 0;
    for (let s = size; s > 1n; s >>= 1n) bits++;
    return `${f.fromInt(lo)}/${f.bits - bits}`;
  }
  return `${f.fromInt(lo)}-${f.fromInt(hi)}`;
}

/**
 * mergeAddresses merges CIDRs and addresses of one family into nft's listing
 * form. Entries of the other family, or unreadable ones, are left out (the
 * callers pass validated values).
 */
export function mergeAddresses(entries: readonly string[], family: 'IPv4' | 'IPv6'): string[] {
  const f = family === 'IPv4' ? V4 : V6;
  const ivs: [bigint, bigint][] = [];
  for (const e of entries) {
    if ((family === 'IPv6') !== e.includes(':')) continue;
    const iv = toInterval(e, f);
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
  return merged.map((iv) => render(iv, f));
}

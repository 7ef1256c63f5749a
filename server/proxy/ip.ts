import { isIPv4, isIPv6 } from 'node:net';

/** IPFamily is the address family a proxier instance programs. */
export type IPFamily = 'IPv4' | 'IPv6';

/**
 * canonicalIP returns the canonical text of an IP address, or null when the text
 * is not one. Like Kubernetes' ParseIPSloppy, IPv4 octets with leading zeros are
 * read as decimal ("010.0.0.1" is 10.0.0.1), because the API server accepted such
 * addresses before 1.30 and they may still be stored.
 */
export function canonicalIP(text: unknown): string | null {
  if (typeof text !== 'string' || text.length === 0 || text.length > 45) return null;
  const parts = text.split('.');
  if (parts.length === 4 && parts.every((p) => /^\d{1,3}$/.test(p))) {
    const octets = parts.map((p) => Number.parseInt(p, 10));
    return octets.every((o) => o <= 255) ? octets.join('.') : null;
  }
  if (isIPv6(text)) return expandIPv6(text) ? compressIPv6(expandIPv6(text)!) : null;
  return null;
}

/** ipFamilyOf returns the family of a (canonical or sloppy) IP address, or null. */
export function ipFamilyOf(text: unknown): IPFamily | null {
  const ip = canonicalIP(text);
  if (!ip) return null;
  return ip.includes(':') ? 'IPv6' : 'IPv4';
}

/** CIDR is a parsed network: canonical network address and prefix length. */
export interface CIDR {
  readonly family: IPFamily;
  readonly ip: string;
  readonly prefix: number;
  /** text is "ip/prefix" with the host bits cleared, as Go's net.ParseCIDR prints it. */
  readonly text: string;
}

/** parseCIDR parses "a.b.c.d/n" or "x::y/n"; host bits are cleared. Returns null when invalid. */
export function parseCIDR(text: unknown): CIDR | null {
  if (typeof text !== 'string') return null;
  const slash = text.indexOf('/');
  if (slash < 0) return null;
  const ip = canonicalIP(text.slice(0, slash));
  const prefixText = text.slice(slash + 1);
  if (!ip || !/^\d{1,3}$/.test(prefixText)) return null;
  const prefix = Number(prefixText);
  if (ip.includes('.')) {
    if (prefix > 32) return null;
    const n = ipv4ToInt(ip) & (prefix === 0 ? 0 : (~0 << (32 - prefix)) >>> 0);
    const net = intToIPv4(n >>> 0);
    return { family: 'IPv4', ip: net, prefix, text: `${net}/${prefix}` };
  }
  if (prefix > 128) return null;
  const groups = expandIPv6(ip)!;
  const masked = groups.map((g, i) => {
    const bits = Math.max(0, Math.min(16, prefix - i * 16));
    return bits === 16 ? g : bits === 0 ? 0 : g & ((0xffff << (16 - bits)) & 0xffff);
  });
  const net = compressIPv6(masked);
  return { family: 'IPv6', ip: net, prefix, text: `${net}/${prefix}` };
}

/** cidrContains reports whether ip (canonical) lies inside cidr. */
export function cidrContains(cidr: CIDR, ip: string): boolean {
  if (cidr.family === 'IPv4') {
    if (!ip.includes('.') || ip.includes(':')) return false;
    const mask = cidr.prefix === 0 ? 0 : (~0 << (32 - cidr.prefix)) >>> 0;
    return ((ipv4ToInt(ip) & mask) >>> 0) === ipv4ToInt(cidr.ip);
  }
  const g = expandIPv6(ip);
  const n = expandIPv6(cidr.ip);
  if (!g || !n) return false;
  for (let i = 0; i < 8; i++) {
    const bits = Math.max(0, Math.min(16, cidr.prefix - i * 16));
    const mask = bits === 0 ? 0 : (0xffff << (16 - bits)) & 0xffff;
    if ((g[i] & mask) !== (n[i] & mask)) return false;
  }
  return true;
}

export function ipv4ToInt(ip: string): number {
  const p = ip.split('.');
  return ((+p[0] << 24) | (+p[1] << 16) | (+p[2] << 8) | +p[3]) >>> 0;
}

export function intToIPv4(n: number): string {
  return `${(n >>> 24) & 255}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

function expandIPv6(text: string): number[] | null {
  let head = text;
  let tail4: number[] = [];
  const lastColon = text.lastIndexOf(':');
  const maybeV4 = text.slice(lastColon + 1);
  if (maybeV4.includes('.')) {
    if (!isIPv4(maybeV4)) return null;
    const n = ipv4ToInt(maybeV4);
    tail4 = [n >>> 16, n & 0xffff];
    head = text.slice(0, lastColon + 1) + '0';
  }
  const halves = head.split('::');
  if (halves.length > 2) return null;
  const parse = (s: string) => (s === '' ? [] : s.split(':').map((h) => Number.parseInt(h, 16)));
  let groups: number[];
  if (halves.length === 2) {
    const a = parse(halves[0]);
    const b = parse(halves[1]);
    const fill = 8 - tail4.length - a.length - b.length + (tail4.length ? 1 : 0);
    if (fill < 0) return null;
    groups = [...a, ...new Array(fill).fill(0), ...b];
  } else {
    groups = parse(head);
  }
  if (tail4.length) groups = [...groups.slice(0, groups.length - 1), ...tail4];
  if (groups.length !== 8 || groups.some((g) => Number.isNaN(g) || g < 0 || g > 0xffff)) return null;
  return groups;
}

/** compressIPv6 prints 8 groups the way Go's net.IP.String does (RFC 5952). */
function compressIPv6(groups: number[]): string {
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

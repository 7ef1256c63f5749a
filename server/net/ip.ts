/**
 * IP and CIDR helpers, the bottom of kproxy's layers (docs/architecture.md):
 * this module imports nothing, and every layer may import it. kube-proxy keeps
 * the same helpers in k8s.io/utils/net. Addresses are compared and printed in
 * their canonical text (Go's net.IP.String), so "10.0.0.01" and "10.0.0.1",
 * or "::0:1" and "::1", are one address everywhere in kproxy.
 */

/** IPFamily is the address family a proxier instance programs. */
export type IPFamily = 'IPv4' | 'IPv6';

/**
 * canonicalIP returns the canonical text of an IP address, or null when the text
 * is not one. Like Kubernetes' ParseIPSloppy, IPv4 octets with leading zeros are
 * read as decimal ("010.0.0.1" is 10.0.0.1), because the API server accepted such
 * addresses before 1.30 and they may still be stored. IPv6 zones ("fe80::1%eth0")
 * are not addresses a Service can hold and are refused.
 */
export function canonicalIP(text: unknown): string | null {
  if (typeof text !== 'string' || text.length === 0 || text.length > 45) return null;
  // The text itself when it is canonical already (nearly always): a node holds one copy of each address, not two.
  if (isCanonicalIPv4(text)) return text;
  const octets = ipv4Octets(text);
  if (octets) return same(text, octets.join('.'));
  if (!text.includes(':')) return null;
  const groups = expandIPv6(text);
  return groups ? same(text, compressIPv6(groups)) : null;
}

function same(text: string, canonical: string): string {
  return canonical === text ? text : canonical;
}

/** ipFamilyOf returns the family of a (canonical or sloppy) IP address, or null. */
export function ipFamilyOf(text: unknown): IPFamily | null {
  const ip = canonicalIP(text);
  if (!ip) return null;
  return ip.includes(':') ? 'IPv6' : 'IPv4';
}

/**
 * isIPv4MappedIPv6 reports whether an address is IPv4 mapped into IPv6
 * (::ffff:a.b.c.d, in any spelling). Kubernetes refuses such addresses in
 * Services and EndpointSlices (Go reads them as IPv4, the kernel as IPv6, so
 * they would land in the wrong family's rules); kproxy refuses them per object.
 */
export function isIPv4MappedIPv6(text: unknown): boolean {
  if (typeof text !== 'string' || !text.includes(':')) return false;
  const groups = canonicalIP(text) === null ? null : expandIPv6(text);
  return groups !== null && groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff;
}

/** ObjectIP is an address read from a Kubernetes object: canonical text and family, or why it was refused. */
export type ObjectIP = { readonly ip: string; readonly family: IPFamily } | { readonly ip: null; readonly why: string };

/**
 * objectIP reads an address from a Kubernetes object (a cluster IP, an
 * endpoint, an external or load balancer IP). It returns the canonical text
 * (RFC 5952 for IPv6: lower case, the longest run of zero groups compressed),
 * or why the text is refused: not an address, or IPv4-mapped IPv6.
 */
export function objectIP(text: unknown): ObjectIP {
  const ip = canonicalIP(text);
  if (ip === null) return { ip: null, why: 'is not an IP address' };
  if (isIPv4MappedIPv6(ip)) {
    const g = expandIPv6(ip)!;
    const v4 = intToIPv4(((g[6] << 16) | g[7]) >>> 0);
    return { ip: null, why: `is an IPv4-mapped IPv6 address, which Kubernetes does not accept (write ${v4} instead)` };
  }
  return { ip, family: ip.includes(':') ? 'IPv6' : 'IPv4' };
}

/** otherFamily returns the other IP family. */
export function otherFamily(family: IPFamily): IPFamily {
  return family === 'IPv4' ? 'IPv6' : 'IPv4';
}

/** nftFamilyOf is the nftables family that holds a family's tables ("ip" / "ip6"). */
export function nftFamilyOf(family: IPFamily): 'ip' | 'ip6' {
  return family === 'IPv6' ? 'ip6' : 'ip';
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
    const n = ipv4ToInt(ip) & ipv4Mask(prefix);
    const net = intToIPv4(n >>> 0);
    return { family: 'IPv4', ip: net, prefix, text: `${net}/${prefix}` };
  }
  if (prefix > 128) return null;
  const masked = expandIPv6(ip)!.map((g, i) => g & ipv6GroupMask(prefix, i));
  const net = compressIPv6(masked);
  return { family: 'IPv6', ip: net, prefix, text: `${net}/${prefix}` };
}

/** cidrContains reports whether ip (canonical) lies inside cidr. */
export function cidrContains(cidr: CIDR, ip: string): boolean {
  if (cidr.family === 'IPv4') {
    if (!ip.includes('.') || ip.includes(':')) return false;
    return (ipv4ToInt(ip) & ipv4Mask(cidr.prefix)) >>> 0 === ipv4ToInt(cidr.ip);
  }
  const g = expandIPv6(ip);
  const n = expandIPv6(cidr.ip);
  if (!g || !n) return false;
  for (let i = 0; i < 8; i++) {
    const mask = ipv6GroupMask(cidr.prefix, i);
    if ((g[i] & mask) !== (n[i] & mask)) return false;
  }
  return true;
}

/**
 * isLoopbackIP reports whether a canonical address is the host's loopback:
 * 127.0.0.0/8, ::1, or 127.0.0.0/8 mapped into IPv6 (::ffff:127.x.y.z), as
 * Go's net.IP.IsLoopback.
 */
export function isLoopbackIP(ip: string): boolean {
  if (ip.startsWith('127.')) return true;
  if (ip === '::1') return true;
  const groups = ip.includes(':') ? expandIPv6(ip) : null;
  return groups !== null && groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff && groups[6] >>> 8 === 127;
}

/**
 * isLinkLocalIPv6 reports whether an address is IPv6 link-local unicast
 * (fe80::/10): an interface's own address, never a node's address for Services.
 */
export function isLinkLocalIPv6(ip: string): boolean {
  const groups = ip.includes(':') ? expandIPv6(ip) : null;
  return groups !== null && (groups[0] & 0xffc0) === 0xfe80;
}

/**
 * endpointIPProblem says why a canonical address may not be an endpoint or an
 * external IP, in the API server's words, or null when it may be one. It
 * follows Kubernetes' ValidateEndpointIP (pkg/apis/core/validation, which
 * the EndpointSlice validation and the Service externalIPs validation call):
 * unspecified (0.0.0.0, ::), loopback (127.0.0.0/8, ::1), link-local unicast
 * (169.254.0.0/16, fe80::/10) and link-local multicast (224.0.0.0/24, and
 * Go's IsLinkLocalMulticast for IPv6: ffX2::/16, whatever the flags X). Other
 * multicast and the IPv4 broadcast address pass, exactly as they pass the API
 * server (its comment calls the multicast case "probably a bug"): a stricter
 * rule here would refuse objects a real cluster holds and kube-proxy programs.
 */
export function endpointIPProblem(ip: string): string | null {
  if (ip === '0.0.0.0' || ip === '::') return `may not be unspecified (${ip})`;
  if (isLoopbackIP(ip)) return 'may not be in the loopback range (127.0.0.0/8, ::1/128)';
  if (ip.includes(':')) {
    const first = expandIPv6(ip)?.[0] ?? 0;
    if ((first & 0xffc0) === 0xfe80) return 'may not be in the link-local range (169.254.0.0/16, fe80::/10)';
    if ((first & 0xff0f) === 0xff02) return 'may not be in the link-local multicast range (224.0.0.0/24, ff02::/16)';
    return null;
  }
  if (ip.startsWith('169.254.')) return 'may not be in the link-local range (169.254.0.0/16, fe80::/10)';
  if (ip.startsWith('224.0.0.')) return 'may not be in the link-local multicast range (224.0.0.0/24, ff02::/16)';
  return null;
}

/**
 * compareIPs orders canonical addresses: IPv4 before IPv6, each by its
 * numeric value (so 10.0.0.9 sorts before 10.0.0.10, as kernel listings and
 * kube-proxy's sorted address sets do).
 */
export function compareIPs(a: string, b: string): number {
  const v6a = a.includes(':');
  const v6b = b.includes(':');
  if (v6a !== v6b) return v6a ? 1 : -1;
  if (!v6a) return ipv4ToInt(a) - ipv4ToInt(b);
  const ga = expandIPv6(a);
  const gb = expandIPv6(b);
  if (!ga || !gb) return a < b ? -1 : a > b ? 1 : 0;
  for (let i = 0; i < 8; i++) if (ga[i] !== gb[i]) return ga[i] - gb[i];
  return 0;
}

/** ipv4ToInt returns a dotted-quad address as an unsigned 32-bit number. */
export function ipv4ToInt(ip: string): number {
  const p = ip.split('.');
  return ((+p[0] << 24) | (+p[1] << 16) | (+p[2] << 8) | +p[3]) >>> 0;
}

/** intToIPv4 prints an unsigned 32-bit number as a dotted quad. */
export function intToIPv4(n: number): string {
  return `${(n >>> 24) & 255}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

/**
 * ipToBigInt returns an address (canonical or sloppy) as a number, 32 bits
 * wide for IPv4 and 128 for IPv6, for arithmetic on ranges; null when the
 * text is not an address.
 */
export function ipToBigInt(text: string): bigint | null {
  const ip = canonicalIP(text);
  if (ip === null) return null;
  if (!ip.includes(':')) return BigInt(ipv4ToInt(ip));
  return expandIPv6(ip)!.reduce((n, g) => (n << 16n) | BigInt(g), 0n);
}

/** ipFromBigInt prints a number of its family's width (ipToBigInt's) as the canonical address. */
export function ipFromBigInt(n: bigint, family: IPFamily): string {
  if (family === 'IPv4') return intToIPv4(Number(n & 0xffffffffn));
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((n >> BigInt(i * 16)) & 0xffffn));
  return compressIPv6(groups);
}

function ipv4Mask(prefix: number): number {
  return prefix === 0 ? 0 : (~0 << (32 - prefix)) >>> 0;
}

function ipv6GroupMask(prefix: number, group: number): number {
  const bits = Math.max(0, Math.min(16, prefix - group * 16));
  return bits === 0 ? 0 : (0xffff << (16 - bits)) & 0xffff;
}

/** ipv4Octets reads four decimal octets (leading zeros allowed, ParseIPSloppy), or null. */
/**
 * isCanonicalIPv4: four decimal octets of at most 255 without leading zeros,
 * read a character at a time: the common case of canonicalIP, which a big
 * cluster's first read meets for every cluster IP and endpoint (twice on a
 * dual-stack node), without ipv4Octets' arrays and regular expressions.
 */
function isCanonicalIPv4(text: string): boolean {
  let octets = 0;
  let value = 0;
  let digits = 0;
  for (let i = 0; i <= text.length; i++) {
    const c = i < text.length ? text.charCodeAt(i) : 46; // a '.' after the last octet
    if (c >= 48 && c <= 57) {
      if (digits === 1 && value === 0) return false; // a leading zero
      value = value * 10 + c - 48;
      if (++digits > 3 || value > 255) return false;
    } else if (c === 46) {
      if (digits === 0 || ++octets > 4) return false;
      value = 0;
      digits = 0;
    } else return false;
  }
  return octets === 4;
}

function ipv4Octets(text: string): number[] | null {
  const parts = text.split('.');
  if (parts.length !== 4 || !parts.every((p) => /^\d{1,3}$/.test(p))) return null;
  const octets = parts.map((p) => Number.parseInt(p, 10));
  return octets.every((o) => o <= 255) ? octets : null;
}

/** expandIPv6 returns the 8 groups of an IPv6 address (with an optional dotted IPv4 tail), or null. */
function expandIPv6(text: string): number[] | null {
  let head = text;
  let tail4: number[] = [];
  const lastColon = text.lastIndexOf(':');
  const maybeV4 = text.slice(lastColon + 1);
  if (maybeV4.includes('.')) {
    // The embedded IPv4 tail is strict: no leading zeros (as Go and RFC 4291).
    if (!/^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/.test(maybeV4)) return null;
    const n = ipv4ToInt(maybeV4);
    tail4 = [n >>> 16, n & 0xffff];
    head = text.slice(0, lastColon + 1) + '0';
  }
  const halves = head.split('::');
  if (halves.length > 2) return null;
  const parse = (s: string): number[] | null => {
    if (s === '') return [];
    const hex = s.split(':');
    if (!hex.every((h) => /^[0-9a-fA-F]{1,4}$/.test(h))) return null;
    return hex.map((h) => Number.parseInt(h, 16));
  };
  let groups: number[];
  if (halves.length === 2) {
    const a = parse(halves[0]);
    const b = parse(halves[1]);
    if (!a || !b) return null;
    const fill = 8 - tail4.length - a.length - b.length + (tail4.length ? 1 : 0);
    if (fill < 1) return null;
    groups = [...a, ...new Array<number>(fill).fill(0), ...b];
  } else {
    const all = parse(head);
    if (!all) return null;
    groups = all;
  }
  if (tail4.length) groups = [...groups.slice(0, groups.length - 1), ...tail4];
  if (groups.length !== 8) return null;
  return groups;
}

/** compressIPv6 prints 8 groups the way Go's net.IP.String does (RFC 5952). */
function compressIPv6(groups: number[]): string {
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
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

/**
 * PortRange is a range of ports, kube-proxy's utilnet.PortRange: base and size,
 * the ports base .. base+size-1.
 */
export interface PortRange {
  readonly base: number;
  readonly size: number;
}

/**
 * parsePortRange reads utilnet.ParsePortRange's forms: "300" (one port),
 * "300-2000" (inclusive), "300+1700" (base plus offset, inclusive). "" (and
 * any range starting at 0) is no range: kube-proxy's userspace proxier then let the kernel
 * choose a free port. Anything else, or a range past 65535 or running
 * backwards, is undefined.
 */
export function parsePortRange(text: string): PortRange | null | undefined {
  const t = text.trim();
  if (t === '') return null;
  const m = /^(\d+)(?:([-+])(\d+))?$/.exec(t);
  if (!m) return undefined;
  const base = Number(m[1]);
  const other = m[3] === undefined ? 0 : Number(m[3]);
  const high = m[2] === '+' ? base + other : m[2] === '-' ? other : base;
  if (base > 65535 || high > 65535 || high < base) return undefined;
  // A range starting at 0 is kube-proxy's "no range" too (its allocator checks only the base).
  if (base === 0) return null;
  return { base, size: high - base + 1 };
}

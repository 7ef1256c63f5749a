import type { ServiceSummary } from './protocol.ts';

export type ServiceFilter = 'all' | 'warnings' | 'no-endpoints';

/** FamilyFilter keeps the Services proxied in one IP family (a dual-stack Service is in both). */
export type FamilyFilter = 'any' | 'IPv4' | 'IPv6';

const haystacks = new WeakMap<ServiceSummary, string>();

/** haystack is what a query is matched against: name, namespace, type, IPs and ports, in lower case (cached per summary). */
export function haystack(s: ServiceSummary): string {
  let h = haystacks.get(s);
  if (h === undefined) {
    h = `${s.key} ${s.type} ${s.clusterIPs.join(' ')} ${s.ips.join(' ')} ${s.ports.join(' ')}`.toLowerCase();
    haystacks.set(s, h);
  }
  return h;
}

/**
 * searchServices filters the Services list: every whitespace-separated word
 * of the query must occur somewhere in a service's haystack ("shop 443",
 * "10.96.10", "nodeport api"). A scan of 10,000 cached strings takes about a
 * millisecond, so it runs on every keystroke without debouncing.
 */
export function searchServices(list: readonly ServiceSummary[], query: string, filter: ServiceFilter = 'all', family: FamilyFilter = 'any'): ServiceSummary[] {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  const out: ServiceSummary[] = [];
  for (const s of list) {
    if (family !== 'any' && !s.families.includes(family)) continue;
    if (filter === 'warnings' && s.warnings.length === 0) continue;
    if (filter === 'no-endpoints' && !s.warnings.includes('no-endpoints')) continue;
    const h = haystack(s);
    let ok = true;
    for (const w of words) {
      if (!h.includes(w)) {
        ok = false;
        break;
      }
    }
    if (ok) out.push(s);
  }
  return out;
}

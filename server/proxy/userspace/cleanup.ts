import type { IptablesDump } from '../../kernel/iptables-save-parser.ts';
import { KUBELET_HINT_CHAINS } from '../../kernel/iptables-flavor.ts';
import { KUBE_PROXY_CANARY } from '../xtables/chain-names.ts';
import { planCleanup } from '../xtables/cleanup.ts';
import { chainLine } from '../xtables/restore-writer.ts';
import { PORTAL_CHAINS, PORTAL_JUMPS, type PortalJump } from './portals.ts';

/**
 * What the userspace mode keeps in order besides its portal chains: the jumps
 * into them, and the chains other modes left behind. `--cleanup` needs nothing
 * of its own: it removes every KUBE- chain and the rules jumping into them in
 * every table, flavour and family (../xtables/cleanup.ts), the portal chains
 * included.
 */

/** OWN_CHAINS: the chains the userspace mode writes, and the canary it watches. */
const OWN_CHAINS = new Set<string>([...PORTAL_CHAINS.nat, ...PORTAL_CHAINS.filter, KUBE_PROXY_CANARY, ...KUBELET_HINT_CHAINS]);

/**
 * missingJumps lists the jumps into the portal chains a listing lacks, as
 * kube-proxy's iptablesInit ensured them on every sync: present anywhere in
 * their chain counts (upstream's EnsureRule checks existence, not position).
 */
export function missingJumps(dump: IptablesDump): PortalJump[] {
  return PORTAL_JUMPS.filter((j) => {
    const rules = dump.tables.get(j.table)?.chains.get(j.from)?.rules ?? [];
    const want = j.args.join('\u0000');
    return !rules.some((r) => r.args.join('\u0000') === want);
  });
}

/** StaleChains: what removes the chains other modes left, and their names ("nat/KUBE-SERVICES") for the log. */
export interface StaleChains {
  readonly lines: string[];
  readonly chains: string[];
}

/**
 * staleChains are the restore lines that remove the chains another mode left
 * (the iptables mode's KUBE-SERVICES, KUBE-SVC-…, IPVS mode's KUBE-IPVS-…) and
 * the rules jumping into them, so their DNAT rules cannot answer for a
 * service before the portals do, with those chains' names. Declared tables are
 * the listing's, so the lines go after the portal tables in the same input.
 */
export function staleChains(dump: IptablesDump): StaleChains {
  const lines: string[] = [];
  const names: string[] = [];
  for (const plan of planCleanup(dump)) {
    const chains = plan.chains.filter((c) => !OWN_CHAINS.has(c));
    if (chains.length === 0) continue;
    const drop = new Set(chains);
    // Rules of kept chains that jump into a dropped one (a removed chain's own rules go with it).
    const jumps = plan.jumps.filter((j) => !drop.has(j.chain) && drop.has(/-j (\S+)\s*$/.exec(j.spec)?.[1] ?? ''));
    lines.push(`*${plan.table}`, ...chains.map(chainLine), ...jumps.map((j) => `-D ${j.chain} ${j.spec}`), ...chains.map((c) => `-X ${c}`), 'COMMIT');
    names.push(...chains.map((c) => `${plan.table}/${c}`));
  }
  return { lines, chains: names };
}

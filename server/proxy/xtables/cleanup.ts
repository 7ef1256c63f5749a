import { CleanupFailedError, errorMessage, type KproxyError } from '../../errors.ts';
import { execFile, type ExecFn } from '../../kernel/exec.ts';
import { createIptablesRunner, type IptablesFlavor, type IptablesRunner } from '../../kernel/iptables.ts';
import { KUBELET_HINT_CHAINS, legacyTablesLoaded } from '../../kernel/iptables-flavor.ts';
import { parseIptablesSave, type IptablesDump } from '../../kernel/iptables-save-parser.ts';
import type { Logger } from '../../log.ts';
import type { CleanupResult } from '../backend.ts';
import { KUBE_FIREWALL } from './chain-names.ts';
import { chainLine } from './restore-writer.ts';

/**
 * Chains that are kubelet's as much as kube-proxy's. While kubelet manages the
 * node (its hint or canary chain is present) they stay: deleting them would
 * only open the localnet hole until kubelet's next resync. Without kubelet
 * nothing else owns them and they go with the rest.
 */
const KUBELET_SHARED_CHAINS = [KUBE_FIREWALL, 'KUBE-MARK-DROP'];

export interface CleanupOptions {
  /** runners: one per (flavour, family) to clean; see cleanupRunners(). */
  runners: readonly IptablesRunner[];
  logger: Logger;
}

/** TablePlan is what cleanup removes from one table. */
export interface TablePlan {
  readonly table: string;
  readonly chains: readonly string[];
  /** jumps: rules in other chains that jump into removed chains, as "CHAIN spec". */
  readonly jumps: readonly { chain: string; spec: string }[];
  /** rules: rules inside the removed chains. */
  readonly rules: number;
  /** input: the iptables-restore input that removes them. */
  readonly input: string;
}

/**
 * planCleanup finds, in one flavour's listing, every KUBE- chain and every rule
 * jumping into one, except kubelet's own chains (see KUBELET_SHARED_CHAINS).
 * Rules of other software are never touched.
 */
export function planCleanup(dump: IptablesDump): TablePlan[] {
  let kubelet = false;
  for (const t of dump.tables.values()) for (const c of KUBELET_HINT_CHAINS) if (t.chains.has(c)) kubelet = true;
  const keep = new Set([...KUBELET_HINT_CHAINS, ...(kubelet ? KUBELET_SHARED_CHAINS : [])]);
  const plans: TablePlan[] = [];
  for (const t of dump.tables.values()) {
    const remove = [...t.chains.values()].filter((c) => !c.builtin && c.name.startsWith('KUBE-') && !keep.has(c.name)).map((c) => c.name);
    if (remove.length === 0) continue;
    const removeSet = new Set(remove);
    const jumps: { chain: string; spec: string }[] = [];
    let rules = 0;
    for (const c of t.chains.values()) {
      if (removeSet.has(c.name)) {
        rules += c.rules.length;
        continue;
      }
      for (const r of c.rules) if (r.target !== null && removeSet.has(r.target)) jumps.push({ chain: c.name, spec: r.spec });
    }
    // Declaring a chain flushes it (so chains that jump to each other can all
    // go), the -D lines unhook it from the chains we keep, then -X deletes it.
    const lines = [`*${t.name}`, ...remove.map(chainLine), ...jumps.map((j) => `-D ${j.chain} ${j.spec}`), ...remove.map((c) => `-X ${c}`), 'COMMIT', ''];
    plans.push({ table: t.name, chains: remove, jumps, rules, input: lines.join('\n') });
  }
  return plans;
}

function label(r: IptablesRunner): string {
  return `${r.family === 'IPv6' ? 'ip6tables' : 'iptables'}-${r.flavor}`;
}

/**
 * cleanupIptables removes kproxy's and kube-proxy's iptables objects through
 * every runner given (all tables). It is idempotent: a second run finds
 * nothing. removed counts chains plus rules per table name ("nat", "filter",
 * "mangle"...) summed over flavours and families.
 */
export async function cleanupIptables(opts: CleanupOptions): Promise<CleanupResult> {
  const removed: Record<string, number> = {};
  const errors: KproxyError[] = [];
  const add = (key: string, n: number) => {
    if (n > 0) removed[key] = (removed[key] ?? 0) + n;
  };
  for (const runner of opts.runners) {
    let dump: IptablesDump;
    try {
      dump = parseIptablesSave(await runner.save());
    } catch (err) {
      errors.push(new CleanupFailedError(`${label(runner)}: cannot list the rules`, { cause: err }));
      continue;
    }
    for (const plan of planCleanup(dump)) {
      try {
        await runner.restore(plan.input);
        add(plan.table, plan.chains.length + plan.rules + plan.jumps.length);
        opts.logger.info('removed iptables chains', { iptables: label(runner), table: plan.table, chains: plan.chains.length, rules: plan.rules + plan.jumps.length });
      } catch (err) {
        errors.push(new CleanupFailedError(`${label(runner)}: removing chains from table ${plan.table} failed: ${errorMessage(err)}`, { cause: err }));
      }
    }
  }
  return { removed, errors };
}

/**
 * cleanupRunners returns a runner for every iptables flavour and family this
 * host has: legacy only where its tables are loaded in this namespace, nft
 * wherever its binaries exist. --cleanup must not miss rules a kube-proxy of
 * the other flavour left behind.
 */
export async function cleanupRunners(exec: ExecFn = execFile, exists?: (p: string) => boolean): Promise<IptablesRunner[]> {
  const out: IptablesRunner[] = [];
  for (const flavor of ['legacy', 'nft'] as IptablesFlavor[]) {
    for (const family of ['IPv4', 'IPv6'] as const) {
      if (flavor === 'legacy' && !legacyTablesLoaded(family, exists)) continue;
      try {
        out.push(await createIptablesRunner({ family, flavor, exec }));
      } catch {
        // The binary is not installed: nothing of this flavour and family to clean with it.
      }
    }
  }
  return out;
}

import type { IptablesRunner } from '../../kernel/iptables.ts';
import type { IptablesDump } from '../../kernel/iptables-save-parser.ts';
import { KUBE_EXTERNAL_SERVICES, KUBE_FIREWALL, KUBE_FORWARD, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_PROXY_CANARY, KUBE_PROXY_FIREWALL, KUBE_SERVICES } from './chain-names.ts';
import { CANARY_TABLES } from './canary-monitor.ts';
import { comment } from './restore-writer.ts';

/** JumpRule is one rule in a built-in chain that sends traffic into kproxy's chains. */
export interface JumpRule {
  readonly table: 'filter' | 'nat';
  readonly from: string;
  readonly to: string;
  /** args: the rule words exactly as passed to `iptables -I` (comment unquoted, one word). */
  readonly args: readonly string[];
}

function jump(table: JumpRule['table'], to: string, from: string, commentText: string, extra: string[] = []): JumpRule {
  const args = [...extra];
  if (commentText) args.push('-m', 'comment', '--comment', commentText);
  args.push('-j', to);
  return { table, from, to, args };
}

const NEW = ['-m', 'conntrack', '--ctstate', 'NEW'];

/**
 * JUMP_RULES are kube-proxy's iptablesJumpChains followed by its copies of
 * kubelet's (iptablesKubeletJumpChains), in kube-proxy's order. Each is
 * inserted at the top of its chain when missing, so in INPUT the last listed
 * ends up first, as under kube-proxy.
 */
export const JUMP_RULES: readonly JumpRule[] = [
  jump('filter', KUBE_EXTERNAL_SERVICES, 'INPUT', 'kubernetes externally-visible service portals', NEW),
  jump('filter', KUBE_EXTERNAL_SERVICES, 'FORWARD', 'kubernetes externally-visible service portals', NEW),
  jump('filter', KUBE_NODEPORTS, 'INPUT', 'kubernetes health check service ports'),
  jump('filter', KUBE_SERVICES, 'FORWARD', 'kubernetes service portals', NEW),
  jump('filter', KUBE_SERVICES, 'OUTPUT', 'kubernetes service portals', NEW),
  jump('filter', KUBE_FORWARD, 'FORWARD', 'kubernetes forwarding rules'),
  jump('filter', KUBE_PROXY_FIREWALL, 'INPUT', 'kubernetes load balancer firewall', NEW),
  jump('filter', KUBE_PROXY_FIREWALL, 'OUTPUT', 'kubernetes load balancer firewall', NEW),
  jump('filter', KUBE_PROXY_FIREWALL, 'FORWARD', 'kubernetes load balancer firewall', NEW),
  jump('nat', KUBE_SERVICES, 'OUTPUT', 'kubernetes service portals'),
  jump('nat', KUBE_SERVICES, 'PREROUTING', 'kubernetes service portals'),
  jump('nat', KUBE_POSTROUTING, 'POSTROUTING', 'kubernetes postrouting rules'),
  jump('filter', KUBE_FIREWALL, 'INPUT', ''),
  jump('filter', KUBE_FIREWALL, 'OUTPUT', ''),
];

/** EnsureReport says what ensureJumpRules had to (re)create. */
export interface EnsureReport {
  chainsCreated: string[];
  rulesInserted: string[];
  /** processes: iptables processes run (0 when the listing showed everything in place). */
  processes: number;
  /** deferred: rules left for the caller's restore input (deferMissing), in insertion order. */
  deferred: JumpRule[];
  /** deferredCanaries: tables whose canary chain the caller's restore input must declare (deferMissing). */
  deferredCanaries: string[];
}

export interface EnsureOptions {
  /**
   * deferMissing: a rule whose target chain the listing does not show cannot
   * exist (a jump needs its target), so instead of -N, -C and -I processes it
   * is returned in `deferred` for the caller to write into its restore input,
   * which declares the target; likewise missing canary chains. On a fresh node
   * that is about 40 processes fewer, and with iptables-nft the jumps arrive in
   * the same transaction as the chains (the kernel validates the whole jump
   * graph reachable from a built-in chain on every transaction that adds a rule,
   * about 0.25 s at 330,000 rules, so the chains are better filled first).
   */
  deferMissing?: boolean;
}

function hasRule(dump: IptablesDump, table: string, chain: string, args: readonly string[]): boolean {
  const rules = dump.tables.get(table)?.chains.get(chain)?.rules;
  if (!rules) return false;
  const want = args.join('\u0000');
  return rules.some((r) => r.args.join('\u0000') === want);
}

/**
 * ensureJumpRules makes sure the jump rules and the canary chains exist, as
 * kube-proxy does on every full sync (EnsureChain + EnsureRule(Prepend)). It
 * first reads the listing the full sync takes anyway: what is already in place
 * costs no process. A rule the listing does not show is checked with -C before
 * -I, so a listing that prints a rule differently never causes a duplicate.
 * rules defaults to the iptables mode's JUMP_RULES; IPVS mode passes its own.
 */
export async function ensureJumpRules(runner: IptablesRunner, dump: IptablesDump, rules: readonly JumpRule[] = JUMP_RULES, opts: EnsureOptions = {}): Promise<EnsureReport> {
  const report: EnsureReport = { chainsCreated: [], rulesInserted: [], processes: 0, deferred: [], deferredCanaries: [] };
  const known = (table: string, chain: string) => dump.tables.get(table)?.chains.has(chain) ?? false;
  const created = new Set<string>();
  const ensureChain = async (table: string, chain: string) => {
    const key = `${table}/${chain}`;
    if (known(table, chain) || created.has(key)) return;
    report.processes++;
    if (!(await runner.ensureChain(table, chain))) report.chainsCreated.push(key);
    created.add(key);
  };
  for (const j of rules) {
    if (opts.deferMissing && !known(j.table, j.to)) {
      report.deferred.push(j);
      continue;
    }
    await ensureChain(j.table, j.to);
    if (hasRule(dump, j.table, j.from, j.args)) continue;
    report.processes++;
    if (await runner.checkRule(j.table, j.from, j.args)) continue;
    report.processes++;
    await runner.insertRule(j.table, j.from, j.args);
    report.rulesInserted.push(`${j.table}/${j.from} -> ${j.to}`);
  }
  for (const table of CANARY_TABLES) {
    if (opts.deferMissing && !known(table, KUBE_PROXY_CANARY)) report.deferredCanaries.push(table);
    else await ensureChain(table, KUBE_PROXY_CANARY);
  }
  return report;
}

/**
 * jumpRuleLines renders deferred jump rules as restore input, per table:
 * "-I FROM 1 ..." in the given order, so each lands on top as with iptables -I.
 */
export function jumpRuleLines(rules: readonly JumpRule[], table: JumpRule['table']): string[] {
  return rules.filter((j) => j.table === table).map((j) => ['-I', j.from, '1', ...j.args.map((a, i) => (j.args[i - 1] === '--comment' ? comment(a) : a))].join(' '));
}

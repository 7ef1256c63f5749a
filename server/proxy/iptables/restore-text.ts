import { KUBE_MARK_MASQ, KUBE_PROXY_CANARY, KUBE_SERVICES } from '../xtables/chain-names.ts';
import { countChainLines, editLines, linesOfChain, planChains, type FixedChainDiff } from './fixed-chain-diff.ts';
import type { FixedRules } from './fixed-rules.ts';
import { jumpRuleLines, type JumpRule } from '../xtables/jump-chains.ts';
import { chainLine, LineBuffer } from '../xtables/restore-writer.ts';
import type { ServicePortRules } from './rules.ts';

/**
 * The assembly of one sync's iptables-restore input from what the builders
 * made (rules.ts for each service port, fixed-rules.ts for the shared chains):
 * which chains a full or partial sync declares, in which order the parts go,
 * and how a big nat rewrite is split into commits. Pure: plain data in, text
 * out; the proxier decides what to build and when (proxier.ts).
 */

/** TablePart is one table's part of the restore input, with the rules it writes. */
export interface TablePart {
  readonly text: string;
  readonly lines: number;
  readonly rulesWritten: number;
}

/** PartialSharedInput is what a partial sync's shared chains are written from. */
export interface PartialSharedInput {
  readonly diff: FixedChainDiff;
  /** ports: every service port's rules by id, in sync order (a rewritten chain takes each port's share). */
  readonly ports: ReadonlyMap<string, { readonly objects: ServicePortRules | null }>;
  readonly fixed: FixedRules;
  readonly lengths: ReadonlyMap<string, number>;
  readonly inPlaceEdits: boolean;
}

/** SharedPart is the nat table's shared chains for one sync: declarations ("*nat" first), rules, and the KUBE-NODEPORTS jump that goes last. */
export interface SharedPart {
  readonly chains: LineBuffer;
  readonly rules: LineBuffer;
  readonly tail: LineBuffer;
  readonly rulesWritten: number;
}

/** FullSyncPrep is what a full sync learned from the kernel before building (the proxier's #prepareFullSync). */
export interface FullSyncPrep {
  readonly existingNat: Set<string>;
  readonly deferred: readonly JumpRule[];
  readonly deferredCanaries: readonly string[];
}

/** ChainLengths: rules per shared chain in the kernel after the last successful sync, per table. */
export interface ChainLengths {
  readonly filter: ReadonlyMap<string, number>;
  readonly nat: ReadonlyMap<string, number>;
}

/** countedChains returns the rules per chain of a restore text. */
export function countedChains(text: string): Map<string, number> {
  const out = new Map<string, number>();
  countChainLines(text, out);
  return out;
}

/** applyDiff returns chain lengths after the diff's deletions and additions. */
export function applyDiff(before: ReadonlyMap<string, number>, diff: FixedChainDiff): Map<string, number> {
  const out = new Map(before);
  for (const [chain, e] of diff.chains) out.set(chain, (out.get(chain) ?? 0) + e.added.length - e.deleted.length);
  return out;
}

/** countLines counts the newline-terminated lines of a text. */
export function countLines(text: string): number {
  let n = 0;
  for (let i = text.indexOf('\n'); i >= 0; i = text.indexOf('\n', i + 1)) n++;
  return n;
}

/**
 * fullFilterPart writes the whole filter table part: every fixed chain declared
 * and rewritten, plus the jumps and canary the listing showed missing (a
 * mangle part comes first when its canary is missing).
 */
export function fullFilterPart(fixed: FixedRules, shared: LineBuffer, prepared: FullSyncPrep): TablePart {
  const out = new LineBuffer();
  if (prepared.deferredCanaries.includes('mangle')) {
    out.writeLine('*mangle');
    out.writeLine(chainLine(KUBE_PROXY_CANARY));
    out.writeLine('COMMIT');
  }
  out.writeLine('*filter');
  const declared = new Set(fixed.filterChains);
  for (const c of fixed.filterChains) out.writeLine(chainLine(c));
  // Missing chains only: a chain a deferred jump needs or the canary, none of which exists (declaring creates).
  for (const j of prepared.deferred) {
    if (j.table !== 'filter' || declared.has(j.to)) continue;
    declared.add(j.to);
    out.writeLine(chainLine(j.to));
  }
  if (prepared.deferredCanaries.includes('filter')) out.writeLine(chainLine(KUBE_PROXY_CANARY));
  out.writeText(fixed.filterHead.text(), fixed.filterHead.lines);
  out.writeText(shared.text(), shared.lines);
  out.writeText(fixed.filterTail.text(), fixed.filterTail.lines);
  const jumps = jumpRuleLines(prepared.deferred, 'filter');
  for (const l of jumps) out.writeLine(l);
  out.writeLine('COMMIT');
  return { text: out.text(), lines: out.lines, rulesWritten: fixed.filterHead.lines + shared.lines + fixed.filterTail.lines + jumps.length };
}

/** fullNatShared declares every fixed nat chain and writes their rules; the KUBE-NODEPORTS jump goes last. */
export function fullNatShared(fixed: FixedRules, shared: LineBuffer): SharedPart {
  const chains = new LineBuffer();
  chains.writeLine('*nat');
  for (const c of fixed.natChains) chains.writeLine(chainLine(c));
  const rules = new LineBuffer();
  rules.writeText(fixed.natHead.text(), fixed.natHead.lines);
  rules.writeText(shared.text(), shared.lines);
  return { chains, rules, tail: fixed.natTail, rulesWritten: fixed.natHead.lines + shared.lines + fixed.natTail.lines };
}

/**
 * partialShared writes, for one table, only the shared chains this sync
 * changes: edited in place, or declared and rewritten from every service
 * port's rules (in sync order) when much of the chain changed. Chains that
 * hold no service's rules (KUBE-POSTROUTING, KUBE-FORWARD...) depend only on
 * the build context, whose change makes a sync full, so they are not written.
 * For filter the result is the whole table part (or nothing). `lengths` are
 * the table's shared chain lengths in the kernel (what decides edit or
 * rewrite); without inPlaceEdits every changed chain is rewritten.
 */
export function partialShared(table: 'filter', input: PartialSharedInput): TablePart;
export function partialShared(table: 'nat', input: PartialSharedInput): SharedPart;
export function partialShared(table: 'filter' | 'nat', input: PartialSharedInput): SharedPart | TablePart {
  const { diff, ports, fixed, lengths, inPlaceEdits } = input;
  const plan = planChains(diff, lengths);
  if (!inPlaceEdits) for (const c of plan.keys()) plan.set(c, 'rewrite');
  const chains = new LineBuffer();
  const rules = new LineBuffer();
  const tail = new LineBuffer();
  const inserts = new LineBuffer();
  let rulesWritten = 0;
  for (const [chain, how] of plan) {
    if (how === 'edit') {
      const e = editLines(chain, diff.chains.get(chain)!);
      for (const l of e.deletes) rules.writeLine(l);
      for (const l of e.inserts) inserts.writeLine(l);
      rulesWritten += e.inserts.length;
      continue;
    }
    chains.writeLine(chainLine(chain));
    for (const entry of ports.values()) {
      if (!entry.objects) continue;
      const text = linesOfChain(table === 'filter' ? entry.objects.filterText : entry.objects.jumpsText, chain);
      if (text === '') continue;
      const n = countLines(text);
      rules.writeText(text, n);
      rulesWritten += n;
    }
    if (table === 'nat' && chain === KUBE_SERVICES) {
      tail.writeText(fixed.natTail.text(), fixed.natTail.lines);
      rulesWritten += fixed.natTail.lines;
    }
  }
  rules.writeText(inserts.text(), inserts.lines);
  if (table === 'nat') {
    const head = new LineBuffer();
    head.writeLine('*nat');
    head.writeText(chains.text(), chains.lines);
    return { chains: head, rules, tail, rulesWritten };
  }
  if (plan.size === 0) return { text: '', lines: 0, rulesWritten: 0 };
  const out = new LineBuffer();
  out.writeLine('*filter');
  out.writeText(chains.text(), chains.lines);
  out.writeText(rules.text(), rules.lines);
  out.writeLine('COMMIT');
  return { text: out.text(), lines: out.lines, rulesWritten };
}
/** ChainBlock is a part of the nat table's service chains committed on its own: declarations and rules. */
export interface ChainBlock {
  readonly chains: LineBuffer;
  readonly rules: LineBuffer;
}

/** cutLines splits a text of newline-terminated lines after its first n lines. */
function cutLines(text: string, n: number): [string, string] {
  let at = 0;
  for (let i = 0; i < n; i++) at = text.indexOf('\n', at) + 1;
  return [text.slice(0, at), text.slice(at)];
}

/**
 * splitEndpointChains cuts one service port's chains for a port bigger than
 * a commit (thousands of endpoints): its endpoint chains (KUBE-SEP-) in blocks
 * of at most `max` rules, whole chains each, and its service chains (SVC,
 * SVL, EXT, FW) apart. The endpoint blocks go first: nothing jumps to a new
 * endpoint chain until the service chains are committed after them, and an
 * existing endpoint chain is rewritten with what it held (its endpoint's
 * DNAT), so every commit leaves the port working.
 */
export function splitEndpointChains(r: ServicePortRules, max: number): { service: ChainBlock; endpoints: ChainBlock[] } {
  const [serviceChains, endpointChains] = cutLines(r.chainsText, r.serviceChains);
  const [serviceRules, endpointRules] = cutLines(r.rulesText, r.serviceRulesLines);
  const service = { chains: new LineBuffer(), rules: new LineBuffer() };
  service.chains.writeText(serviceChains, r.serviceChains);
  service.rules.writeText(serviceRules, r.serviceRulesLines);
  const endpoints: ChainBlock[] = [];
  let block = { chains: new LineBuffer(), rules: new LineBuffer() };
  const chainLines = endpointChains.split('\n');
  const ruleLines = endpointRules.split('\n');
  let at = 0;
  for (const decl of chainLines) {
    if (decl === '') continue;
    const chain = decl.slice(1, decl.indexOf(' '));
    const prefix = `-A ${chain} `;
    let end = at;
    while (end < ruleLines.length && ruleLines[end].startsWith(prefix)) end++;
    if (block.rules.lines > 0 && block.rules.lines + (end - at) > max) {
      endpoints.push(block);
      block = { chains: new LineBuffer(), rules: new LineBuffer() };
    }
    block.chains.writeLine(decl);
    for (let i = at; i < end; i++) block.rules.writeLine(ruleLines[i]);
    at = end;
  }
  if (block.chains.lines > 0) endpoints.push(block);
  return { service, endpoints };
}

/**
 * natTablePart assembles the nat table. Normally one block: fixed and service
 * chain declarations, then the rules, as kube-proxy writes them. When the
 * service chains were split (nft), each block of whole service ports is its
 * own COMMIT and the fixed chains, which reference them, come last; so at
 * every commit each rule jumps only to chains that exist and are complete:
 * a service's chains change together, new ones become reachable only with
 * the final KUBE-SERVICES, and stale ones are deleted only after it. A
 * failure part-way leaves earlier blocks committed and a consistent kernel,
 * and forces the next sync to be full, as any failure does.
 */
export function natTablePart(blocks: { chains: LineBuffer; rules: LineBuffer }[], natChains: LineBuffer, natRules: LineBuffer, natEnd: LineBuffer, mark: string): { text: string; lines: number } {
  if (blocks.length <= 1) {
    const chains = blocks[0]?.chains;
    const rules = blocks[0]?.rules;
    // Every declaration first (a rule may only jump to a declared chain), then the fixed
    // chains' rules and jumps, the service chains' rules, deletions, the KUBE-NODEPORTS tail.
    const parts = [natChains.text(), chains?.text() ?? '', natRules.text(), rules?.text() ?? '', natEnd.text()];
    return { text: parts.join(''), lines: natChains.lines + (chains?.lines ?? 0) + natRules.lines + (rules?.lines ?? 0) + natEnd.lines };
  }
  // The endpoint chains jump to KUBE-MARK-MASQ: it must exist before the first block.
  const head = `*nat\n${chainLine(KUBE_MARK_MASQ)}\n-A ${KUBE_MARK_MASQ} -j MARK --or-mark ${mark}\nCOMMIT\n`;
  const out = [head];
  let lines = 4;
  for (const b of blocks) {
    out.push('*nat\n', b.chains.text(), b.rules.text(), 'COMMIT\n');
    lines += 2 + b.chains.lines + b.rules.lines;
  }
  out.push(natChains.text(), natRules.text(), natEnd.text());
  return { text: out.join(''), lines: lines + natChains.lines + natRules.lines + natEnd.lines };
}

import { hasAnonymousSet } from './nft-netlink-rules.ts';
import { ByTable } from './nft-netlink-encode.ts';
import type { ParsedCommand } from './nft-script.ts';

/**
 * A table loaded from nothing (a first sync) in phases, each one kernel
 * transaction. One batch of the whole table is quadratic in the kernel at
 * 10,000 services (measured on Linux 6.18): every rule that binds an
 * anonymous set (each service's `numgen … vmap { … }`) walks the whole list
 * of the batch's pending changes (__nft_set_trans_bind), so the 10,000 binds
 * of a 370,000-message batch cost minutes. Split, each bind walks only its
 * own small batch.
 *
 * Loaded in this order, the table does nothing until its last phase: the
 * base chains are hooked empty (an empty chain accepts, which is no
 * filtering and no NAT), and nothing reaches the other chains before the
 * last phase adds the base chains' rules and the map elements. So a phase
 * that fails leaves an inert table, never a half-working one, and the next
 * (full) sync lists it and writes what is missing.
 *
 *   1. the table, every chain (base chains empty), every named set;
 *   2. the rules of the chains with a rule that binds an anonymous set, the
 *      chains of a few hundred such rules per transaction (a chain's rules
 *      together and in order);
 *   3. the rules of the other chains that are not base chains;
 *   4. the base chains' rules and every element.
 */

/** ANON_RULES_PER_PHASE: rules binding anonymous sets per transaction (each walks its batch's pending list). */
export const ANON_RULES_PER_PHASE = 250;
/** MIN_PHASED_COMMANDS: smaller loads go in one transaction (the split only pays off at thousands of services). */
export const MIN_PHASED_COMMANDS = 20_000;

/** FreshLoad: the phases, and the tables (family, name) that must not exist yet for them to be safe. */
export interface FreshLoad {
  readonly phases: ParsedCommand[][];
  readonly tables: readonly { family: ParsedCommand['family']; name: string }[];
}

/**
 * freshLoadPhases splits a transaction that creates tables from nothing
 * into phases; null when the transaction is anything else (every command
 * must add, to a table the transaction adds before it: no flush, no
 * delete), or small. The caller must check that those tables do not exist.
 */
export function freshLoadPhases(commands: readonly ParsedCommand[], minCommands = MIN_PHASED_COMMANDS): FreshLoad | null {
  if (commands.length < minCommands) return null;
  const defs: ParsedCommand[] = [];
  const rules: ParsedCommand[] = [];
  const last: ParsedCommand[] = [];
  const tables = new Map<string, { family: ParsedCommand['family']; name: string }>();
  const base = new ByTable<true>();
  let prev: ParsedCommand | null = null;
  for (const c of commands) {
    if (c.op.op !== 'add') return null;
    if (c.op.kind === 'table') tables.set(`${c.family} ${c.table}`, { family: c.family, name: c.table });
    else if (!prev || prev.family !== c.family || prev.table !== c.table) {
      if (!tables.has(`${c.family} ${c.table}`)) return null;
    }
    prev = c;
    if (c.op.kind === 'chain' && c.op.base) base.set(c.family, c.table, c.op.name, true);
  }
  // A chain's rules stay together and in order: those of a chain with an anonymous set go with it.
  const byChain = new ByTable<{ rules: ParsedCommand[]; anon: number }>();
  const chainOrder: { rules: ParsedCommand[]; anon: number }[] = [];
  for (const c of commands) {
    switch (c.op.kind) {
      case 'table':
      case 'chain':
      case 'set':
        defs.push(c);
        break;
      case 'rule': {
        if (base.has(c.family, c.table, c.op.chain)) {
          last.push(c);
          break;
        }
        let entry = byChain.get(c.family, c.table, c.op.chain);
        if (!entry) {
          byChain.set(c.family, c.table, c.op.chain, (entry = { rules: [], anon: 0 }));
          chainOrder.push(entry);
        }
        entry.rules.push(c);
        if (hasAnonymousSet(c.op.rule)) entry.anon++;
        break;
      }
      case 'element':
        last.push(c);
        break;
    }
  }
  const phases: ParsedCommand[][] = [defs];
  let phase: ParsedCommand[] = [];
  let anonInPhase = 0;
  for (const entry of chainOrder) {
    if (entry.anon === 0) {
      for (const c of entry.rules) rules.push(c);
      continue;
    }
    if (anonInPhase >= ANON_RULES_PER_PHASE) {
      phases.push(phase);
      phase = [];
      anonInPhase = 0;
    }
    for (const c of entry.rules) phase.push(c);
    anonInPhase += entry.anon;
  }
  if (phase.length) phases.push(phase);
  if (rules.length) phases.push(rules);
  if (last.length) phases.push(last);
  return { phases, tables: [...tables.values()] };
}

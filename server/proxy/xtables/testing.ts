import type { IptablesRunner } from '../../kernel/iptables.ts';
import type { SimulatedIptables } from '../../kernel/iptables-simulated.ts';

/** Test helpers for the modes that write iptables: a writer that loses part of its input, for the verifications to catch. */

/** rewriteLines applies `lose` to each line of a text: the line it returns, or none for null. */
export function rewriteLines(text: string, lose: (line: string) => string | null): string {
  return text
    .split('\n')
    .map(lose)
    .filter((l): l is string => l !== null)
    .join('\n');
}

/**
 * lossyIptables: the simulated kernel behind a writer that rewrites every
 * restore input with `lose` first (the way a writer that silently programs
 * less than it is given would): what verifications must catch.
 */
export function lossyIptables(kernel: SimulatedIptables, lose: (line: string) => string | null): IptablesRunner {
  return {
    family: kernel.family,
    flavor: kernel.flavor,
    hasRandomFully: kernel.hasRandomFully,
    restore: (text, o) => kernel.restore(rewriteLines(text, lose), o),
    save: (o) => kernel.save(o),
    ensureChain: (t, c) => kernel.ensureChain(t, c),
    chainExists: (t, c) => kernel.chainExists(t, c),
    checkRule: (t, c, a) => kernel.checkRule(t, c, a),
    insertRule: (t, c, a) => kernel.insertRule(t, c, a),
    deleteRule: (t, c, a) => kernel.deleteRule(t, c, a),
    flushChain: (t, c) => kernel.flushChain(t, c),
    deleteChain: (t, c) => kernel.deleteChain(t, c),
    countChains: (ask) => kernel.countChains(ask),
  };
}

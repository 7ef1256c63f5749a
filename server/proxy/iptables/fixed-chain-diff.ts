/**
 * The chains every service writes into (nat KUBE-SERVICES and KUBE-NODEPORTS,
 * filter KUBE-SERVICES, KUBE-EXTERNAL-SERVICES, KUBE-NODEPORTS,
 * KUBE-PROXY-FIREWALL) hold one or a few rules per service: 10,000 services
 * make a KUBE-SERVICES of 10,000 rules, which iptables-nft takes about a
 * second to rewrite. kube-proxy rewrites them on every sync; a partial sync
 * here leaves an unchanged chain alone and edits a chain with few changes in
 * place (-D the rules that went, -I the new ones at the top), which the
 * kernel does in tens of milliseconds. Only when a large share of a chain
 * changed is it declared (flushed) and rewritten whole.
 *
 * Rules of different services in these chains match disjoint destinations
 * (a cluster IP, external IP or LB IP with a port and protocol, or a node
 * port), so their order does not change what a packet meets; the one rule
 * whose place matters, KUBE-SERVICES' jump to KUBE-NODEPORTS, must stay last
 * and does, since new rules go in at position 1.
 */

/** ChainEdits are the rules one chain lost and gained, as "-A CHAIN spec" lines. */
export interface ChainEdits {
  readonly deleted: string[];
  readonly added: string[];
}

/** chainOfLine returns CHAIN of a "-A CHAIN ..." line. */
export function chainOfLine(line: string): string {
  const end = line.indexOf(' ', 3);
  return end < 0 ? line.slice(3) : line.slice(3, end);
}

function lines(text: string): string[] {
  if (text === '') return [];
  const out = text.split('\n');
  if (out[out.length - 1] === '') out.pop();
  return out;
}

/**
 * FixedChainDiff collects, over the service ports a partial sync rebuilt,
 * added or removed, which rules of the shared chains went and came.
 */
export class FixedChainDiff {
  readonly #byChain = new Map<string, ChainEdits>();

  #edits(chain: string): ChainEdits {
    let e = this.#byChain.get(chain);
    if (!e) this.#byChain.set(chain, (e = { deleted: [], added: [] }));
    return e;
  }

  /** change records one service port's rules in the shared chains before and after (newline-terminated "-A" lines). */
  change(before: string, after: string): void {
    if (before === after) return;
    const left = new Map<string, number>();
    for (const l of lines(before)) left.set(l, (left.get(l) ?? 0) + 1);
    for (const l of lines(after)) {
      const n = left.get(l) ?? 0;
      if (n > 0) left.set(l, n - 1);
      else this.#edits(chainOfLine(l)).added.push(l);
    }
    for (const [l, n] of left) for (let i = 0; i < n; i++) this.#edits(chainOfLine(l)).deleted.push(l);
  }

  get chains(): ReadonlyMap<string, ChainEdits> {
    return this.#byChain;
  }
}

/** EDIT_SHARE: a chain is edited in place while its edits stay within this share of its rules; else it is rewritten. */
export const EDIT_SHARE = 1 / 8;

/**
 * planChains decides, per changed chain, 'edit' (in place) or 'rewrite'. A
 * deleted rule costs iptables-nft about as much as rewriting eight (it must
 * find the rule: measured 130 ms for the first -D in a 10,000-rule chain, then
 * 0.6 ms each, against 1 s for the whole chain), hence EDIT_SHARE. lengths
 * holds each chain's rule count before this sync.
 */
export function planChains(diff: FixedChainDiff, lengths: ReadonlyMap<string, number>): Map<string, 'edit' | 'rewrite'> {
  const plan = new Map<string, 'edit' | 'rewrite'>();
  for (const [chain, e] of diff.chains) {
    const n = e.deleted.length + e.added.length;
    if (n === 0) continue;
    plan.set(chain, n <= (lengths.get(chain) ?? 0) * EDIT_SHARE ? 'edit' : 'rewrite');
  }
  return plan;
}

/**
 * editLines renders a chain's edits: deletions by rule spec, then insertions
 * at position 1 in reverse, so rules added together keep their order.
 */
export function editLines(chain: string, e: ChainEdits): { deletes: string[]; inserts: string[] } {
  const cut = 4 + chain.length; // "-A " + chain + " "
  const deletes = e.deleted.map((l) => `-D ${chain} ${l.slice(cut)}`);
  const inserts: string[] = [];
  for (let i = e.added.length - 1; i >= 0; i--) inserts.push(`-I ${chain} 1 ${e.added[i].slice(cut)}`);
  return { deletes, inserts };
}

/** countChainLines adds the "-A CHAIN" lines of text to counts, per chain. */
export function countChainLines(text: string, counts: Map<string, number>): void {
  let i = 0;
  while (i < text.length) {
    const nl = text.indexOf('\n', i);
    const end = nl < 0 ? text.length : nl;
    if (text.startsWith('-A ', i)) {
      const sp = text.indexOf(' ', i + 3);
      const chain = text.slice(i + 3, sp < 0 || sp > end ? end : sp);
      counts.set(chain, (counts.get(chain) ?? 0) + 1);
    }
    i = end + 1;
  }
}

/** linesOfChain returns the "-A CHAIN" lines of text (newline-terminated), in order. */
export function linesOfChain(text: string, chain: string): string {
  const prefix = `-A ${chain} `;
  let out = '';
  let i = 0;
  while (i < text.length) {
    const nl = text.indexOf('\n', i);
    const end = nl < 0 ? text.length : nl + 1;
    if (text.startsWith(prefix, i)) out += text.slice(i, end);
    i = end;
  }
  return out;
}

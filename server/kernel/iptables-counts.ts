import { ruleTarget, splitArgs } from './iptables-save-parser.ts';

/**
 * Counts for verifying what a sync wrote into iptables (proxy/xtables/verify.ts):
 * each chain of a few tables with one number, read in one cheap pass, that
 * kproxy can work out from the restore input it sent. Two readers give two
 * kinds of number:
 *
 *   'rules': the chain's rules, counted in iptables-save's output by the
 *            "-A CHAIN " prefix of each line, no rule parsed (legacy; and
 *            nft when the netlink helper is not there). iptables-legacy-save
 *            takes 1.3-1.6 s at 10,000 Services x 10 endpoints (330,000 rules),
 *            iptables-nft-save 7-10 s, which is why nft has the reader below.
 *   'use':   nf_tables' own use count of the chain (NFTA_CHAIN_USE): its rules
 *            plus the rules anywhere in its table that jump or go to it, read
 *            for every chain in one netlink dump (iptables-nft's tables are
 *            nf_tables tables; 0.5-1.1 s for the 111,000 chains of that size;
 *            iptables-nft-counts.ts).
 *
 * Chains kproxy does not write (the built-in chains, other programs' chains)
 * are those `own` knows nothing of: for them the reader also says which
 * chains their rules jump or go to. That is how the jumps into kproxy's chains are
 * checked, and how a 'use' count is corrected for rules kproxy did not write.
 */

/** ChainCountKind: what a chain's number counts (see the file's comment). */
export type ChainCountKind = 'rules' | 'use';

/**
 * IptablesCountRequest: the tables to read, and who owns each chain: `own`
 * is asked once per chain the kernel holds and returns the caller's entry
 * for a chain it wrote (kept beside the chain's count, so the caller never
 * looks a chain up again), or undefined for any other chain, whose jumps are
 * read too.
 */
export interface IptablesCountRequest<T = unknown> {
  readonly tables: readonly string[];
  readonly own: (table: string, chain: string) => T | undefined;
  /** ready: `own` is asked only once this resolved (the caller works its entries out while another process reads the kernel). */
  readonly ready?: Promise<unknown>;
}

/**
 * IptablesTableCounts is one table as read: every chain with its count, as
 * two parallel lists in the reader's order (a verification of 10,000
 * Services x 10 endpoints reads 111,000 chains: lists cost the reader no
 * map, and the caller looks each chain up once in its own).
 */
export interface IptablesTableCounts<T = unknown> {
  readonly names: readonly string[];
  readonly counts: readonly number[];
  /** owners: `own`'s answer for each chain. */
  readonly owners: readonly (T | undefined)[];
  /** jumps: for each chain no one owns, the chains of the table its rules jump or go to, with how many rules do. */
  readonly jumps: ReadonlyMap<string, ReadonlyMap<string, number>>;
}

/** IptablesCounts is one read of the kernel's iptables for a verification. */
export interface IptablesCounts<T = unknown> {
  readonly kind: ChainCountKind;
  /** source: what read them ("iptables-legacy-save", "netlink"), for the log. */
  readonly source: string;
  /** tables: the tables asked for that the kernel holds (an absent table has no chains). */
  readonly tables: ReadonlyMap<string, IptablesTableCounts<T>>;
}

/** chainCounts: a table's counts as a map (for the few places that look up a handful of chains). */
export function chainCounts(t: IptablesTableCounts<unknown>): Map<string, number> {
  return new Map(t.names.map((n, i) => [n, t.counts[i]]));
}

/**
 * TableCounter builds one table's counts. Readers list each chain once
 * (chain()) and then add its rules; iptables-save lists the rules in the
 * order it declared the chains, so the chain a run of rules belongs to is
 * found by moving forward through the list, and by a map only otherwise.
 */
export class TableCounter<T> {
  readonly names: string[] = [];
  readonly counts: number[] = [];
  readonly owners: (T | undefined)[] = [];
  readonly jumps = new Map<string, Map<string, number>>();
  readonly #table: string;
  readonly #own: (table: string, chain: string) => T | undefined;
  #cursor = 0;
  #index: Map<string, number> | null = null;

  constructor(table: string, own: (table: string, chain: string) => T | undefined) {
    this.#table = table;
    this.#own = own;
  }

  /** chain lists a chain with a count (0 until rules are added) and asks who owns it; false: no one (read its jumps). */
  chain(name: string, count = 0): boolean {
    const owner = this.#own(this.#table, name);
    this.names.push(name);
    this.counts.push(count);
    this.owners.push(owner);
    this.#index?.set(name, this.names.length - 1);
    if (owner !== undefined) return true;
    this.ensureJumps(name);
    return false;
  }

  /** add adds n rules to a chain (listing it when chain() did not). */
  add(name: string, n: number): void {
    const names = this.names;
    let i = this.#cursor;
    while (i < names.length && names[i] !== name) i++;
    if (i === names.length) {
      if (!this.#index) this.#index = new Map(names.map((c, k) => [c, k]));
      i = this.#index.get(name) ?? -1;
      if (i < 0) {
        this.chain(name, n);
        return;
      }
    } else {
      this.#cursor = i;
    }
    this.counts[i] += n;
  }

  jump(from: string, to: string): void {
    let m = this.jumps.get(from);
    if (!m) this.jumps.set(from, (m = new Map()));
    m.set(to, (m.get(to) ?? 0) + 1);
  }

  /** ensureJumps makes an empty jump list for a chain asked for that has no rule jumping anywhere. */
  ensureJumps(from: string): void {
    if (!this.jumps.has(from)) this.jumps.set(from, new Map());
  }

  /** result: the table's counts; jump targets that are not chains of the table (ACCEPT, DNAT…) are left out, as the kernel's verdicts name none. */
  result(): IptablesTableCounts<T> {
    const targets = new Set<string>();
    for (const m of this.jumps.values()) for (const to of m.keys()) targets.add(to);
    const chains = new Set<string>();
    if (targets.size) for (const n of this.names) if (targets.has(n)) chains.add(n);
    for (const m of this.jumps.values()) for (const to of m.keys()) if (!chains.has(to)) m.delete(to);
    return { names: this.names, counts: this.counts, owners: this.owners, jumps: this.jumps };
  }
}

/**
 * countSaveText counts iptables-save output (without -c) for a request: each
 * chain's rules by the prefix of its lines, with no rule parsed but those of
 * the chains no one owns (few: the built-in chains and other programs'),
 * whose targets are read with the restore parser's word splitter. A chain's
 * rules are listed together: the count and the chain's name are taken once
 * per run of them (330,000 lines at 10,000 Services x 10 endpoints). Pure.
 */
export function countSaveText<T>(text: string, ask: IptablesCountRequest<T>, source: string): IptablesCounts<T> {
  const wanted = new Set(ask.tables);
  const tables = new Map<string, IptablesTableCounts<T>>();
  let table = '';
  let cur: TableCounter<T> | null = null;
  /** reading: the chains of the table whose jumps are read (no one owns them: asked once per chain, at its ":" line). */
  let reading = new Set<string>();
  let chain = '';
  let jumps = false;
  let n = 0;
  const flush = () => {
    if (n > 0) cur!.add(chain, n);
    n = 0;
  };
  let i = 0;
  const len = text.length;
  while (i < len) {
    let end = text.indexOf('\n', i);
    if (end < 0) end = len;
    const c = text.charCodeAt(i);
    if (c === 0x2d /* - */ && cur !== null && text.startsWith('-A ', i)) {
      const from = i + 3;
      const after = from + chain.length;
      if (chain === '' || !text.startsWith(chain, from) || (after !== end && text.charCodeAt(after) !== 0x20)) {
        flush();
        let sp = text.indexOf(' ', from);
        if (sp < 0 || sp > end) sp = end;
        chain = text.slice(from, sp);
        jumps = reading.has(chain);
      }
      n++;
      if (jumps) {
        cur.ensureJumps(chain);
        const target = ruleTarget(splitArgs(text.slice(from + chain.length, end)));
        if (target !== null) cur.jump(chain, target);
      }
    } else if (c === 0x3a /* : */ && cur !== null) {
      let sp = text.indexOf(' ', i + 1);
      if (sp < 0 || sp > end) sp = end;
      const name = text.slice(i + 1, sp);
      if (!cur.chain(name)) reading.add(name);
    } else if (c === 0x2a /* * */) {
      table = text.slice(i + 1, end).trim();
      cur = wanted.has(table) ? new TableCounter(table, ask.own) : null;
      reading = new Set();
      chain = '';
    } else if (cur !== null && text.startsWith('COMMIT', i)) {
      flush();
      tables.set(table, cur.result());
      cur = null;
      chain = '';
    }
    i = end + 1;
  }
  return { kind: 'rules', source, tables };
}

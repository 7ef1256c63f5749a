import { ownCopy } from '../proxy/flat-string.ts';
import { ruleCountOf, type KernelChain, type KernelRule, type KernelTables, type KernelViewProvider } from './kernel-view.ts';
import type { DriftFinding, DriftKind, DriftReport } from './protocol.ts';
import type { Yield } from './yield.ts';

/** RawFinding is one difference seen in one kernel read. */
export interface RawFinding {
  readonly table: string;
  readonly chain: string;
  readonly kind: DriftKind;
  readonly detail: string;
}

/** MAX_PER_CHAIN: rule findings listed per chain; the rest are counted in one line. */
const MAX_PER_CHAIN = 3;
/** MAX_FINDINGS bounds the work and memory of one comparison (a flushed table would list every chain). */
export const MAX_FINDINGS = 2000;

type DriftRules = Pick<KernelViewProvider, 'ruleKey' | 'ownsChain' | 'requiredRules' | 'settingsKey'>;

/**
 * DriftMemo remembers, per chain, the hashes of both sides' specs the last
 * time they compared equal. Comparing means a normal form (ruleKey) of every
 * rule on both sides: at 10,000 Services × 10 endpoints 660,000 of them, a
 * second of CPU and about 100 MB of garbage per read while a dashboard looks,
 * for chains that almost never change. A chain whose specs hash as before on
 * both sides is skipped; only chains that can hash without building their
 * rules (KernelChain.specsHash) take part. The memo is rebuilt by every
 * comparison, so chains that are gone drop out.
 */
export class DriftMemo {
  #equal = new Map<string, Map<string, number>>();
  #size = 0;
  #touched = 0;

  /** clear forgets everything (the reader dropped its tables). */
  clear(): void {
    this.#equal = new Map();
    this.#size = 0;
  }

  begin(): void {
    this.#touched = 0;
  }

  /** end: when chains that are gone make up most of the memo, it starts over (the next comparison is a full one). */
  end(): void {
    if (this.#size > 2 * this.#touched + 1000) this.clear();
  }

  /** key: both sides' hashes in one number (32 + 21 bits), or null when a side cannot hash. */
  static key(want: KernelChain, have: KernelChain): number | null {
    if (!want.specsHash || !have.specsHash) return null;
    return want.specsHash() * 2 ** 21 + (have.specsHash() >>> 11);
  }

  /** known: the chain compared equal at key before. */
  known(table: string, chain: string, key: number): boolean {
    const same = this.#equal.get(table)?.get(chain) === key;
    if (same) this.#touched++;
    return same;
  }

  /** equal records that the chain compared equal at key. */
  equal(table: string, chain: string, key: number): void {
    let t = this.#equal.get(table);
    if (!t) this.#equal.set(table, (t = new Map()));
    if (!t.has(chain)) this.#size++;
    t.set(chain, key);
    this.#touched++;
  }

  /** differs: the chain has findings; it is compared again next time. */
  differs(table: string, chain: string): void {
    if (this.#equal.get(table)?.delete(chain)) this.#size--;
  }
}

/**
 * findDrift compares what kproxy wrote (intended) with what the kernel lists:
 * chains kproxy wrote that are missing or hold other rules, chains in kproxy's
 * namespace it did not write, and jumps from built-in chains that are gone.
 * Rules are compared by the provider's ruleKey, since the kernel lists rules
 * in its own spelling; identical text skips that work.
 */
export async function findDrift(intended: KernelTables, kernel: KernelTables, rules: DriftRules, pause: Yield, memo?: DriftMemo): Promise<RawFinding[]> {
  memo?.begin();
  try {
    return await compareTables(intended, kernel, rules, pause, memo);
  } finally {
    memo?.end();
  }
}

async function compareTables(intended: KernelTables, kernel: KernelTables, rules: DriftRules, pause: Yield, memo: DriftMemo | undefined): Promise<RawFinding[]> {
  const out: RawFinding[] = [];
  let work = 0;
  /** due: enough work was done since the last pause (checked without an await per chain). */
  const due = (n: number) => {
    work += n;
    if (work <= WORK_PER_TURN) return false;
    work = 0;
    return true;
  };
  for (const [tableName, want] of intended.tables) {
    const have = kernel.tables.get(tableName);
    for (const [chainName, chain] of want.chains) {
      if (out.length >= MAX_FINDINGS) return out;
      const listed = have?.chains.get(chainName);
      if (!listed) {
        out.push({ table: tableName, chain: chainName, kind: 'missing-chain', detail: `kproxy wrote ${ruleCountOf(chain)} rules; the kernel has no such chain` });
        continue;
      }
      const settings = compareSettings(tableName, chain, listed, rules);
      if (settings) out.push(settings);
      // A chain's work is its rules, whether they are hashed (a known chain) or compared.
      if (due(ruleCountOf(chain))) await pause();
      const key = memo ? DriftMemo.key(chain, listed) : null;
      if (key !== null && memo!.known(tableName, chainName, key)) continue;
      const found = await compareChains(tableName, chainName, chain, listed, rules, pause);
      if (key !== null) {
        if (found.length === 0) memo!.equal(tableName, chainName, key);
        else memo!.differs(tableName, chainName);
      }
      out.push(...found);
    }
    if (!have) continue;
    for (const [chainName, chain] of have.chains) {
      // 130,000 chains at 10,000 Services × 10 endpoints: about 65 ms of lookups, cut into turns like the rest.
      if (due(1)) await pause();
      if (want.chains.has(chainName) || !rules.ownsChain(tableName, chainName)) continue;
      out.push({ table: tableName, chain: chainName, kind: 'unexpected-chain', detail: `${ruleCountOf(chain)} rules in a chain kproxy did not write (left by an earlier proxy, or added by hand)` });
    }
  }
  // Jumps into kproxy's chains are only expected while it has chains (not after a cleanup).
  if (intended.chainCount === 0) return out;
  for (const r of rules.requiredRules()) {
    const listed = kernel.tables.get(r.table)?.chains.get(r.chain)?.rules ?? [];
    const key = rules.ruleKey(r.table, { spec: r.spec, target: null, packets: 0, bytes: 0 });
    if (!listed.some((x) => rules.ruleKey(r.table, x) === key)) out.push({ table: r.table, chain: r.chain, kind: 'missing-jump', detail: r.spec });
  }
  return out.slice(0, MAX_FINDINGS);
}

/** compareSettings reports a chain whose own settings (IPVS scheduler, set type) differ from what kproxy wrote. */
function compareSettings(table: string, want: KernelChain, have: KernelChain, rules: DriftRules): RawFinding | null {
  if (!rules.settingsKey) return null;
  const w = rules.settingsKey(table, want);
  const h = rules.settingsKey(table, have);
  if (w === null || h === null || w === h) return null;
  return { table, chain: want.name, kind: 'settings', detail: `kproxy wrote "${w}"; the kernel has "${h}"` };
}

/**
 * WORK_PER_TURN: rules compared between two turns of the event loop. A rule's
 * normal form costs a few µs: 1,000 rules (two forms each) are about 10 ms, and
 * KUBE-SERVICES alone, 10,000 rules at 10,000 Services, is cut into ten turns.
 */
const WORK_PER_TURN = 1000;

/** keysOf: the normal form of each rule, pausing every WORK_PER_TURN of them. */
async function keysOf(table: string, list: readonly KernelRule[], rules: DriftRules, pause: Yield): Promise<string[]> {
  const out: string[] = new Array<string>(list.length);
  for (let i = 0; i < list.length; i++) {
    out[i] = rules.ruleKey(table, list[i]!);
    if (i % WORK_PER_TURN === WORK_PER_TURN - 1) await pause();
  }
  return out;
}

/**
 * compareChains compares two chains rule by rule in order, reading specs in
 * place where both chains can (KernelChain.specAt): each pair's normal forms
 * are made and dropped at once, so a first comparison of every chain (660,000
 * rules at 10,000 Services × 10 endpoints) leaves no rule objects and no
 * lists of keys behind. Only chains that differ are compared as lists of
 * rules, to say what is missing and what is extra.
 */
async function compareChains(table: string, chain: string, want: KernelChain, have: KernelChain, rules: DriftRules, pause: Yield): Promise<RawFinding[]> {
  const n = ruleCountOf(want);
  if (want.specAt && have.specAt && n === ruleCountOf(have)) {
    let same = true;
    for (let i = 0; i < n && same; i++) {
      const w = want.specAt(i);
      const h = have.specAt(i);
      same = w === h || rules.ruleKey(table, specRule(w)) === rules.ruleKey(table, specRule(h));
      if (i % WORK_PER_TURN === WORK_PER_TURN - 1) await pause();
    }
    if (same) return [];
  }
  return compareRules(table, chain, want.rules, have.rules, rules, pause);
}

/** specRule: a rule as far as its spec goes (chains that offer specAt key rules by spec alone). */
const specRule = (spec: string): KernelRule => ({ spec, target: null, packets: 0, bytes: 0 });

async function compareRules(table: string, chain: string, want: readonly KernelRule[], have: readonly KernelRule[], rules: DriftRules, pause: Yield): Promise<RawFinding[]> {
  if (want.length === have.length && want.every((r, i) => r.spec === have[i].spec)) return [];
  const wk = await keysOf(table, want, rules, pause);
  const hk = await keysOf(table, have, rules, pause);
  if (wk.length === hk.length && wk.every((k, i) => k === hk[i])) return [];
  const counts = new Map<string, number>();
  for (const k of hk) counts.set(k, (counts.get(k) ?? 0) + 1);
  const missing: string[] = [];
  wk.forEach((k, i) => {
    const n = counts.get(k) ?? 0;
    if (n > 0) counts.set(k, n - 1);
    else missing.push(want[i].spec);
  });
  const extraKeys = new Map(counts);
  const unexpected: string[] = [];
  hk.forEach((k, i) => {
    const n = extraKeys.get(k) ?? 0;
    if (n > 0) {
      extraKeys.set(k, n - 1);
      unexpected.push(have[i].spec);
    }
  });
  const out: RawFinding[] = [];
  const list = (kind: DriftKind, specs: string[]) => {
    // A copy of each spec: a slice would keep the whole text of its read alive for as long as the finding.
    for (const s of specs.slice(0, MAX_PER_CHAIN)) out.push({ table, chain, kind, detail: ownCopy(s) });
    if (specs.length > MAX_PER_CHAIN) out.push({ table, chain, kind, detail: `and ${specs.length - MAX_PER_CHAIN} more` });
  };
  list('missing-rule', missing);
  list('unexpected-rule', unexpected);
  if (out.length === 0) out.push({ table, chain, kind: 'order', detail: 'same rules in another order (the first match wins, so order matters)' });
  return out;
}

const findingKey = (f: RawFinding) => `${f.kind}\u0000${f.table}\u0000${f.chain}\u0000${f.detail}`;

/**
 * DriftTracker reports a finding once two consecutive kernel reads showed it.
 * A read that overlaps a sync can see the kernel a step ahead of (or behind)
 * kproxy's record of it; a real difference survives the next read.
 */
export class DriftTracker {
  #seen = new Map<string, { finding: RawFinding; since: number }>();
  #confirmed: DriftFinding[] = [];
  #checkedAt: number | null = null;

  /** update takes one read's findings; at is the read's time. */
  update(findings: readonly RawFinding[], at: number): void {
    const next = new Map<string, { finding: RawFinding; since: number }>();
    const confirmed: DriftFinding[] = [];
    for (const f of findings) {
      const key = findingKey(f);
      const before = this.#seen.get(key);
      next.set(key, { finding: f, since: before?.since ?? at });
      if (before) confirmed.push({ ...f, since: before.since });
    }
    this.#seen = next;
    this.#confirmed = confirmed;
    this.#checkedAt = at;
  }

  /** clear forgets everything (the kernel was cleaned up on purpose, or kproxy's record was reset). */
  clear(): void {
    this.#seen.clear();
    this.#confirmed = [];
  }

  get count(): number {
    return this.#confirmed.length;
  }

  report(limit = 50): DriftReport {
    return { checkedAt: this.#checkedAt, total: this.#confirmed.length, findings: this.#confirmed.slice(0, limit) };
  }

  /** byChain tells the Rules page which chains have findings. */
  byChain(): Map<string, DriftKind> {
    const out = new Map<string, DriftKind>();
    for (const f of this.#confirmed) if (!out.has(`${f.table}/${f.chain}`)) out.set(`${f.table}/${f.chain}`, f.kind);
    return out;
  }
}

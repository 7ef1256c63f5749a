import type { Clock } from '../../clock.ts';
import { errorMessage } from '../../errors.ts';
import { countSaveText, type IptablesCountRequest, type IptablesCounts } from '../../kernel/iptables-counts.ts';
import type { IptablesRunner } from '../../kernel/iptables.ts';
import { CountCheck, skippedVerification, type SyncVerification } from '../sync-verify.ts';

/**
 * Verified programming for the modes that write iptables (the iptables mode,
 * IPVS mode's glue chains, the userspace mode's portals): after a full sync,
 * every chain its restore input declared must hold, in the kernel, the rules
 * the input left in it; every chain the input deleted must be gone; and each
 * jump rule the mode keeps in a built-in chain must be there. The kernel's
 * side is one read (kernel/iptables-counts.ts: chain use counts over netlink
 * for iptables-nft, iptables-save counted by line prefixes for legacy); the
 * intended side is worked out from the restore input itself, so nothing is
 * kept between syncs for it.
 *
 * Only what kproxy owns is compared: the built-in chains' other rules
 * (Docker's, a CNI's) and other programs' chains are never counted against
 * it; with use counts, their jumps into kproxy's chains are read and added
 * to what kproxy's chains are expected to hold.
 */

/**
 * Written is one chain a restore input declares: where its last declaration
 * is, the rules it holds once the input is applied, and (counted only for
 * use counts) the rules of the declared chains that jump to it.
 */
export interface Written {
  readonly at: number;
  rules: number;
  refs: number;
  /** seen: the kernel's read listed it (set while comparing). */
  seen: boolean;
}

/** Section is one "*table … COMMIT" part of a restore input. */
interface Section {
  readonly table: string;
  readonly start: number;
  readonly end: number;
}

/**
 * WrittenInput reads, from a restore input sent with --noflush, what the
 * chains it declares hold once it is applied: a declaration flushes a chain
 * (so only the rules after a chain's last declaration count: the nft layout
 * declares KUBE-MARK-MASQ twice), -A and -I add a rule, -D removes one, -X
 * deletes the chain. Rules of chains the input does not declare (the jump
 * rules a fresh node's input inserts into built-in chains) are not kproxy's
 * whole chains and are left to the jump check. Lines are found with indexOf
 * over the whole input (34 MB at 10,000 Services x 10 endpoints); of a rule
 * only its chain and, when asked, its target are read; each chain is one
 * entry of one map (111,000 at that size). The walks yield to the event
 * loop every SLICE_LINES lines: they run while another process reads the
 * kernel (iptables-save), and never hold the daemon's loop long.
 */
export class WrittenInput {
  readonly #text: string;
  readonly #owned: readonly OwnedChain[];
  #sections: Section[] = [];
  /** #chains: per table, each chain the input declares and does not delete (and the owned ones). */
  readonly #chains = new Map<string, Map<string, Written>>();
  readonly #deleted = new Map<string, Set<string>>();
  #prepared: Promise<void> | null = null;
  #ready = false;
  #counted: Promise<void> | null = null;
  #countedRefs = false;

  constructor(text: string, owned: readonly OwnedChain[] = []) {
    this.#text = text;
    this.#owned = owned;
  }

  /** prepare reads the declarations and deletions (once); chain() and deleted() answer after it. */
  prepare(): Promise<void> {
    this.#prepared ??= (async () => {
      const text = this.#text;
      this.#sections = sectionsOf(text);
      for (const s of this.#sections) mapOf(this.#chains, s.table);
      await eachLineSliced(text, this.#sections, ':', (table, at, chain) => this.#chains.get(table)!.set(chain, { at, rules: 0, refs: 0, seen: false }));
      await eachLineSliced(text, this.#sections, '-X ', (table, at, chain) => {
        const chains = this.#chains.get(table)!;
        if (at < (chains.get(chain)?.at ?? -1)) return;
        chains.delete(chain);
        let d = this.#deleted.get(table);
        if (!d) this.#deleted.set(table, (d = new Set()));
        d.add(chain);
      });
      for (const o of this.#owned) {
        const chains = mapOf(this.#chains, o.table);
        if (!chains.has(o.chain)) chains.set(o.chain, { at: -1, rules: o.rules, refs: 0, seen: false });
      }
      this.#ready = true;
    })();
    return this.#prepared;
  }

  /** chain: the input's entry for a chain it declares and does not delete afterwards (or an owned one). */
  chain(table: string, chain: string): Written | undefined {
    if (!this.#ready) throw new Error('WrittenInput.chain before prepare()');
    return this.#chains.get(table)?.get(chain);
  }

  /** deleted: the chains of a table the input deletes (-X) and does not declare again. */
  deleted(table: string): ReadonlySet<string> | undefined {
    return this.#deleted.get(table);
  }

  /**
   * count reads the rules of every declared chain, and with refs the jumps
   * from them (" -j KUBE-…": every chain kproxy writes is named KUBE-…, and
   * kproxy writes no -g; DNAT, MARK, RETURN… are targets, not chains). One
   * walk over the rules per command; counted once (with refs, the count
   * serves rule counts too). Returns the chains per table.
   */
  async count(refs: boolean): Promise<Map<string, Map<string, Written>>> {
    if (this.#counted === null || (refs && !this.#countedRefs)) {
      if (this.#counted !== null) throw new Error('WrittenInput.count: the rules were counted without the jumps');
      this.#countedRefs = refs;
      this.#counted = this.#count(refs);
    }
    await this.#counted;
    return this.#chains;
  }

  async #count(refs: boolean): Promise<void> {
    await this.prepare();
    const text = this.#text;
    for (const [op, delta] of OPS) {
      // A chain's rules come one after another, and so do the jumps of endpoint chains to
      // KUBE-MARK-MASQ: each is looked up once per run of them, not once per line.
      let table = '';
      let chain = '';
      let w: Written | undefined;
      let target = '';
      let t: Written | undefined;
      // next: where the next " -j KUBE-" at or after the current line starts (searched once for all lines up to it).
      let next = -1;
      await eachLineSliced(text, this.#sections, op, (tb, at, c, end) => {
        if (c !== chain || tb !== table) {
          if (tb !== table) target = '';
          table = tb;
          chain = c;
          w = this.#chains.get(tb)!.get(c);
        }
        if (w === undefined || at < w.at) return;
        w.rules += delta;
        if (!refs) return;
        // A rule has one -j. The search runs forward from the line, once for the lines up to
        // the jump it finds: lines without one (REJECT, DNAT…) do not each search again.
        if (next < at && next !== -2) next = text.indexOf(JUMP_KUBE, at);
        if (next < 0) next = -2;
        if (next < 0 || next > end) return;
        const j = next + JUMP_KUBE.length - 5;
        let e = text.indexOf(' ', j);
        if (e < 0 || e > end) e = end;
        if (e - j !== target.length || !text.startsWith(target, j)) {
          target = text.slice(j, e);
          t = this.#chains.get(tb)!.get(target);
        }
        if (t) t.refs += delta;
      });
    }
  }
}

/** OwnedChain is a chain kproxy keeps that its input need not declare (a canary), with the rules it holds. */
export interface OwnedChain {
  readonly table: string;
  readonly chain: string;
  readonly rules: number;
}

/** JUMP_KUBE: how a jump to one of kproxy's chains reads in a rule. */
const JUMP_KUBE = ' -j KUBE-';

/** OPS: the rule commands of a restore input and what each does to its chain's count. */
const OPS = [
  ['-A ', 1],
  ['-I ', 1],
  ['-D ', -1],
] as const;

/** SLICE_LINES: the lines a walk reads between two turns of the event loop (about 10 ms). */
const SLICE_LINES = 20_000;

/** writtenChains reads a restore input (see WrittenInput), with the chains kproxy keeps besides. */
export function writtenChains(text: string, owned: readonly OwnedChain[] = []): WrittenInput {
  return new WrittenInput(text, owned);
}

function mapOf<V>(m: Map<string, Map<string, V>>, key: string): Map<string, V> {
  let v = m.get(key);
  if (!v) m.set(key, (v = new Map()));
  return v;
}

/** sectionsOf: the "*table" parts of a restore input, each from its "*table" line to its COMMIT, in order. */
function sectionsOf(text: string): Section[] {
  const out: Section[] = [];
  for (let i = text.startsWith('*') ? 0 : text.indexOf('\n*'); i >= 0;) {
    const head = text[i] === '\n' ? i + 1 : i;
    const nl = text.indexOf('\n', head);
    const table = text.slice(head + 1, nl < 0 ? text.length : nl).trim();
    let commit = text.indexOf('\nCOMMIT', head);
    if (commit < 0) commit = text.length;
    out.push({ table, start: head, end: commit });
    i = text.indexOf('\n*', commit);
  }
  return out;
}

type LineFn = (table: string, at: number, chain: string, end: number) => void;

/**
 * eachLine calls f for the lines starting with `prefix` (":", "-A ", …)
 * inside a section, from offset `from`, up to `max` of them: the table, the
 * line's offset, its chain (the word after the prefix), and the offset of
 * the line's end. Returns where to go on from, or -1 at the end. One indexOf
 * walk over the whole input per prefix (a walk per section would scan to
 * the end of the input for each section lacking the prefix).
 */
function eachLine(text: string, sections: readonly Section[], prefix: string, f: LineFn, from: number, max: number): number {
  const needle = `\n${prefix}`;
  let k = 0;
  let n = 0;
  for (let i = text.indexOf(needle, from); i >= 0; i = text.indexOf(needle, i + 1)) {
    if (n++ === max) return i;
    while (k < sections.length && sections[k].end < i) k++;
    if (k === sections.length) return -1;
    if (i < sections[k].start) continue;
    const at = i + needle.length;
    let end = text.indexOf('\n', at);
    if (end < 0) end = text.length;
    let sp = text.indexOf(' ', at);
    if (sp < 0 || sp > end) sp = end;
    f(sections[k].table, i + 1, text.slice(at, sp), end);
  }
  return -1;
}

/** eachLineSliced walks every line with eachLine, a turn of the event loop after each SLICE_LINES of them. */
async function eachLineSliced(text: string, sections: readonly Section[], prefix: string, f: LineFn): Promise<void> {
  for (let from = eachLine(text, sections, prefix, f, 0, SLICE_LINES); from >= 0; from = eachLine(text, sections, prefix, f, from, SLICE_LINES)) {
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** OwnedJump is a rule kproxy keeps in a chain it does not write (a built-in chain), jumping into one of its own. */
export interface OwnedJump {
  readonly table: string;
  readonly from: string;
  readonly to: string;
}

/** ChainCheck is what one verification compares. */
export interface ChainCheck {
  /** written: the full sync's restore input, with the chains kproxy keeps besides (writtenChains). */
  readonly written: WrittenInput;
  readonly jumps: readonly OwnedJump[];
  /** stale: other chains the kernel must not hold (a full sync deletes them), besides those the input deleted. */
  readonly stale?: (table: string, chain: string) => boolean;
  /** servicePortOf names the service port a chain belongs to (asked for differing chains only). */
  readonly servicePortOf?: (table: string, chain: string) => string | undefined;
}

/** TABLES: the tables a verification reads (kproxy's chains and canaries are in these). */
export const TABLES: readonly string[] = ['filter', 'mangle', 'nat'];

/**
 * countRequest: what to read of the kernel for a check: each chain's entry in
 * the input, and so the jumps of every chain kproxy did not write; asked once
 * the input's declarations are read.
 */
export function countRequest(c: ChainCheck): IptablesCountRequest<Written> {
  return { tables: TABLES, own: (table, chain) => c.written.chain(table, chain), ready: c.written.prepare() };
}

/**
 * compareChains checks the kernel's counts against the intended ones. With
 * use counts a chain must hold its rules plus the jumps to it: those of the
 * chains kproxy wrote (from the input) and those of every other chain (as
 * read); with rule counts just its rules. A jump rule counts as there when
 * at least one rule of its chain jumps to its target (another program may
 * hold the same jump: that is not kproxy's to count). The kernel's read
 * carries each chain's entry: no chain is looked up again.
 */
export async function compareChains(c: ChainCheck, got: IptablesCounts<Written>, check: CountCheck): Promise<void> {
  const use = got.kind === 'use';
  const what = use ? 'rules and jumps to it' : 'rules';
  const written = await c.written.count(use);
  for (const [table, chains] of written) {
    const t = got.tables.get(table);
    const others = use && t ? foreignRefs(t.jumps) : null;
    const want = (chain: string, w: Written) => (use ? w.rules + w.refs + (others?.get(chain) ?? 0) : w.rules);
    const deleted = c.written.deleted(table);
    let seen = 0;
    const names = t?.names ?? [];
    for (let i = 0; i < names.length; i++) {
      const chain = names[i];
      const w = t!.owners[i];
      if (w === undefined) {
        if (deleted?.has(chain) || c.stale?.(table, chain)) check.unexpected(`chain ${table} ${chain}`, 'chain', 1);
        continue;
      }
      w.seen = true;
      seen++;
      const n = want(chain, w);
      const have = t!.counts[i];
      check.compare(`chain ${table} ${chain}`, what, n, have, have === n ? undefined : c.servicePortOf?.(table, chain));
    }
    if (seen < chains.size) for (const [chain, w] of chains) if (!w.seen) check.compare(`chain ${table} ${chain}`, what, want(chain, w), null, c.servicePortOf?.(table, chain));
  }
  for (const j of c.jumps) {
    const n = got.tables.get(j.table)?.jumps.get(j.from)?.get(j.to) ?? 0;
    check.compare(`chain ${j.table} ${j.from}`, `rules jumping to ${j.to}`, 1, Math.min(n, 1));
  }
}

/** foreignRefs sums, per target, the jumps of the chains kproxy did not write (as the kernel read them). */
function foreignRefs(jumps: ReadonlyMap<string, ReadonlyMap<string, number>>): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of jumps.values()) for (const [to, n] of m) out.set(to, (out.get(to) ?? 0) + n);
  return out;
}

/** readCounts reads a request's counts through the runner (countChains), or counts its save() output. */
export async function readCounts<T>(runner: IptablesRunner, ask: IptablesCountRequest<T>): Promise<IptablesCounts<T>> {
  if (runner.countChains) return runner.countChains(ask);
  const text = await runner.save();
  await ask.ready;
  return countSaveText(text, ask, 'iptables-save');
}

/**
 * verifyChains runs one verification begun at t0 (the caller's work out of
 * the intended counts is part of its time): the kernel's counts through the
 * runner, compared; a read that fails is a skipped verification (the sync
 * stands), never a mismatch.
 */
export async function verifyChains(runner: IptablesRunner, clock: Clock, t0: number, c: ChainCheck): Promise<SyncVerification> {
  let got: IptablesCounts<Written>;
  try {
    // While another process reads the kernel (iptables-save: a second at 10,000 x 10), the rules
    // the input left are counted here; nft's use counts (over netlink) need the jumps as well.
    [got] = await Promise.all([readCounts(runner, countRequest(c)), c.written.count(runner.flavor === 'nft')]);
  } catch (err) {
    return skippedVerification(clock.monotonic() - t0, `reading the chains (${runner.flavor}) failed: ${errorMessage(err)}`);
  }
  const check = new CountCheck();
  await compareChains(c, got, check);
  return check.result(clock.monotonic() - t0);
}

import { recordCall, UNBOUNDED, type CallLogLimits } from './call-log.ts';
import { canonicalEntry, IPSET_MAXELEM, IPSET_TYPES, IpsetRestoreError, createArgs, type IpsetRunner, type IpsetSet, type IpsetSpec, type IpsetType } from './ipset.ts';

export interface SimulatedIpsetOptions {
  /** references counts kernel references to a set (iptables rules matching it); a referenced set cannot be destroyed. */
  references?: (name: string) => number;
}

/**
 * SimulatedIpset is an in-memory set table behind the IpsetRunner interface. Its
 * restore() takes `ipset restore` input with ipset's answers: the first
 * refused line stops the batch and is named ("Error in line N"), lines before
 * it stay applied; a hash set holds at most its maxelem entries (the kernel's
 * "Hash is full"). Entries are kept in the canonical form `ipset save` prints.
 */
export class SimulatedIpset implements IpsetRunner {
  readonly #sets = new Map<string, { spec: IpsetSpec; entries: Set<string>; maxelem: number }>();
  readonly #references: (name: string) => number;
  readonly calls: { op: 'save' | 'restore' | 'list'; input?: string }[] = [];
  /** callLogLimits bound the call history (default: all; --dry-run daemons keep little). */
  callLogLimits: CallLogLimits = UNBOUNDED;

  constructor(opts: SimulatedIpsetOptions = {}) {
    this.#references = opts.references ?? (() => 0);
  }

  get restores(): string[] {
    return this.calls.filter((c) => c.op === 'restore').map((c) => c.input!);
  }

  async save(): Promise<Map<string, IpsetSet>> {
    recordCall(this.calls, { op: 'save' }, this.callLogLimits);
    return this.sets();
  }

  /** countEntries: each set's number of entries, as `ipset list -t` says it. */
  async countEntries(): Promise<Map<string, number>> {
    recordCall(this.calls, { op: 'list' }, this.callLogLimits);
    return new Map([...this.#sets].map(([name, s]) => [name, s.entries.size]));
  }

  /** sets returns the table without recording a call. */
  sets(): Map<string, IpsetSet> {
    const out = new Map<string, IpsetSet>();
    for (const [name, s] of [...this.#sets].sort(([a], [b]) => (a < b ? -1 : 1))) out.set(name, { ...s.spec, entries: new Set(s.entries) });
    return out;
  }

  /** saveText is what `ipset save` would print (sorted sets and entries, without hash seeds). */
  saveText(): string {
    const out: string[] = [];
    for (const s of this.sets().values()) {
      out.push(`create ${createArgs(s)}`);
      for (const e of [...s.entries].sort()) out.push(`add ${s.name} ${e}`);
    }
    return out.map((l) => l + '\n').join('');
  }

  async restore(batch: string): Promise<void> {
    recordCall(this.calls, { op: 'restore', input: batch }, this.callLogLimits);
    const lines = batch.split('\n');
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i].trim();
      if (line === '' || line.startsWith('#')) continue;
      const refused = this.#apply(line.split(/\s+/));
      if (refused) throw new IpsetRestoreError(`ipset restore failed (exit 1): ${refused} at line ${i + 1}: ${line}`, i + 1);
    }
  }

  #apply(w: string[]): string | null {
    const exist = w.at(-1) === '-exist';
    if (exist) w = w.slice(0, -1);
    const [op, name] = w;
    const set = name === undefined ? undefined : this.#sets.get(name);
    switch (op) {
      case 'create': {
        const type = w[2] as IpsetType;
        if (!name || !IPSET_TYPES.includes(type)) return `Syntax error: unknown settype ${w[2] ?? ''}`;
        const fam = w.indexOf('family');
        const family = type === 'bitmap:port' ? null : fam > 0 && w[fam + 1] === 'inet6' ? 'inet6' : 'inet';
        if (set) {
          if (exist && set.spec.type === type && set.spec.family === family) return null;
          return 'Set cannot be created: set with the same name already exists';
        }
        const max = w.indexOf('maxelem');
        const maxelem = type === 'bitmap:port' ? Infinity : max > 0 ? Number(w[max + 1]) : IPSET_MAXELEM;
        if (!Number.isInteger(maxelem) && maxelem !== Infinity) return `Syntax error: '${w[max + 1] ?? ''}' is invalid as number`;
        this.#sets.set(name, { spec: { name, type, family }, entries: new Set(), maxelem });
        return null;
      }
      case 'add':
      case 'del': {
        if (!set) return 'The set with the given name does not exist';
        const entry = w[2] === undefined ? null : canonicalEntry(set.spec.type, w[2]);
        if (entry === null || w.length !== 3) return `Syntax error: ${w[2] ?? 'missing element'} is not a valid ${set.spec.type} element`;
        if (op === 'add') {
          if (set.entries.has(entry)) {
            if (!exist) return "Element cannot be added to the set: it's already added";
          } else if (set.entries.size >= set.maxelem) return 'Hash is full, cannot add more elements';
          set.entries.add(entry);
        } else {
          if (!set.entries.has(entry) && !exist) return "Element cannot be deleted from the set: it's not added";
          set.entries.delete(entry);
        }
        return null;
      }
      case 'flush':
        if (!set) return 'The set with the given name does not exist';
        set.entries.clear();
        return null;
      case 'destroy':
        if (!set) return 'The set with the given name does not exist';
        if (this.#references(name) > 0) return 'Set cannot be destroyed: it is in use by a kernel component';
        this.#sets.delete(name);
        return null;
      default:
        return `No command specified: unknown argument ${op}`;
    }
  }
}

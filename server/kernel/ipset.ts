import { errorMessage, IpsetError } from '../errors.ts';
import { canonicalIP, parseCIDR } from '../net/ip.ts';
import { execFile, type ExecFn } from './exec.ts';

/**
 * IP sets as `ipset save` prints them and `ipset restore` takes them. IPVS
 * mode keeps its matches (cluster IPs, node ports, source ranges...) in sets
 * so its iptables rules stay a fixed handful whatever the number of Services.
 */

/** IpsetType: the set types kube-proxy's IPVS mode uses. */
export type IpsetType = 'hash:ip' | 'hash:ip,port' | 'hash:ip,port,ip' | 'hash:ip,port,net' | 'bitmap:port';
export const IPSET_TYPES: readonly IpsetType[] = ['hash:ip', 'hash:ip,port', 'hash:ip,port,ip', 'hash:ip,port,net', 'bitmap:port'];

/** IpsetSpec is how a set is created (kube-proxy's defaults: hashsize 1024, maxelem 65536, ports 0-65535). */
export interface IpsetSpec {
  readonly name: string;
  readonly type: IpsetType;
  /** family: inet or inet6 for hash types; null for bitmap:port. */
  readonly family: 'inet' | 'inet6' | null;
}

/** IpsetSet is one set as listed: its spec and its entries in canonical (save) form. */
export interface IpsetSet extends IpsetSpec {
  readonly entries: ReadonlySet<string>;
}

/**
 * IPSET_MAXELEM: the entries a hash set kproxy creates may hold (its
 * `maxelem`, kube-proxy's default). Past it the kernel refuses the add ("Hash
 * is full, cannot add more elements") and `ipset restore` stops there.
 */
export const IPSET_MAXELEM = 65536;

/** The longest set name the kernel accepts (IPSET_MAXNAMELEN - 1). */
export const MAX_SET_NAME = 31;
const NAME = /^[A-Za-z0-9_.:-]{1,31}$/;

/** createArgs renders a set's create parameters as kube-proxy's ipset runner passes them. */
export function createArgs(spec: IpsetSpec): string {
  if (spec.type === 'bitmap:port') return `${spec.name} bitmap:port range 0-65535`;
  return `${spec.name} ${spec.type} family ${spec.family ?? 'inet'} hashsize 1024 maxelem ${IPSET_MAXELEM}`;
}

const PROTO = /^(tcp|udp|sctp)$/;

function ipOf(text: string | undefined): string | null {
  return text === undefined ? null : canonicalIP(text);
}

function portOf(text: string | undefined): number | null {
  if (text === undefined || !/^\d{1,5}$/.test(text)) return null;
  const n = Number(text);
  return n <= 65535 ? n : null;
}

/**
 * canonicalEntry returns an entry as `ipset save` prints it ("10.0.0.1,tcp:80",
 * nets with host bits cleared and a full-length prefix dropped), or null when
 * the text is not a valid entry of the type. Diffs compare canonical forms.
 */
export function canonicalEntry(type: IpsetType, text: string): string | null {
  const parts = text.split(',');
  if (type === 'bitmap:port') {
    const p = parts.length === 1 ? portOf(parts[0]) : null;
    return p === null ? null : String(p);
  }
  if (type === 'hash:ip') {
    return parts.length === 1 ? ipOf(parts[0]) : null;
  }
  const want = type === 'hash:ip,port' ? 2 : 3;
  if (parts.length !== want) return null;
  const ip = ipOf(parts[0]);
  const m = /^([a-zA-Z]+):(\d{1,5})$/.exec(parts[1]);
  const proto = m?.[1].toLowerCase();
  const port = portOf(m?.[2]);
  if (!ip || !proto || !PROTO.test(proto) || port === null) return null;
  const head = `${ip},${proto}:${port}`;
  if (type === 'hash:ip,port') return head;
  if (type === 'hash:ip,port,ip') {
    const ip2 = ipOf(parts[2]);
    return ip2 ? `${head},${ip2}` : null;
  }
  const cidr = parts[2].includes('/') ? parseCIDR(parts[2]) : null;
  const bare = cidr ? null : ipOf(parts[2]);
  if (bare) return `${head},${bare}`;
  if (!cidr || cidr.prefix === 0) return null;
  const full = cidr.family === 'IPv4' ? 32 : 128;
  return `${head},${cidr.prefix === full ? cidr.ip : cidr.text}`;
}

/**
 * IpsetBatch collects `ipset restore` input. Creates, adds and deletes carry
 * -exist, so a line never fails because the kernel already holds (or already
 * lost) what it asks for. Every name and entry is validated before it is
 * written; a bad one throws IpsetError instead of reaching the batch.
 */
export class IpsetBatch {
  readonly #lines: string[] = [];

  #name(name: string): string {
    if (!NAME.test(name)) throw new IpsetError(`ipset name ${JSON.stringify(name)} is not a valid set name (at most ${MAX_SET_NAME} characters)`);
    return name;
  }

  create(spec: IpsetSpec): void {
    this.#name(spec.name);
    this.#lines.push(`create ${createArgs(spec)} -exist`);
  }

  add(set: IpsetSpec, entry: string): void {
    this.#lines.push(`add ${this.#name(set.name)} ${this.#entry(set, entry)} -exist`);
  }

  del(set: IpsetSpec, entry: string): void {
    this.#lines.push(`del ${this.#name(set.name)} ${this.#entry(set, entry)} -exist`);
  }

  flush(name: string): void {
    this.#lines.push(`flush ${this.#name(name)}`);
  }

  destroy(name: string): void {
    this.#lines.push(`destroy ${this.#name(name)}`);
  }

  #entry(set: IpsetSpec, entry: string): string {
    const c = canonicalEntry(set.type, entry);
    if (c === null) throw new IpsetError(`${JSON.stringify(entry)} is not a valid ${set.type} entry for set ${set.name}`);
    return c;
  }

  get lines(): number {
    return this.#lines.length;
  }

  get empty(): boolean {
    return this.#lines.length === 0;
  }

  text(): string {
    return this.#lines.length ? this.#lines.join('\n') + '\n' : '';
  }
}

/** parseIpsetSave reads `ipset save` output (all sets) into sets keyed by name. */
export function parseIpsetSave(text: string): Map<string, IpsetSet> {
  const sets = new Map<string, { spec: IpsetSpec; entries: Set<string> }>();
  for (const [i, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const w = line.split(/\s+/);
    if (w[0] === 'create' && w.length >= 3) {
      // Sets of types kproxy does not use are listed with their type as is; their entries are kept verbatim.
      const type = w[2] as IpsetType;
      const fam = w.indexOf('family');
      const family = fam > 0 ? (w[fam + 1] === 'inet6' ? 'inet6' : 'inet') : null;
      sets.set(w[1], { spec: { name: w[1], type, family }, entries: new Set() });
    } else if (w[0] === 'add' && w.length >= 3) {
      const s = sets.get(w[1]);
      if (!s) throw new IpsetError(`ipset save line ${i + 1} adds to a set it did not create: ${line}`);
      const entry = IPSET_TYPES.includes(s.spec.type) ? canonicalEntry(s.spec.type, w[2]) : w[2];
      s.entries.add(entry ?? w[2]);
    } else {
      throw new IpsetError(`ipset save line ${i + 1} is not understood: ${line}`);
    }
  }
  const out = new Map<string, IpsetSet>();
  for (const [name, s] of sets) out.set(name, { ...s.spec, entries: s.entries });
  return out;
}

/**
 * parseIpsetTerse reads `ipset list -t` (headers only: no entry is printed)
 * into each set's "Number of entries", keyed by name.
 */
export function parseIpsetTerse(text: string): Map<string, number> {
  const out = new Map<string, number>();
  let name: string | null = null;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line.startsWith('Name: ')) name = line.slice(6).trim();
    else if (line.startsWith('Number of entries: ') && name !== null) {
      const n = Number(line.slice(19).trim());
      if (!Number.isInteger(n) || n < 0) throw new IpsetError(`ipset list -t: set ${name} has "${line}"`);
      out.set(name, n);
      name = null;
    }
  }
  return out;
}

/** IpsetRunner is kproxy's boundary to the kernel's IP sets: one process per call. */
export interface IpsetRunner {
  /** save lists every set and entry (`ipset save`). */
  save(): Promise<Map<string, IpsetSet>>;
  /**
   * countEntries reads each set's number of entries without its entries
   * (`ipset list -t`, headers only): what a sync is verified with.
   */
  countEntries?(): Promise<Map<string, number>>;
  /** restore feeds a batch to `ipset restore`; throws IpsetRestoreError naming the refused line. */
  restore(batch: string): Promise<void>;
}

/** IpsetRestoreError is a refused `ipset restore`; line is the 1-based input line ipset blamed (0 if none). */
export class IpsetRestoreError extends IpsetError {
  readonly line: number;
  constructor(message: string, line: number, options?: { cause?: unknown }) {
    super(message, options);
    this.line = line;
  }
}

/** createIpsetRunner returns the runner that drives the host's sets through the ipset binary. */
export function createIpsetRunner(opts: { exec?: ExecFn; timeoutMs?: number } = {}): IpsetRunner {
  const exec = opts.exec ?? execFile;
  const timeoutMs = opts.timeoutMs ?? 60_000;
  return {
    async save() {
      let res;
      try {
        res = await exec('ipset', ['save'], { timeoutMs });
      } catch (err) {
        throw new IpsetError(`ipset save could not run: ${errorMessage(err)}`, { cause: err });
      }
      if (res.code !== 0) throw new IpsetError(`ipset save failed (exit ${res.code}): ${res.stderr.trim()}`);
      return parseIpsetSave(res.stdout);
    },
    async countEntries() {
      let res;
      try {
        res = await exec('ipset', ['list', '-t'], { timeoutMs });
      } catch (err) {
        throw new IpsetError(`ipset list -t could not run: ${errorMessage(err)}`, { cause: err });
      }
      if (res.code !== 0) throw new IpsetError(`ipset list -t failed (exit ${res.code}): ${res.stderr.trim()}`);
      return parseIpsetTerse(res.stdout);
    },
    async restore(batch) {
      let res;
      try {
        res = await exec('ipset', ['restore'], { stdin: batch, timeoutMs });
      } catch (err) {
        throw new IpsetError(`ipset restore could not run: ${errorMessage(err)}`, { cause: err });
      }
      if (res.code === 0) return;
      const m = /Error in line (\d+): (.*)/.exec(res.stderr);
      const line = m ? Number(m[1]) : 0;
      const text = m ? `${m[2].trim()} at line ${line}: ${batch.split('\n')[line - 1] ?? ''}` : res.stderr.trim().split('\n')[0];
      throw new IpsetRestoreError(`ipset restore failed (exit ${res.code}): ${text}`, line);
    },
  };
}

import { NfacctError } from '../errors.ts';
import { execFile, type ExecFn } from './exec.ts';

/**
 * Extended accounting objects (nfnetlink_acct) through the `nfacct` command
 * (Debian package nfacct): named packet and byte counters that iptables rules
 * update with `-m nfacct --nfacct-name NAME`. They live in the network
 * namespace, like the rules. kube-proxy keeps two (pkg/util/nfacct) and
 * exports them as metrics; kproxy creates them at start where the kernel
 * supports nfacct and reads them at each scrape.
 */

/** NfacctCounter is one accounting object. */
export interface NfacctCounter {
  readonly name: string;
  readonly packets: number;
  readonly bytes: number;
}

/** NfacctRunner creates and lists accounting objects. */
export interface NfacctRunner {
  /** ensure creates the object unless it exists (kube-proxy's nfacct Ensure). */
  ensure(name: string): Promise<void>;
  /** list reads every object of the namespace with its counters. */
  list(): Promise<NfacctCounter[]>;
}

/** NFACCT_NAME: what the kernel takes as an object's name (NFACCT_NAME_MAX is 32 with the NUL). */
const NFACCT_NAME = /^[A-Za-z0-9_.-]{1,31}$/;

const LINE = /^\{\s*pkts\s*=\s*(\d+),\s*bytes\s*=\s*(\d+)\s*\}\s*=\s*(\S+);$/;

/**
 * parseNfacctList reads `nfacct list` (nfacct 1.0.x prints one object a line:
 * `{ pkts = 00000000000000000017, bytes = 00000000000000001020 } = name;`).
 */
export function parseNfacctList(text: string): NfacctCounter[] {
  const out: NfacctCounter[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '') continue;
    const m = LINE.exec(line);
    if (!m) throw new NfacctError(`nfacct list printed a line kproxy cannot read: ${JSON.stringify(line.slice(0, 120))}`);
    out.push({ name: m[3], packets: Number(m[1]), bytes: Number(m[2]) });
  }
  return out;
}

export interface NfacctRunnerOptions {
  exec?: ExecFn;
  /** timeoutMs bounds each nfacct process (a scrape must not hang on it); default 2 s. */
  timeoutMs?: number;
}

/** createNfacctRunner runs the nfacct command, one process per call. */
export function createNfacctRunner(opts: NfacctRunnerOptions = {}): NfacctRunner {
  const exec = opts.exec ?? execFile;
  const timeoutMs = opts.timeoutMs ?? 2_000;
  const list = async (): Promise<NfacctCounter[]> => {
    const r = await exec('nfacct', ['list'], { timeoutMs });
    if (r.code !== 0) throw new NfacctError(`nfacct list failed (exit ${r.code}): ${r.stderr.trim() || 'no message'}`);
    return parseNfacctList(r.stdout);
  };
  return {
    list,
    async ensure(name) {
      if (!NFACCT_NAME.test(name)) throw new NfacctError(`invalid nfacct object name ${JSON.stringify(name)}`);
      if ((await list()).some((c) => c.name === name)) return;
      const r = await exec('nfacct', ['add', name], { timeoutMs });
      if (r.code === 0) return;
      // Another writer may have created it since the listing ("Device or resource busy").
      if ((await list()).some((c) => c.name === name)) return;
      throw new NfacctError(`creating the nfacct object ${name} failed (exit ${r.code}): ${r.stderr.trim() || 'no message'}`);
    },
  };
}

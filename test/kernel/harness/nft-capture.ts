import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { nsExec } from './netns.ts';

/**
 * nft-capture: the netlink bytes `nft -f` sends for a transaction, read with
 * strace (`-e write=all` dumps every sendmsg's buffer in hex) while nft runs
 * in a namespace the caller made. The last datagram that opens an nf_tables
 * batch is the transaction: what kproxy's netlink encoder must send too.
 */

/** NFNL_MSG_BATCH_BEGIN as the first message type of a datagram (little endian u16 at byte 4). */
const BATCH_BEGIN = 0x10;

/** parseStraceDumps reads strace's hex dumps: one Buffer per sendmsg/sendto. */
export function parseStraceDumps(text: string): Buffer[] {
  const out: Buffer[] = [];
  let cur: number[] | null = null;
  for (const line of text.split('\n')) {
    const m = /^ \| [0-9a-f]{5} {2}((?:[0-9a-f]{2} {1,2}){1,16})/.exec(line);
    if (m) {
      cur ??= [];
      for (const h of m[1].trim().split(/\s+/)) cur.push(Number.parseInt(h, 16));
      continue;
    }
    if (/^(sendmsg|sendto)\(/.test(line) || line.startsWith(' * ')) {
      if (line.startsWith(' * ') && cur === null) continue;
      if (cur) out.push(Buffer.from(cur));
      cur = null;
    }
  }
  if (cur) out.push(Buffer.from(cur));
  return out;
}

export interface Capture {
  /** batch: the transaction's datagram (BATCH_BEGIN … BATCH_END). */
  readonly batch: Buffer;
  readonly code: number;
  readonly stderr: string;
}

/** captureNftBatch runs `nft -f FILE` under strace in `ns` and returns the batch it sent. */
export async function captureNftBatch(ns: string, transaction: string): Promise<Capture> {
  const dir = mkdtempSync(join(tmpdir(), 'kpt-nft-capture-'));
  try {
    const input = join(dir, 'in.nft');
    const trace = join(dir, 'strace.out');
    const { writeFileSync } = await import('node:fs');
    writeFileSync(input, transaction);
    const r = await nsExec(ns, ['strace', '-qq', '-e', 'trace=sendmsg', '-e', 'write=all', '-s', '0', '-o', trace, 'nft', '-f', input], { timeoutMs: 120_000 });
    const dumps = parseStraceDumps(readFileSync(trace, 'utf8'));
    const batches = dumps.filter((d) => d.length >= 20 && d.readUInt16LE(4) === BATCH_BEGIN);
    if (batches.length === 0) throw new Error(`nft sent no batch (exit ${r.code}): ${r.stderr.trim()}`);
    return { batch: batches.at(-1)!, code: r.code, stderr: r.stderr };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

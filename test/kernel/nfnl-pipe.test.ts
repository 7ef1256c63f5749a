import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../server/log.ts';
import { NLM_F_REQUEST, NlBuilder, NLMSG_ERROR, parseError, parseMessages } from '../../server/kernel/nfnl.ts';
import { NfnlPipeError, NfnlPipeGoneError, startNfnlPipe, type NfnlPipe } from '../../server/kernel/nfnl-pipe.ts';
import { msgType, NFT_MSG_GETTABLE } from '../../server/kernel/nft-netlink-encode.ts';
import { tiers } from '../tiers.ts';
import { addNamespace, deleteNamespace, HARNESS_PREFIX, nsExec, nsRun } from './harness/netns.ts';
import { NFNL_PIPE } from './harness/nft.ts';

/**
 * The helper program (server/kernel/native/nfnl-pipe.c) in a namespace of its
 * own, against the real kernel: a request the kernel never answers ends with
 * ETIMEDOUT within the reply timeout (not the daemon's 120 s), and a datagram
 * another process's netlink socket sends to the helper's port id is dropped
 * and reported, never taken for the kernel's answer.
 */
const NS = `${HARNESS_PREFIX}nfnl-pipe`;
const REPLY_TIMEOUT_MS = 1500;
let build: string;
let sender: string;
let pipe: NfnlPipe;
const lines: string[] = [];

/** getTable: an NFT_MSG_GETTABLE for table ip NAME with sequence number seq; without NLM_F_REQUEST the kernel ignores it (no answer at all). */
function getTable(name: string, seq: number, flags = NLM_F_REQUEST): Buffer {
  const b = new NlBuilder(128);
  const at = b.begin(msgType(NFT_MSG_GETTABLE), flags, seq, 2);
  b.strz(1, name);
  b.end(at);
  return Buffer.from(b.bytes());
}

/** forgedAck: an NLMSG_ERROR with error 0 (an ack) for sequence number seq, as the kernel would answer. */
function forgedAck(seq: number): Buffer {
  const b = Buffer.alloc(16 + 4 + 16);
  b.writeUInt32LE(b.length, 0);
  b.writeUInt16LE(NLMSG_ERROR, 4);
  b.writeUInt16LE(0x100, 6);
  b.writeUInt32LE(seq, 8);
  b.writeUInt32LE(16, 20);
  b.writeUInt16LE(msgType(NFT_MSG_GETTABLE), 24);
  b.writeUInt32LE(seq, 28);
  return b;
}

/** portId: the helper socket's netlink port id, from the namespace's /proc/net/netlink (protocol 12 is NETLINK_NETFILTER). */
async function portId(ns: string, pid: number): Promise<number> {
  const rows = (await nsRun(ns, ['cat', '/proc/net/netlink']))
    .split('\n')
    .slice(1)
    .map((l) => l.trim().split(/\s+/))
    .filter((f) => f[1] === '12');
  const ids = rows.map((f) => Number(f[2]));
  // The first netlink socket of a process gets its PID as port id when that is free.
  return ids.includes(pid) ? pid : ids.length === 1 ? ids[0] : Promise.reject(new Error(`no single netfilter netlink socket in ${ns}: ${JSON.stringify(rows)}`));
}

describe.skipIf(!tiers().kernel.ok)('the netlink helper against the kernel', () => {
  beforeAll(async () => {
    build = mkdtempSync(join(tmpdir(), `${HARNESS_PREFIX}nlsend-`));
    sender = join(build, 'netlink-sender');
    execFileSync('cc', ['-O2', '-Wall', '-o', sender, join(import.meta.dirname, 'harness', 'netlink-sender.c')]);
    await addNamespace(NS);
    pipe = await startNfnlPipe(NFNL_PIPE, { prefix: ['ip', 'netns', 'exec', NS], replyTimeoutMs: REPLY_TIMEOUT_MS, timeoutMs: 60_000, logger: createLogger({ write: (l) => lines.push(l) }) });
  });
  afterAll(async () => {
    pipe?.close();
    await deleteNamespace(NS);
    rmSync(build, { recursive: true, force: true });
  });

  it('answers a request the kernel never answers with ETIMEDOUT after the reply timeout, and keeps working', async () => {
    const err = await pipe.requests(getTable('kpt-none', 11, 0)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NfnlPipeError);
    expect(err).not.toBeInstanceOf(NfnlPipeGoneError);
    expect((err as Error).message).toBe(`netlink request failed: ETIMEDOUT (the kernel did not answer within ${REPLY_TIMEOUT_MS} ms)`);
    // The same helper answers the next request: the kernel's ENOENT for a table that does not exist.
    const [reply] = await pipe.requests(getTable('kpt-none', 12));
    const [m] = parseMessages(reply);
    expect(parseError(m)).toMatchObject({ errno: 2, seq: 12 });
  });

  it("drops a datagram another netlink socket sends to the helper's port id, while the helper waits for the kernel, and reports it", async () => {
    const id = await portId(NS, pipe.pid);
    const before = pipe.foreignDatagrams;
    // The kernel will not answer sequence 21 (no NLM_F_REQUEST); a forged ack for it arrives while the helper waits.
    const waiting = pipe.requests(getTable('kpt-none', 21, 0)).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 300));
    const sent = await nsExec(NS, [sender, String(id), forgedAck(21).toString('hex')]);
    expect(sent.code, sent.stderr).toBe(0);
    const err = await waiting;
    // Taken for the kernel's, the ack would have answered the request with success.
    expect((err as Error).message).toContain('ETIMEDOUT');
    expect(pipe.foreignDatagrams).toBe(before + 1);
    // And one sent between requests is dropped before the next request is sent.
    const between = await nsExec(NS, [sender, String(id), forgedAck(22).toString('hex')]);
    expect(between.code, between.stderr).toBe(0);
    const [reply] = await pipe.requests(getTable('kpt-none', 22));
    expect(parseError(parseMessages(reply)[0])).toMatchObject({ errno: 2, seq: 22 });
    expect(pipe.foreignDatagrams).toBe(before + 2);
    expect(lines.filter((l) => l.includes('dropped a netlink datagram that did not come from the kernel')).length).toBeGreaterThanOrEqual(1);
    expect(lines.some((l) => l.includes(`senderPortId=`) && l.includes('bytes=36'))).toBe(true);
  });
});

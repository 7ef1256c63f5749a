import { attrList, NlBuilder, NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN, parseAttrs, parseError, parseMessages, strzOf, u32beOf, type NlMessage } from './nfnl.ts';
import type { NfnlPipe } from './nfnl-pipe.ts';
import type { NftCountRequest, NftTableCounts } from './nft-counts.ts';
import { NFT_SET_ANONYMOUS } from './nft-netlink-expr.ts';
import {
  msgType,
  NFPROTO,
  NFT_MSG_GETCHAIN,
  NFT_MSG_GETRULE,
  NFT_MSG_GETSET,
  NFT_MSG_GETSETELEM,
  NFT_MSG_NEWCHAIN,
  NFT_MSG_NEWRULE,
  NFT_MSG_NEWSET,
  NFT_MSG_NEWSETELEM,
} from './nft-netlink-encode.ts';
import { ofTable } from './nft-netlink-list.ts';
import type { NftFamily } from './nft-types.ts';

/**
 * countTableNetlink reads a table's counts (nft-counts.ts) from the kernel's
 * dumps: one of the chains (their use counts), one of the sets, then the
 * elements of the named sets asked for, and for the chains asked for their
 * rules (which anonymous set each binds) and those sets' elements. Elements
 * are counted, never decoded. null when the table does not exist.
 */
export async function countTableNetlink(pipe: NfnlPipe, family: NftFamily, table: string, ask: NftCountRequest): Promise<NftTableCounts | null> {
  let b = new NlBuilder(512);
  dumpRequest(b, NFT_MSG_GETCHAIN, family, 1, [[1, table]]);
  const chainUse = chainUses(await pipe.requests(b.bytes()), table);
  b = new NlBuilder(512);
  dumpRequest(b, NFT_MSG_GETSET, family, 2, [[1, table]]);
  const first = answers(await pipe.requests(b.bytes()));
  if (first.refused.get(2) === 2 /* ENOENT */) return null;
  refusedAny(first.refused, 'listing sets');

  const setNames = new Set<string>();
  const anonymousSets = new Set<string>();
  for (const m of first.bySeq.get(2) ?? []) {
    if (m.type !== msgType(NFT_MSG_NEWSET) || !ofTable(m, table)) continue;
    const a = parseAttrs(m.body, 4);
    const name = strzOf(a.get(2));
    if (name === undefined) continue;
    if ((u32beOf(a.get(3)) ?? 0) & NFT_SET_ANONYMOUS) anonymousSets.add(name);
    else setNames.add(name);
  }

  // The rules of the chains asked for: which anonymous sets each rule binds.
  const chains = ask.anonymousIn.filter((c) => chainUse.has(c));
  const setsOfRules = new Map<string, string[][]>();
  if (chains.length) {
    b = new NlBuilder(64 * 1024);
    chains.forEach((c, i) =>
      dumpRequest(b, NFT_MSG_GETRULE, family, 1000 + i, [
        [1, table],
        [2, c],
      ]),
    );
    const rules = answers(await pipe.requests(b.bytes()));
    refusedAny(rules.refused, 'listing rules');
    chains.forEach((c, i) => {
      const list: string[][] = [];
      for (const m of rules.bySeq.get(1000 + i) ?? []) if (m.type === msgType(NFT_MSG_NEWRULE)) list.push(lookupSets(m).filter((s) => anonymousSets.has(s)));
      setsOfRules.set(c, list);
    });
  }

  const toCount = [...new Set([...ask.sets.filter((s) => setNames.has(s)), ...[...setsOfRules.values()].flat(2)])];
  const counted = new Map<string, number>();
  if (toCount.length) {
    b = new NlBuilder(64 * 1024);
    toCount.forEach((s, i) =>
      dumpRequest(b, NFT_MSG_GETSETELEM, family, 1_000_000 + i, [
        [1, table],
        [2, s],
      ]),
    );
    const els = answers(await pipe.requests(b.bytes()));
    refusedAny(els.refused, 'listing set elements');
    toCount.forEach((s, i) => {
      let n = 0;
      for (const m of els.bySeq.get(1_000_000 + i) ?? []) {
        if (m.type !== msgType(NFT_MSG_NEWSETELEM)) continue;
        const list = parseAttrs(m.body, 4).get(3); // NFTA_SET_ELEM_LIST_ELEMENTS
        if (list) n += attrList(list).length;
      }
      counted.set(s, n);
    });
  }
  const elements = new Map<string, number>();
  for (const s of ask.sets) if (counted.has(s)) elements.set(s, counted.get(s)!);
  const anonymous = new Map<string, number[]>();
  for (const [c, rules] of setsOfRules)
    anonymous.set(
      c,
      rules.map((sets) => sets.reduce((n, s) => n + (counted.get(s) ?? 0), 0)),
    );
  return { chainUse, setNames, elements, anonymous };
}

function dumpRequest(b: NlBuilder, type: number, family: NftFamily, seq: number, attrs: [number, string][]): void {
  const at = b.begin(msgType(type), NLM_F_REQUEST | NLM_F_DUMP, seq, NFPROTO[family]);
  for (const [t, v] of attrs) b.strz(t, v);
  b.end(at);
}

/** answers: the messages of each dump by sequence number, and each refused request's errno. */
function answers(datagrams: readonly Buffer[]): { bySeq: Map<number, NlMessage[]>; refused: Map<number, number> } {
  const bySeq = new Map<number, NlMessage[]>();
  const refused = new Map<number, number>();
  const msgs: NlMessage[] = [];
  for (const d of datagrams) parseMessages(d, msgs);
  for (const m of msgs) {
    if (m.type === NLMSG_DONE) continue;
    if (m.type === NLMSG_ERROR) {
      const e = parseError(m);
      if (e.errno !== 0) refused.set(e.seq, e.errno);
      continue;
    }
    let list = bySeq.get(m.seq);
    if (!list) bySeq.set(m.seq, (list = []));
    list.push(m);
  }
  return { bySeq, refused };
}

function refusedAny(refused: ReadonlyMap<number, number>, what: string): void {
  for (const errno of refused.values()) throw new Error(`${what}: the kernel refused a dump (errno ${errno})`);
}

/**
 * chainUses reads a chain dump's answer straight from its datagrams (111,000
 * chains, 16 MB, at 10,000 x 10: no message object per chain): each chain of
 * `table` with its use count. The kernel's chain dump holds every chain of
 * the family (iptables-nft's tables too), whatever table was asked for.
 */
function chainUses(datagrams: readonly Buffer[], table: string): Map<string, number> {
  const out = new Map<string, number>();
  const newChain = msgType(NFT_MSG_NEWCHAIN);
  const tableName = Buffer.from(`${table}\0`, 'latin1');
  for (const d of datagrams) {
    for (let off = 0; off + NLMSG_HDRLEN <= d.length;) {
      const len = d.readUInt32LE(off);
      if (len < NLMSG_HDRLEN || off + len > d.length) throw new Error(`malformed netlink message at byte ${off} of a chain dump`);
      const type = d.readUInt16LE(off + 4);
      if (type === NLMSG_ERROR) {
        const errno = -d.readInt32LE(off + NLMSG_HDRLEN);
        if (errno !== 0) throw new Error(`listing chains: the kernel refused the dump (errno ${errno})`);
      } else if (type === newChain) {
        const c = chainOf(d.subarray(off + NLMSG_HDRLEN, off + len), tableName);
        if (c) out.set(c.name, c.use);
      }
      off += (len + 3) & ~3;
    }
  }
  return out;
}

/**
 * chainOf reads NFTA_CHAIN_NAME and NFTA_CHAIN_USE from a dumped
 * chain of `table` (its name NUL-terminated; null for another table's) in place (no map of attributes per chain: a dump of
 * 10,000 Services x 10 endpoints holds 111,000 chains).
 */
function chainOf(body: Buffer, table: Buffer): { name: string; use: number } | null {
  let name: string | null = null;
  let use: number | null = null;
  let inTable = false;
  for (let off = 4; off + 4 <= body.length;) {
    const len = body.readUInt16LE(off);
    if (len < 4 || off + len > body.length) throw new Error(`malformed chain attribute at byte ${off}`);
    const type = body.readUInt16LE(off + 2) & 0x3fff;
    // NFTA_CHAIN_TABLE, compared as bytes (NUL included): no string made per chain for it.
    if (type === 1) inTable = len - 4 >= table.length && body.compare(table, 0, table.length, off + 4, off + 4 + table.length) === 0;
    else if (type === 3) name = strzAt(body, off, len);
    else if (type === 6 && len >= 8) use = body.readUInt32BE(off + 4);
    off += (len + 3) & ~3;
  }
  return inTable && name !== null && use !== null ? { name, use } : null;
}

/** strzAt: the NUL-terminated string payload of the attribute at `off` (of length `len`). */
function strzAt(body: Buffer, off: number, len: number): string {
  const nul = body.indexOf(0, off + 4);
  return body.toString('latin1', off + 4, nul >= 0 && nul < off + len ? nul : off + len);
}

/** lookupSets: the sets a dumped rule's lookup expressions name (NFTA_LOOKUP_SET), without decoding the rest. */
function lookupSets(m: NlMessage): string[] {
  const list = parseAttrs(m.body, 4).get(4); // NFTA_RULE_EXPRESSIONS
  if (!list) return [];
  const out: string[] = [];
  for (const [, elem] of attrList(list)) {
    const a = parseAttrs(elem);
    if (strzOf(a.get(1)) !== 'lookup') continue; // NFTA_EXPR_NAME
    const data = a.get(2); // NFTA_EXPR_DATA
    const set = data ? strzOf(parseAttrs(data).get(1)) : undefined; // NFTA_LOOKUP_SET
    if (set !== undefined) out.push(set);
  }
  return out;
}

import { afterAll, describe, expect, it } from 'vitest';
import { countSaveText, type IptablesCountRequest, type IptablesCounts } from '../../server/kernel/iptables-counts.ts';
import { countChainsXtables } from '../../server/kernel/iptables-legacy-counts.ts';
import { startNfnlPipe } from '../../server/kernel/nfnl-pipe.ts';
import { execFile } from '../../server/kernel/exec.ts';
import { tiers } from '../tiers.ts';
import { addNamespace, deleteNamespace, HARNESS_PREFIX } from './harness/netns.ts';
import { NFNL_PIPE } from './harness/nft.ts';

/**
 * The helper's reader of legacy x_tables (request 'X': the table from the
 * kernel in one getsockopt, its chains counted in place) must count what
 * iptables-legacy-save lists: every chain with its rules (no policy, no
 * chain head, no RETURN foot), in both families, and for the chains no one
 * owns the chains their rules jump or go to. Tables with kproxy-like chains
 * (a Service with 2,000 endpoints) and another program's rules.
 */

const made: string[] = [];
afterAll(async () => {
  for (const ns of made.splice(0)) await deleteNamespace(ns);
});

/** restoreInput: a kube-proxy-like nat table with `endpoints` endpoint chains, and Docker-like rules in nat and filter. */
function restoreInput(endpoints: number, six: boolean): string {
  const ip = (i: number) => (six ? `fd00::${i.toString(16)}` : `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
  const L = [
    '*nat',
    ':PREROUTING ACCEPT [0:0]',
    ':OUTPUT ACCEPT [0:0]',
    ':POSTROUTING ACCEPT [0:0]',
    ':KUBE-SERVICES - [0:0]',
    ':KUBE-SVC-BIG - [0:0]',
    ':KUBE-MARK-MASQ - [0:0]',
    ':DOCKER - [0:0]',
    ':EMPTY - [0:0]',
  ];
  for (let i = 0; i < endpoints; i++) L.push(`:KUBE-SEP-${String(i).padStart(8, '0')} - [0:0]`);
  L.push('-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES');
  L.push('-A OUTPUT -j KUBE-SERVICES', '-A OUTPUT -j DOCKER', '-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER');
  L.push('-A DOCKER -i docker0 -j RETURN', '-A DOCKER -p tcp --dport 8080 -j KUBE-SVC-BIG');
  L.push(`-A KUBE-SERVICES -d ${six ? 'fd00:96::1/128' : '10.96.0.1/32'} -p tcp -m tcp --dport 80 -j KUBE-SVC-BIG`);
  L.push('-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000');
  for (let i = 0; i < endpoints; i++) {
    const sep = `KUBE-SEP-${String(i).padStart(8, '0')}`;
    L.push(`-A KUBE-SVC-BIG -m statistic --mode random --probability ${(1 / (endpoints - i)).toFixed(10)} -j ${sep}`);
    L.push(`-A ${sep} -s ${ip(i)} -j KUBE-MARK-MASQ`, `-A ${sep} -p tcp -m tcp -j DNAT --to-destination ${six ? `[${ip(i)}]` : ip(i)}:8080`);
  }
  L.push('COMMIT', '*filter', ':INPUT ACCEPT [0:0]', ':FORWARD DROP [0:0]', ':OUTPUT ACCEPT [0:0]', ':KUBE-FORWARD - [0:0]', ':DOCKER-USER - [0:0]');
  L.push('-A FORWARD -j DOCKER-USER', '-A FORWARD -j KUBE-FORWARD', '-A FORWARD -j ACCEPT', '-A DOCKER-USER -j RETURN', '-A KUBE-FORWARD -m mark --mark 0x4000/0x4000 -j ACCEPT', 'COMMIT');
  return L.join('\n') + '\n';
}

/** plain: counts as plain data, chains in name order. */
function plain(c: IptablesCounts<string>) {
  const out: Record<string, { chains: [string, number][]; jumps: Record<string, Record<string, number>> }> = {};
  for (const [t, x] of c.tables) {
    const chains = x.names.map((n, i): [string, number] => [n, x.counts[i]]).sort((a, b) => (a[0] < b[0] ? -1 : 1));
    const jumps: Record<string, Record<string, number>> = {};
    for (const [from, m] of [...x.jumps].sort((a, b) => (a[0] < b[0] ? -1 : 1))) jumps[from] = Object.fromEntries([...m].sort((a, b) => (a[0] < b[0] ? -1 : 1)));
    out[t] = { chains, jumps };
  }
  return out;
}

describe.skipIf(!tiers().kernel.ok)('counting legacy x_tables in the helper', () => {
  for (const six of [false, true]) {
    it(`counts what ${six ? 'ip6' : 'ip'}tables-legacy-save lists: rules per chain, and the jumps of the chains no one owns`, async () => {
      const ns = `${HARNESS_PREFIX}xtcount-${six ? 6 : 4}`;
      await addNamespace(ns);
      made.push(ns);
      const bin = six ? 'ip6tables' : 'iptables';
      const r = await execFile('ip', ['netns', 'exec', ns, `${bin}-legacy-restore`], { stdin: restoreInput(2000, six), timeoutMs: 120_000 });
      expect(r.stderr).toBe('');
      const save = await execFile('ip', ['netns', 'exec', ns, `${bin}-legacy-save`], { timeoutMs: 60_000, maxOutputBytes: 1 << 30 });
      // kproxy owns the KUBE- chains: for the others (built-in, Docker's) the jumps are read.
      const ask: IptablesCountRequest<string> = { tables: ['nat', 'filter', 'mangle'], own: (t, c) => (c.startsWith('KUBE-') ? `${t}/${c}` : undefined) };
      const fromText = countSaveText(save.stdout, ask, `${bin}-legacy-save`);
      const pipe = await startNfnlPipe(NFNL_PIPE, { prefix: ['ip', 'netns', 'exec', ns] });
      let fromHelper: IptablesCounts<string>;
      try {
        fromHelper = await countChainsXtables(pipe, six ? 'IPv6' : 'IPv4', ask);
      } finally {
        pipe.close();
      }
      expect(fromHelper.kind).toBe('rules');
      expect(plain(fromHelper)).toEqual(plain(fromText));
      // Spot checks against what the input wrote.
      const nat = plain(fromHelper).nat;
      expect(nat.chains.find(([n]) => n === 'KUBE-SVC-BIG')?.[1]).toBe(2000);
      expect(nat.chains.find(([n]) => n === 'EMPTY')?.[1]).toBe(0);
      expect(nat.chains.find(([n]) => n === 'PREROUTING')?.[1]).toBe(2);
      expect(nat.jumps.OUTPUT).toEqual({ DOCKER: 1, 'KUBE-SERVICES': 1 });
      expect(nat.jumps.DOCKER).toEqual({ 'KUBE-SVC-BIG': 1 });
      expect(plain(fromHelper).filter.jumps.FORWARD).toEqual({ 'DOCKER-USER': 1, 'KUBE-FORWARD': 1 });
      expect(plain(fromHelper).mangle).toBeUndefined();
    });
  }
});

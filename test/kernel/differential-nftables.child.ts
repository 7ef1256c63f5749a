/**
 * Runs inside a fresh test network namespace:
 *   ip netns exec NS node this-file CASE WRITER OUT
 * CASE is "fixed:NAME" or "seed:N" (harness/edge-cluster.ts); WRITER is
 * `netlink` (kproxy's own nf_tables batches through dist/native/nfnl-pipe) or
 * `nft` (`nft -f`). Programs the case once (a full sync) through nftables
 * mode's backend, one backend per IP family of the case as the daemon runs
 * them, verifies it as the sync loop does (Backend.verify), and writes one
 * JSON report to OUT: per family, the sync's outcome and timing, the
 * verification, and what `nft -j list table` lists afterwards.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { realClock } from '../../server/clock.ts';
import { hostInterfaces } from '../../server/kernel/netif.ts';
import { createNftRunner, type NftRunner } from '../../server/kernel/nft.ts';
import { chooseNftRunner, type NetlinkNftRunner } from '../../server/kernel/nft-netlink.ts';
import { createLogger } from '../../server/log.ts';
import { createNftablesBackend } from '../../server/proxy/nftables/proxier.ts';
import { KUBE_PROXY_TABLE } from '../../server/proxy/nftables/names.ts';
import { nftFamilyOf } from '../../server/proxy/nftables/builder.ts';
import { testConfig } from '../../server/proxy/nftables/testing.ts';
import { clusterCIDRs, nodeIPs } from './harness/edge-cluster.ts';
import { edgeCaseById } from './harness/edge-run.ts';
import { NFNL_PIPE, type NftFamilyRun } from './harness/nft.ts';
import { stateFromObjects } from '../../server/proxy/testing.ts';

const [id, writer, out] = process.argv.slice(2) as [string, 'netlink' | 'nft', string];
const c = edgeCaseById(id);
// The node's InternalIPs on an interface of the namespace: nftables mode answers node ports on them (--nodeport-addresses primary).
execFileSync('ip', ['link', 'set', 'lo', 'up']);
for (const ip of nodeIPs(c)) execFileSync('ip', ['addr', 'add', `${ip}/${ip.includes(':') ? 128 : 32}`, 'dev', 'lo']);
const logs: string[] = [];
const logger = createLogger({ level: 'info', write: (l) => logs.push(l) });
const nft = createNftRunner();
const runner: NftRunner = writer === 'nft' ? nft : await chooseNftRunner({ backend: 'netlink', fallback: nft, logger, path: NFNL_PIPE });
const runs: NftFamilyRun[] = [];
try {
  for (const family of c.families) {
    const backend = createNftablesBackend({
      config: testConfig({ mode: 'nftables', clusterCIDRs: clusterCIDRs(c) }),
      nodeName: c.node,
      family,
      runner,
      netif: hostInterfaces(),
      clock: realClock,
      logger,
    });
    await backend.init!();
    const state = stateFromObjects(c.node, c.objects, undefined, family);
    const t0 = performance.now();
    const r = await backend.sync({ state: state.checkout(), forceFull: true });
    const ms = performance.now() - t0;
    const v = r.error ? null : await backend.verify!();
    // A refused first sync leaves no table: the report says why, listing nothing.
    const listing = r.error ? '' : execFileSync('nft', ['-j', 'list', 'table', nftFamilyOf(family), KUBE_PROXY_TABLE], { encoding: 'utf8', maxBuffer: 1 << 30 });
    const netlink = writer === 'netlink' ? (runner as NetlinkNftRunner).lastRun() : null;
    runs.push({
      family,
      error: r.error?.message ?? null,
      skipped: Object.fromEntries(r.skippedServicePorts ?? []),
      invalid: Object.fromEntries(state.invalid),
      ms,
      applyMs: r.applyMs,
      lines: r.linesWritten,
      bytes: r.bytesWritten,
      // What actually wrote the transaction: the netlink runner hands what it cannot encode to nft -f.
      wroteWith: netlink ? `${netlink.writer}${netlink.why ? ` (${netlink.why})` : ''}` : 'nft',
      verify: v,
      listing,
    });
  }
} finally {
  (runner as Partial<NetlinkNftRunner>).close?.();
}
writeFileSync(out, JSON.stringify({ runs, logs: logs.slice(-50) }));

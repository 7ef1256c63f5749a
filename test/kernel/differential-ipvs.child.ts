/**
 * Runs inside a fresh test network namespace:
 *   ip netns exec NS node this-file CASE SHIM.so OUT
 * CASE is "fixed:NAME" or "seed:N" (harness/edge-cluster.ts). Programs the
 * case once (a full sync per IP family) through IPVS mode's backend with the
 * real writers this kernel lets run: `ipset restore` and
 * `iptables-nft-restore` (ip6tables for IPv6) for real, `ipvsadm -R` for real
 * behind the IPVS shim (ipvs-shim/ipvs-sockopt-shim.c: this kernel has no
 * ip_vs; the shim speaks IPv4 only, so IPv6 virtual servers go to the
 * simulated IPVS), kube-ipvs0 and sysctls simulated. Writes one JSON report
 * to OUT: per family the sync's outcome and `iptables-save`, then `ipset
 * save` and the real `ipvsadm -Sn`.
 *
 * Without ip_vs the kernel has no `-m ipvs` match: the rules using it
 * (KUBE-IPVS-OUT-FILTER: an LB whose source ranges leave the node out) are
 * taken out of the iptables input and reported, so the rest can be compared.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { FakeClock } from '../../server/clock-fake.ts';
import { execFile, type ExecFn } from '../../server/kernel/exec.ts';
import { createIpsetRunner } from '../../server/kernel/ipset.ts';
import { createIptablesRunner, type IptablesRunner } from '../../server/kernel/iptables.ts';
import { createIpvsRunner } from '../../server/kernel/ipvs.ts';
import { SimulatedIpvs } from '../../server/kernel/ipvs-simulated.ts';
import { SimulatedNetlink } from '../../server/kernel/netlink-simulated.ts';
import { SimulatedSysctl } from '../../server/kernel/sysctl-simulated.ts';
import { createLogger } from '../../server/log.ts';
import { createIpvsBackend } from '../../server/proxy/ipvs/proxier.ts';
import { ipvsSysctls } from '../../server/proxy/ipvs/sysctls.ts';
import { ipvsConfig } from '../../server/proxy/ipvs/testing.ts';
import { clusterCIDRs } from './harness/edge-cluster.ts';
import { edgeCaseById, edgeLinks, type FamilyRun } from './harness/edge-run.ts';
import { stateFromObjects } from '../../server/proxy/testing.ts';

const [id, shim, out] = process.argv.slice(2);
const c = edgeCaseById(id);
const dir = join(out, '..');
const state = join(dir, 'ipvs-table');
const env = { ...process.env, LD_PRELOAD: shim, KPT_IPVS_SHIM_STATE: state, KPT_IPVS_SHIM_LOG: join(dir, 'ipvs-log') };
const shimmed: ExecFn = (file, args, opts) => execFile(file, args, { ...opts, env });
const hasIpvs = existsSync('/proc/net/ip_vs');

/** withoutIpvsMatch: the real runner, given restore input without the lines that use `-m ipvs` (kept in `stripped`). */
function withoutIpvsMatch(runner: IptablesRunner, stripped: string[]): IptablesRunner {
  if (hasIpvs) return runner;
  return {
    family: runner.family,
    flavor: runner.flavor,
    hasRandomFully: runner.hasRandomFully,
    restore: (input, opts) =>
      runner.restore(
        input
          .split('\n')
          .filter((l) => !(l.includes(' -m ipvs ') && stripped.push(l)))
          .join('\n'),
        opts,
      ),
    save: (opts) => runner.save(opts),
    ensureChain: (t, c) => runner.ensureChain(t, c),
    chainExists: (t, c) => runner.chainExists(t, c),
    checkRule: (t, c, a) => runner.checkRule(t, c, a),
    insertRule: (t, c, a) => runner.insertRule(t, c, a),
    deleteRule: (t, c, a) => runner.deleteRule(t, c, a),
    flushChain: (t, c) => runner.flushChain(t, c),
    deleteChain: (t, c) => runner.deleteChain(t, c),
  };
}

const logs: string[] = [];
const ipset = createIpsetRunner();
const netlink = new SimulatedNetlink(edgeLinks(c));
const ipvs6 = new SimulatedIpvs();
const runs: (FamilyRun & { stripped: string[] })[] = [];
for (const family of c.families) {
  const stripped: string[] = [];
  const iptables = withoutIpvsMatch(await createIptablesRunner({ family, flavor: 'nft' }), stripped);
  const backend = createIpvsBackend({
    config: ipvsConfig({ clusterCIDRs: clusterCIDRs(c) }),
    nodeName: c.node,
    family,
    ipvs: family === 'IPv4' ? createIpvsRunner({ exec: shimmed }) : ipvs6,
    ipset,
    netlink,
    iptables,
    sysctl: new SimulatedSysctl(Object.fromEntries(ipvsSysctls(false, '6.1.0').map((x) => [x.name, '0']))),
    clock: new FakeClock(),
    logger: createLogger({ level: 'info', write: (l) => logs.push(l) }),
    kernelRelease: '6.1.0',
    cleanup: async () => ({ removed: {}, errors: [] }),
  });
  await backend.init!();
  const s = stateFromObjects(c.node, c.objects, undefined, family);
  const t0 = performance.now();
  const r = await backend.sync({ state: s.checkout(), forceFull: true });
  const ms = performance.now() - t0;
  const save = execFileSync(`${family === 'IPv6' ? 'ip6tables' : 'iptables'}-nft-save`, { encoding: 'utf8', maxBuffer: 1 << 30 });
  runs.push({
    family,
    error: r.error?.message ?? null,
    skipped: Object.fromEntries(r.skippedServicePorts ?? []),
    invalid: Object.fromEntries(s.invalid),
    ms,
    applyMs: r.applyMs,
    lines: r.linesWritten,
    bytes: r.bytesWritten,
    save,
    stripped,
  });
}
const sets = execFileSync('ipset', ['save'], { encoding: 'utf8', maxBuffer: 1 << 30 });
const ipvsadm = c.families.includes('IPv4') ? execFileSync('ipvsadm', ['-S', '-n'], { encoding: 'utf8', env, maxBuffer: 1 << 30 }) : '';
const shimLog = existsSync(env.KPT_IPVS_SHIM_LOG) ? readFileSync(env.KPT_IPVS_SHIM_LOG, 'utf8') : '';
writeFileSync(out, JSON.stringify({ runs, sets, ipvsadm, refused: shimLog.split('\n').filter((l) => l.includes('-> error')), hasIpvs, logs: logs.slice(-50) }));

/**
 * Runs inside a fresh test network namespace:
 *   ip netns exec NS node this-file CASE FLAVOR OUT
 * CASE is "fixed:NAME" or "seed:N" (harness/edge-cluster.ts). Programs the
 * case once (a full sync) through iptables mode's backend with the real
 * iptables-restore of FLAVOR, one backend per IP family of the case, as the
 * daemon would, and writes one JSON report to OUT: per family, the sync's
 * outcome and timing and what `iptables-save` (`ip6tables-save`) then lists.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { realClock } from '../../server/clock.ts';
import { createIptablesRunner, type IptablesFlavor } from '../../server/kernel/iptables.ts';
import { hostInterfaces } from '../../server/kernel/netif.ts';
import { procSysctl } from '../../server/kernel/sysctl.ts';
import { createLogger } from '../../server/log.ts';
import { createIptablesBackend } from '../../server/proxy/iptables/proxier.ts';
import { testConfig } from '../../server/proxy/iptables/testing.ts';
import { clusterCIDRs } from './harness/edge-cluster.ts';
import { edgeCaseById, type FamilyRun } from './harness/edge-run.ts';
import { stateFromObjects } from '../../server/proxy/testing.ts';

const [id, flavor, out] = process.argv.slice(2) as [string, IptablesFlavor, string];
const c = edgeCaseById(id);
const logs: string[] = [];
const runs: FamilyRun[] = [];
for (const family of c.families) {
  const runner = await createIptablesRunner({ family, flavor });
  const backend = createIptablesBackend({
    config: testConfig({ clusterCIDRs: clusterCIDRs(c) }),
    nodeName: c.node,
    family,
    runner,
    netif: hostInterfaces(),
    sysctl: procSysctl(),
    clock: realClock,
    logger: createLogger({ level: 'info', write: (l) => logs.push(l) }),
  });
  await backend.init!();
  const state = stateFromObjects(c.node, c.objects, undefined, family);
  const t0 = performance.now();
  const r = await backend.sync({ state: state.checkout(), forceFull: true });
  const ms = performance.now() - t0;
  const save = execFileSync(`${family === 'IPv6' ? 'ip6tables' : 'iptables'}-${flavor}-save`, { encoding: 'utf8', maxBuffer: 1 << 30 });
  runs.push({
    family,
    error: r.error?.message ?? null,
    skipped: Object.fromEntries(r.skippedServicePorts ?? []),
    invalid: Object.fromEntries(state.invalid),
    ms,
    applyMs: r.applyMs,
    lines: r.linesWritten,
    bytes: r.bytesWritten,
    save,
  });
}
writeFileSync(out, JSON.stringify({ runs, logs: logs.slice(-50) }));

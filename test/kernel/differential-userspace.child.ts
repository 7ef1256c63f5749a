/**
 * Runs inside a fresh test network namespace:
 *   ip netns exec NS node this-file CASE FLAVOR OUT
 * CASE is "fixed:NAME" or "seed:N" (harness/edge-cluster.ts). Gives the
 * namespace the case's node address (on lo), then programs the case once
 * (a full sync) through the userspace mode's backend with the real
 * iptables-restore of FLAVOR and real sockets (its proxy sockets and node
 * port claims, all in this namespace), for the case's primary IP family (the
 * mode's only one), and writes one JSON report to OUT: the sync's outcome and
 * timing, `iptables-save`, and the proxy sockets with their rotations.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { realClock } from '../../server/clock.ts';
import { createIptablesRunner, type IptablesFlavor } from '../../server/kernel/iptables.ts';
import { hostInterfaces } from '../../server/kernel/netif.ts';
import { hostSockets } from '../../server/kernel/sockets.ts';
import { createLogger } from '../../server/log.ts';
import { createUserspaceBackend } from '../../server/proxy/userspace/proxier.ts';
import { edgeCaseById, userspaceEdgeConfig, type UserspaceRun } from './harness/edge-run.ts';
import { NODE_IPS } from './harness/edge-cluster.ts';
import { stateFromObjects } from '../../server/proxy/testing.ts';

const [id, flavor, out] = process.argv.slice(2) as [string, IptablesFlavor, string];
const c = edgeCaseById(id);
const family = c.families[0];
execFileSync('ip', ['addr', 'add', `${NODE_IPS[family]}/${family === 'IPv6' ? 128 : 32}`, 'dev', 'lo']);
execFileSync('ip', ['link', 'set', 'lo', 'up']);
const logs: string[] = [];
const iptables = await createIptablesRunner({ family, flavor });
const backend = createUserspaceBackend({
  config: userspaceEdgeConfig(c),
  nodeName: c.node,
  family,
  iptables,
  sockets: hostSockets(),
  netif: hostInterfaces(),
  clock: realClock,
  logger: createLogger({ level: 'info', write: (l) => logs.push(l) }),
  random: () => 0,
  cleanup: async () => ({ removed: {}, errors: [] }),
});
await backend.init?.();
const state = stateFromObjects(c.node, c.objects, undefined, family);
const t0 = performance.now();
const r = await backend.sync({ state: state.checkout(), forceFull: true });
const ms = performance.now() - t0;
const save = execFileSync(`${family === 'IPv6' ? 'ip6tables' : 'iptables'}-${flavor}-save`, { encoding: 'utf8', maxBuffer: 1 << 30 });
const planned = backend.intended();
const sockets = (planned?.ids() ?? []).flatMap((pid) => planned!.port(pid)!.sockets.map((s) => ({ id: pid, pool: s.pool, port: s.port, endpoints: [...s.endpoints] })));
const run: UserspaceRun = {
  family,
  error: r.error?.message ?? null,
  skipped: Object.fromEntries(r.skippedServicePorts ?? []),
  invalid: Object.fromEntries(state.invalid),
  ms,
  applyMs: r.applyMs,
  lines: r.linesWritten,
  bytes: r.bytesWritten,
  save,
  sockets,
  bindFailures: backend.metrics.bindFailures,
};
await backend.stop?.();
writeFileSync(out, JSON.stringify({ run, logs: logs.slice(-50) }));

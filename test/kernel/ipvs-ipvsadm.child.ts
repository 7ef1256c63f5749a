/**
 * Runs inside a test network namespace with the real ipvsadm behind the IPVS
 * shim (ipvs-shim/ipvs-sockopt-shim.c): `node this-file SHIM.so STATE LOG`.
 * Drives the IPVS backend over deploy/examples/ with the real ipvsadm runner
 * (sets, links and iptables simulated), next to a fully simulated twin fed
 * the same changes and the same clock, and prints one JSON report: after each
 * step, `ipvsadm -Sn` as the real binary prints it and as the twin holds it.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { FakeClock } from '../../server/clock-fake.ts';
import { execFile, type ExecFn } from '../../server/kernel/exec.ts';
import { SimulatedIpset } from '../../server/kernel/ipset-simulated.ts';
import { createIpvsRunner } from '../../server/kernel/ipvs.ts';
import { parseIpvsSave, renderIpvsSave } from '../../server/kernel/ipvs-listing.ts';
import { SimulatedIptables } from '../../server/kernel/iptables-simulated.ts';
import { SimulatedNetlink } from '../../server/kernel/netlink-simulated.ts';
import { SimulatedSysctl } from '../../server/kernel/sysctl-simulated.ts';
import { createLogger } from '../../server/log.ts';
import { RS_CHECK_INTERVAL_MS } from '../../server/proxy/ipvs/graceful-termination.ts';
import { createIpvsBackend } from '../../server/proxy/ipvs/proxier.ts';
import { ipvsSysctls } from '../../server/proxy/ipvs/sysctls.ts';
import { ipvsConfig, ipvsHarness } from '../../server/proxy/ipvs/testing.ts';
import type { EndpointSlice, Service } from '../../server/proxy/kube-objects.ts';
import { objectsFromYaml, stateFromObjects } from '../../server/proxy/testing.ts';

const [shim, stateFile, logFile] = process.argv.slice(2);
const env = { ...process.env, LD_PRELOAD: shim, KPT_IPVS_SHIM_STATE: stateFile, KPT_IPVS_SHIM_LOG: logFile };
const exec: ExecFn = (file, args, opts) => execFile(file, args, { ...opts, env });
const ipvsadm = (...args: string[]) => execFileSync('ipvsadm', args, { encoding: 'utf8', env });

const root = join(import.meta.dirname, '../..');
const examples = join(root, 'deploy/examples');
const objects = readdirSync(examples)
  .filter((f) => /\.ya?ml$/.test(f))
  .sort()
  .flatMap((f) => objectsFromYaml(f, readFileSync(join(examples, f), 'utf8')));

const config = ipvsConfig({ clusterCIDRs: ['10.244.0.0/16'], ipvs: { scheduler: process.env.KPT_SCHEDULER ?? 'rr', tcpTimeoutMs: 900_000, udpTimeoutMs: 300_000 } });
const logs: string[] = [];
const clock = new FakeClock();
const ipvs = createIpvsRunner({ exec });
const backend = createIpvsBackend({
  config,
  nodeName: 'node-a',
  family: 'IPv4',
  ipvs,
  ipset: new SimulatedIpset(),
  netlink: new SimulatedNetlink(),
  iptables: new SimulatedIptables(),
  sysctl: new SimulatedSysctl(Object.fromEntries(ipvsSysctls(false, '6.1.0').map((s) => [s.name, '0']))),
  clock,
  logger: createLogger({ level: 'debug', write: (l) => logs.push(l) }),
  kernelRelease: '6.1.0',
  cleanup: async () => ({ removed: {}, errors: [] }),
});
const twin = ipvsHarness({ config });
const state = stateFromObjects('node-a', objects, clock);
const twinState = stateFromObjects('node-a', objects);

/** setShimConnections sets a real server's connection counts in the shim's table file (the D line under its S line). */
function setShimConnections(svc: string, dest: string, active: number, inactive: number): void {
  const lines = readFileSync(stateFile, 'utf8').split('\n');
  let inSvc = false;
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].startsWith('S ')) inSvc = lines[i].startsWith(svc);
    else if (inSvc && lines[i].startsWith(dest)) {
      const f = lines[i].split(' ');
      f[5] = String(active);
      f[6] = String(inactive);
      lines[i] = f.join(' ');
    }
  }
  writeFileSync(stateFile, lines.join('\n'));
}

/** canonical re-renders a listing in kproxy's order: ipvsadm 1.31 sorts by a difference that wraps past 2^31 (10.x after 192.x). */
const canonical = (text: string) => renderIpvsSave(parseIpvsSave(text));

async function step(name: string, forceFull = false) {
  const r = await backend.sync({ state: state.checkout(), forceFull });
  const t = await twin.backend.sync({ state: twinState.checkout(), forceFull });
  return {
    name,
    full: r.full,
    error: r.error?.message ?? null,
    twinError: t.error?.message ?? null,
    batch: r.batch ?? '',
    save: canonical(ipvsadm('-S', '-n')),
    rawSave: ipvsadm('-S', '-n'),
    twinSave: twin.ipvs.saveText(),
    draining: backend
      .draining()
      .map((d) => `${d.rs.address}:${d.rs.port}`)
      .sort(),
    twinDraining: twin.backend
      .draining()
      .map((d) => `${d.rs.address}:${d.rs.port}`)
      .sort(),
  };
}

await backend.init!();
await twin.backend.init!();
const steps = [await step('full', true)];

// shop/api loses one endpoint: its TCP real servers drain with weight 0.
const apiSlice = objects.find((o) => o.kind === 'EndpointSlice' && o.metadata?.name?.startsWith('api-')) as EndpointSlice;
const shrunk: EndpointSlice = { ...apiSlice, endpoints: apiSlice.endpoints!.slice(0, 1) };
for (const s of [state, twinState]) s.onEndpointSlice(apiSlice, shrunk);
steps.push(await step('drain'));

// One draining real server still has connections; the shim's table gets them like the twin's.
const gone = apiSlice.endpoints?.[1]?.addresses?.[0] ?? '';
setShimConnections('S tcp 10.96.10.20 80 ', `D ${gone} 8080 `, 2, 3);
twin.ipvs.setConnections('10.96.10.20:80/TCP', `${gone}:8080`, 2, 3);
clock.advance(RS_CHECK_INTERVAL_MS);
twin.clock.advance(RS_CHECK_INTERVAL_MS);
steps.push(await step('sweep'));

// ClientIP affinity on shop/frontend: its virtual server is edited in place.
const frontend = objects.find((o) => o.kind === 'Service' && o.metadata?.name === 'frontend') as Service;
const sticky: Service = { ...frontend, spec: { ...frontend.spec, sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 900 } } } };
for (const s of [state, twinState]) s.onService(frontend, sticky);
steps.push(await step('affinity'));

// kube-dns goes away: its virtual servers are deleted.
const dns = objects.find((o) => o.kind === 'Service' && o.metadata?.name === 'kube-dns') as Service;
for (const s of [state, twinState]) s.onService(dns, null);
steps.push(await step('delete'));

// A full sync afterwards finds nothing to change.
steps.push(await step('full-again', true));

// Traffic counters and connection counts as the real ipvsadm lists them.
const frontendRS = readFileSync(stateFile, 'utf8').match(/^D 10\.244\.0\.11 8080 .*$/m)![0];
writeFileSync(stateFile, readFileSync(stateFile, 'utf8').replace(frontendRS, 'D 10.244.0.11 8080 0 1 4 9 1234 56789 45678 98765432 123456789012'));
const stats = await ipvs.stats();
const list = await ipvs.list();

process.stdout.write(
  JSON.stringify({
    steps,
    stats: Object.fromEntries([...stats].map(([k, v]) => [k, { counters: v.counters, reals: Object.fromEntries(v.reals) }])),
    list: list.map((s) => ({
      key: `${s.address}:${s.port}/${s.protocol}`,
      reals: s.reals.map((r) => ({ key: `${r.address}:${r.port}`, weight: r.weight, active: r.activeConns, inactive: r.inactiveConns })),
    })),
    shimLog: readFileSync(logFile, 'utf8'),
    logs,
  }),
);

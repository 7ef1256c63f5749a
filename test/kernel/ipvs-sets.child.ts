/**
 * Runs inside a test network namespace (ip netns exec NS node this-file FLAVOR):
 * programs deploy/examples/ in IPVS mode with the real ipset and iptables
 * (FLAVOR) of the namespace, the IPVS table and kube-ipvs0 simulated (this
 * kernel may have neither ip_vs nor the dummy link type), next to a fully
 * simulated twin fed the same changes. Prints one JSON report: what the
 * kernel holds after each step (ipset save, iptables-save) and what the twin holds.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { FakeClock } from '../../server/clock-fake.ts';
import { createIpsetRunner } from '../../server/kernel/ipset.ts';
import { SimulatedIpvs } from '../../server/kernel/ipvs-simulated.ts';
import { createIptablesRunner, type IptablesFlavor } from '../../server/kernel/iptables.ts';
import { SimulatedNetlink } from '../../server/kernel/netlink-simulated.ts';
import { SimulatedSysctl } from '../../server/kernel/sysctl-simulated.ts';
import { createLogger } from '../../server/log.ts';
import { cleanupIptables } from '../../server/proxy/xtables/cleanup.ts';
import { cleanupIpvs } from '../../server/proxy/ipvs/cleanup.ts';
import { createIpvsBackend } from '../../server/proxy/ipvs/proxier.ts';
import { ipvsConfig, ipvsHarness } from '../../server/proxy/ipvs/testing.ts';
import type { EndpointSlice, Service } from '../../server/proxy/kube-objects.ts';
import { objectsFromYaml, stateFromObjects } from '../../server/proxy/testing.ts';

const flavor = process.argv[2] as IptablesFlavor;
const root = join(import.meta.dirname, '../..');
const examples = join(root, 'deploy/examples');
const objects = readdirSync(examples)
  .filter((f) => /\.ya?ml$/.test(f))
  .sort()
  .flatMap((f) => objectsFromYaml(f, readFileSync(join(examples, f), 'utf8')));
// shop/web's source ranges leave the node out, which needs the ipvs match (-m ipvs) in
// KUBE-IPVS-OUT-FILTER; that match exists only with ip_vs. Let the node in, so the
// sync uses KUBE-LOAD-BALANCER-SOURCE-IP instead; the -m ipvs rule is checked apart below.
const web = objects.find((o) => o.kind === 'Service' && o.metadata?.name === 'web') as Service;
web.spec!.loadBalancerSourceRanges = [...(web.spec!.loadBalancerSourceRanges ?? []), '10.0.0.0/24'];

const config = ipvsConfig({ clusterCIDRs: ['10.244.0.0/16'] });
const logs: string[] = [];
const logger = createLogger({ level: 'debug', write: (l) => logs.push(l) });
const clock = new FakeClock();
const ipset = createIpsetRunner();
const iptables = await createIptablesRunner({ family: 'IPv4', flavor });
const ipvs = new SimulatedIpvs();
const netlink = new SimulatedNetlink();
const backend = createIpvsBackend({
  config,
  nodeName: 'node-a',
  family: 'IPv4',
  ipvs,
  ipset,
  netlink,
  iptables,
  sysctl: new SimulatedSysctl({}),
  clock,
  logger,
  cleanup: async () => ({ removed: {}, errors: [] }),
});
const twin = ipvsHarness({ config });
const state = stateFromObjects('node-a', objects, clock);
const twinState = stateFromObjects('node-a', objects);
const saveSets = () => execFileSync('ipset', ['save'], { encoding: 'utf8' });
const saveRules = () => execFileSync(`iptables-${flavor}-save`, { encoding: 'utf8' });

async function step(forceFull: boolean) {
  const r = await backend.sync({ state: state.checkout(), forceFull });
  const t = await twin.backend.sync({ state: twinState.checkout(), forceFull });
  return { full: r.full, error: r.error?.message ?? null, twinError: t.error?.message ?? null, batch: r.batch ?? '', sets: saveSets(), twinSets: twin.ipset.saveText(), rules: saveRules() };
}

const full = await step(true);

// A partial sync: shop/api loses its endpoints and shop/cache goes away.
const apiSlice = objects.find((o) => o.kind === 'EndpointSlice' && o.metadata?.name?.startsWith('api-')) as EndpointSlice;
const cache = objects.find((o) => o.kind === 'Service' && o.metadata?.namespace === 'shop' && o.metadata?.name === 'cache') as Service | undefined;
for (const s of [state, twinState]) {
  s.onEndpointSlice(apiSlice, null);
  if (cache) s.onService(cache, null);
}
const partial = await step(false);

// Cleanup: the iptables rules first (they match the sets), then the sets.
const iptablesCleanup = await cleanupIptables({ runners: [iptables], logger });
const ipvsCleanup = await cleanupIpvs({ ipvs, ipset, netlink, logger });
const again = await cleanupIpvs({ ipvs, ipset, netlink, logger });
const afterCleanup = { sets: saveSets(), rules: saveRules() };

// The one rule left out above: KUBE-IPVS-OUT-FILTER's ipvs match needs xt_ipvs (ip_vs).
let ipvsMatch: string | null = null;
try {
  execFileSync(`iptables-${flavor}-restore`, ['--noflush'], {
    input: '*filter\n:KPT-IPVS-MATCH - [0:0]\n-A KPT-IPVS-MATCH -s 192.0.2.10 -m ipvs --vaddr 192.0.2.10 --vproto tcp --vport 443 -j DROP\nCOMMIT\n',
    stdio: ['pipe', 'pipe', 'pipe'],
  });
} catch (err) {
  ipvsMatch = String((err as { stderr?: Buffer }).stderr ?? err);
}

process.stdout.write(
  JSON.stringify({
    full,
    partial,
    iptablesCleanup: { removed: iptablesCleanup.removed, errors: iptablesCleanup.errors.map((e) => e.message) },
    ipvsCleanup: { removed: ipvsCleanup.removed, errors: ipvsCleanup.errors.map((e) => e.message) },
    again: { removed: again.removed, errors: again.errors.map((e) => e.message) },
    afterCleanup,
    ipvsMatch,
    hasIpvs: existsSync('/proc/net/ip_vs'),
    logs,
  }),
);

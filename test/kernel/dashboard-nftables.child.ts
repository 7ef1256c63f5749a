/**
 * Runs inside a test network namespace (ip netns exec NS node this-file):
 * programs deploy/examples/ into the ip kube-proxy table with the real nft
 * runner (a full sync, then a partial one: an endpoint slice removed) and asks
 * the dashboard's nftables view what the kernel holds and what drifted: right
 * after the syncs, then after someone deleted a map element, added a rule with
 * a counter to a chain of kproxy's, and added a chain of their own. Prints one
 * JSON report.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { realClock } from '../../server/clock.ts';
import { findDrift } from '../../server/dashboard/drift.ts';
import { NftablesView } from '../../server/dashboard/nftables/view.ts';
import { noYield } from '../../server/dashboard/yield.ts';
import { createNftRunner } from '../../server/kernel/nft.ts';
import { hostInterfaces } from '../../server/kernel/netif.ts';
import { createLogger } from '../../server/log.ts';
import type { BackendSyncResult } from '../../server/proxy/backend.ts';
import type { EndpointSlice } from '../../server/proxy/kube-objects.ts';
import { createNftablesBackend } from '../../server/proxy/nftables/proxier.ts';
import { testConfig } from '../../server/proxy/nftables/testing.ts';
import type { SyncRecord } from '../../server/proxy/sync-loop.ts';
import { categorizeEndpoints } from '../../server/proxy/topology.ts';
import { objectsFromYaml, stateFromObjects } from '../../server/proxy/testing.ts';

const examples = join(import.meta.dirname, '../../deploy/examples');
const objects = readdirSync(examples)
  .filter((f) => /\.ya?ml$/.test(f))
  .sort()
  .flatMap((f) => objectsFromYaml(f, readFileSync(join(examples, f), 'utf8')));
const state = stateFromObjects('node-a', objects);
const runner = createNftRunner();
const backend = createNftablesBackend({
  config: testConfig({ mode: 'nftables', clusterCIDRs: ['10.244.0.0/16'] }),
  nodeName: 'node-a',
  family: 'IPv4',
  runner,
  netif: hostInterfaces(),
  clock: realClock,
  logger: createLogger({ write: () => {} }),
});
await backend.init!();
const view = new NftablesView({ backend, simulated: false, pause: noYield });
let seq = 0;
const note = (r: BackendSyncResult) => view.noteSync({ seq: ++seq, ok: !r.error, finishedAt: Date.now() } as SyncRecord, r);
const errors: string[] = [];
const synced = (r: BackendSyncResult) => {
  if (r.error) errors.push(r.error.message);
  note(r);
};

synced(await backend.sync({ state: state.checkout(), forceFull: true }));
const slice = objects.find((o) => o.kind === 'EndpointSlice' && o.metadata?.name?.startsWith('api-')) as EndpointSlice;
state.onEndpointSlice(slice, null);
const partial = await backend.sync({ state: state.checkout(), forceFull: false });
synced(partial);

const drift = async () => findDrift((await view.intended())!, await view.read(), view, noYield);
const clean = await drift();

const listed = (await view.read()).tables.get('kube-proxy')!;
const c = state.checkout();
const web = [...c.services.values()].find((s) => s.serviceName === 'web')!;
const eps = c.endpoints.get(web.id) ?? [];
const flows = view.servicePort(web, eps, categorizeEndpoints(eps, web, 'node-a', '')).flows;
const svc = flows[0].path.at(-1)!;

const nft = (script: string) => execFileSync('nft', ['-f', '-'], { input: script });
nft([`delete element ip kube-proxy cluster-ips { ${web.clusterIP} }`, `insert rule ip kube-proxy ${svc} counter packets 12 bytes 720`, 'add chain ip kube-proxy by-hand'].join('\n') + '\n');
const after = await view.read();
const tampered = await drift();

process.stdout.write(
  JSON.stringify({
    errors,
    partial: { full: partial.full },
    clean,
    chains: [...listed.chains.keys()],
    services: listed.chains.get('services')!.rules.map((r) => [r.spec, r.target]),
    serviceIps: listed.chains.get('@service-ips')!.rules.map((r) => r.spec),
    flows,
    counted: after.tables.get('kube-proxy')!.chains.get(svc)!,
    tampered,
    intendedChains: (await view.intended())!.chainCount,
    svc,
    clusterIP: web.clusterIP,
  }),
);

/**
 * Runs inside a test network namespace (ip netns exec NS node this-file FLAVOR):
 * programs 120 services with the real iptables runner, then partial syncs
 * that add, remove and change services (KUBE-SERVICES, KUBE-NODEPORTS and the
 * filter chains are edited in place with -D/-I), then a full sync of the same
 * state. Prints one JSON report: each partial batch, iptables-save after the
 * partial syncs and after the full one.
 */
import { execFileSync } from 'node:child_process';
import { realClock } from '../../server/clock.ts';
import { createIptablesRunner, type IptablesFlavor } from '../../server/kernel/iptables.ts';
import { hostInterfaces } from '../../server/kernel/netif.ts';
import { procSysctl } from '../../server/kernel/sysctl.ts';
import { createLogger } from '../../server/log.ts';
import { createIptablesBackend } from '../../server/proxy/iptables/proxier.ts';
import { testConfig } from '../../server/proxy/iptables/testing.ts';
import type { EndpointSlice, Service } from '../../server/proxy/kube-objects.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../../server/proxy/testing.ts';

const flavor = process.argv[2] as IptablesFlavor;
const save = () => execFileSync(`iptables-${flavor}-save`, [], { encoding: 'utf8' });
const tcp = (port: number) => [{ name: 'http', port, protocol: 'TCP' }];

function service(i: number): Service {
  const spec: NonNullable<Service['spec']> = { clusterIP: `10.96.1.${i}`, ports: [{ name: 'http', port: 80, protocol: 'TCP' }] };
  if (i % 5 === 0) Object.assign(spec, { type: 'NodePort', ports: [{ name: 'http', port: 80, protocol: 'TCP', nodePort: 30000 + i }] });
  if (i % 10 === 0) Object.assign(spec, { type: 'LoadBalancer', loadBalancerSourceRanges: ['192.0.2.0/24'], externalTrafficPolicy: i % 20 === 0 ? 'Local' : 'Cluster' });
  return makeService('ns', `s${i}`, spec, i % 10 === 0 ? { status: { loadBalancer: { ingress: [{ ip: `100.64.0.${i}` }] } } } : {});
}
const slice = (i: number, ips: string[]): EndpointSlice =>
  makeSlice(
    'ns',
    `s${i}`,
    `s${i}-1`,
    ips.map((ip) => ep(ip, { nodeName: 'node-b' })),
    tcp(8080),
  );

const services = new Map<number, Service>();
const slices = new Map<number, EndpointSlice>();
for (let i = 1; i <= 120; i++) {
  services.set(i, service(i));
  slices.set(i, slice(i, [`10.244.${i}.1`, `10.244.${i}.2`]));
}
const state = stateFromObjects('node-a', [...services.values(), ...slices.values()]);
const logs: string[] = [];
const backend = createIptablesBackend({
  config: testConfig({ clusterCIDRs: ['10.244.0.0/16'] }),
  nodeName: 'node-a',
  family: 'IPv4',
  runner: await createIptablesRunner({ family: 'IPv4', flavor }),
  netif: hostInterfaces(),
  sysctl: procSysctl(),
  clock: realClock,
  logger: createLogger({ level: 'debug', write: (l) => logs.push(l) }),
});
await backend.init!();
const brief = (r: Awaited<ReturnType<typeof backend.sync>>) => ({ full: r.full, error: r.error?.message ?? null, batch: r.batch ?? '' });
const first = brief(await backend.sync({ state: state.checkout(), forceFull: true }));

const steps: { what: string; full: boolean; error: string | null; batch: string }[] = [];
const step = async (what: string, change: () => void) => {
  change();
  steps.push({ what, ...brief(await backend.sync({ state: state.checkout(), forceFull: false })) });
};
await step('add a service', () => {
  services.set(121, service(121));
  slices.set(121, slice(121, ['10.244.121.1']));
  state.onService(null, services.get(121)!);
  state.onEndpointSlice(null, slices.get(121)!);
});
await step('remove a service', () => state.onService(services.get(7)!, null));
await step('remove a node port and a load balancer service', () => {
  state.onService(services.get(15)!, null);
  state.onService(services.get(30)!, null);
});
await step('a Local load balancer loses its endpoints (REJECT in filter)', () => state.onEndpointSlice(slices.get(40)!, null));
await step('an endpoint moves', () => state.onEndpointSlice(slices.get(50)!, slice(50, ['10.244.50.9', '10.244.50.2'])));
const afterPartial = save();
const full = brief(await backend.sync({ state: state.checkout(), forceFull: true }));
const afterFull = save();
process.stdout.write(JSON.stringify({ first, steps, afterPartial, full, afterFull, logs }));

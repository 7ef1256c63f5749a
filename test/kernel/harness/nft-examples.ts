import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { IPFamily } from '../../../server/net/ip.ts';
import type { EndpointSlice, KubeObject, Service, ServiceCIDR } from '../../../server/proxy/kube-objects.ts';
import { STALE_CHAIN_DELAY_MS } from '../../../server/proxy/nftables/proxier.ts';
import type { ProxyState } from '../../../server/proxy/proxy-state.ts';
import { parseManifest } from '../../../server/sources/file/manifest.ts';

/**
 * The example cluster (deploy/examples/) as the nftables kernel tests drive
 * it: its objects, a state fed with them, and one scenario of changes applied
 * sync after sync to two backends whose kernels are then compared (real nft
 * and the simulation; netlink and nft -f).
 */
const EXAMPLES = join(import.meta.dirname, '../../../deploy/examples');

/** exampleObjects reads the example cluster's manifests. */
export function exampleObjects(): KubeObject[] {
  return readdirSync(EXAMPLES)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .flatMap((f) => parseManifest(f, readFileSync(join(EXAMPLES, f), 'utf8')).objects.map((o) => o.object));
}

/** feed hands a state every object, then marks its sources synced. */
export function feed(state: ProxyState, objects: readonly KubeObject[]): void {
  for (const o of objects) {
    if (o.kind === 'Service') state.onService(null, o as Service);
    else if (o.kind === 'EndpointSlice') state.onEndpointSlice(null, o as EndpointSlice);
    else if (o.kind === 'ServiceCIDR') state.onServiceCIDR(null, o as ServiceCIDR);
    else if (o.kind === 'Node') state.onNode(null, o as never);
  }
  for (const k of ['Service', 'EndpointSlice', 'Node'] as const) state.onSynced(k);
}

const clone = <T>(o: T): T => JSON.parse(JSON.stringify(o)) as T;

/** Step: what happens, the change to a state, and how long before it the clock moves. */
export type Step = [string, (s: ProxyState) => void, number];

/**
 * exampleSteps: the scenario, for one family's proxier. Endpoints leave and
 * come back (their chains stale, then deleted), a Service becomes a
 * LoadBalancer with source ranges and ClientIP affinity, a namespace's
 * Services go and come back, and a second ServiceCIDR arrives (the last step,
 * a full sync: the node facts changed).
 */
export function exampleSteps(objects: readonly KubeObject[], family: IPFamily): Step[] {
  const find = (kind: string, name: string) => objects.find((o) => o.kind === kind && o.metadata?.name === name)!;
  const services = objects.filter((o): o is Service => o.kind === 'Service').filter((o) => (o.spec?.ipFamilies ?? ['IPv4']).includes(family));
  const shop = family === 'IPv4' ? services.filter((o) => o.metadata?.namespace === 'shop') : services.slice(0, 1);
  const balanced = family === 'IPv4' ? (find('Service', 'api') as Service) : services.at(-1)!;
  const more: ServiceCIDR = { apiVersion: 'networking.k8s.io/v1', kind: 'ServiceCIDR', metadata: { name: 'more' }, spec: { cidrs: ['10.97.0.0/16', 'fd00:97::/112'] } };
  return [
    ['first full sync', () => {}, 0],
    [
      'frontend loses its node-b endpoints',
      (s) => {
        const prev = find('EndpointSlice', 'frontend-abc12') as EndpointSlice | undefined;
        if (!prev) return;
        const cur = clone(prev);
        cur.endpoints = cur.endpoints!.filter((e) => e.nodeName !== 'node-b');
        s.onEndpointSlice(prev, cur);
      },
      0,
    ],
    [
      'a Service becomes a LoadBalancer with source ranges and ClientIP affinity',
      (s) => {
        const prev = balanced;
        const cur = clone(prev);
        cur.spec!.type = 'LoadBalancer';
        cur.spec!.loadBalancerSourceRanges = family === 'IPv4' ? ['198.51.100.0/25', '198.51.100.128/25', '203.0.113.7/32'] : ['2001:db8::/64', '2001:db8:1::/64'];
        cur.spec!.sessionAffinity = 'ClientIP';
        cur.status = { loadBalancer: { ingress: [{ ip: family === 'IPv4' ? '192.0.2.99' : '2001:db8:99::1' }] } };
        s.onService(prev, cur);
      },
      0,
    ],
    ['the frontend endpoints come back (their chains were stale, not yet deleted)', (s) => s.onEndpointSlice(null, find('EndpointSlice', 'frontend-abc12') as EndpointSlice), 0],
    ['a second later: stale chains deleted, nothing else', () => {}, STALE_CHAIN_DELAY_MS],
    ["a namespace's Services go", (s) => shop.forEach((o) => s.onService(o, null)), 0],
    ['and come back a second later', (s) => shop.forEach((o) => s.onService(null, o)), STALE_CHAIN_DELAY_MS],
    ['a second ServiceCIDR (a full sync: the node facts changed)', (s) => s.onServiceCIDR(null, more), 0],
  ];
}

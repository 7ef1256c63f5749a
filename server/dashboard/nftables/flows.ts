import type { NftTable } from '../../kernel/nft-types.ts';
import { endpointKey } from '../../proxy/endpoint.ts';
import * as N from '../../proxy/nftables/index.ts';
import type { ServicePort } from '../../proxy/service-port.ts';
import type { CategorizedEndpoints } from '../../proxy/topology.ts';
import type { KernelRule, OwnedChain, ServicePortObjects } from '../kernel-view.ts';
import type { FlowEntry } from '../protocol.ts';
import { setKey } from './tables.ts';

/** The maps a service port has elements in, as the Service page lists them (its elements only). */
const ENTRY_SETS = [N.SERVICE_IPS, N.SERVICE_NODEPORTS, N.FIREWALL_IPS, N.NO_ENDPOINT_SERVICES, N.NO_ENDPOINT_NODEPORTS, N.CLUSTER_IPS] as const;

/** gotoTarget: the chain a verdict ("goto service-…") goes to, else null. */
function gotoTarget(verdict: string | null | undefined): string | null {
  const m = /^(?:goto|jump) (\S+)$/.exec(verdict ?? '');
  return m ? m[1] : null;
}

/**
 * nftServicePort describes one service port's objects in what kproxy wrote
 * to table `name` (`wanted`: the proxier's table after its last successful
 * sync). The flows follow the table itself, not a second copy of the
 * builder's logic: the port's key in service-ips / service-nodeports (after
 * its firewall-ips element for a load balancer IP with source ranges) leads
 * to a chain; an external- chain ends in the policy chain its last rule goes
 * to; a port without usable endpoints has its key in no-endpoint-services /
 * no-endpoint-nodeports instead (goto reject-chain, or drop).
 */
export function nftServicePort(name: string, sp: ServicePort, cat: CategorizedEndpoints, wanted: NftTable | null): ServicePortObjects {
  const protocol = sp.protocol.toLowerCase();
  const names = N.servicePortNames(sp.namespace, sp.serviceName, protocol, sp.portName);
  const hasChain = (c: string) => wanted?.chains.has(c) ?? false;
  const element = (set: string, key: string) => wanted?.sets.get(set)?.elements.get(key);
  const ipKey = (ip: string) => `${ip} . ${protocol} . ${sp.port}`;
  const nodePortKey = `${protocol} . ${sp.nodePort}`;

  const flows: FlowEntry[] = [];
  const internalPolicy = sp.internalPolicyLocal ? 'Local' : 'Cluster';
  const externalPolicy = sp.externalPolicyLocal ? 'Local' : 'Cluster';
  const ranges = sp.loadBalancerSourceRanges.join(', ');
  const flow = (kind: FlowEntry['kind'], address: string, key: string, map: string, noEndpoints: string, policy: 'Cluster' | 'Local') => {
    const path: string[] = [];
    let note: string | undefined;
    const fw = kind === 'loadBalancerIP' ? gotoTarget(element(N.FIREWALL_IPS, key)?.value) : null;
    if (fw) {
      path.push(setKey(N.FIREWALL_IPS), fw);
      note = `only from ${ranges}; other sources are dropped by ${fw} (filter, before DNAT)`;
    }
    const el = element(map, key);
    const to = gotoTarget(el?.value);
    const refused = element(noEndpoints, key);
    if (to) {
      path.push(setKey(map), to);
      // An external- chain masquerades (or short-circuits pods and the node) and ends in an unconditional goto to
      // the policy chain; without local endpoints for a Local policy it has no such rule, and what falls through
      // (not DNATed) is dropped by the no-endpoint map in the filter chains.
      const last = wanted?.chains.get(to)?.rules.at(-1) ?? '';
      const next = to.startsWith(N.EXTERNAL_PREFIX) ? gotoTarget(/^goto \S+$/.test(last) ? last : null) : null;
      const shortCircuit = 'pods and the node itself short-circuit to the Cluster policy chain';
      if (to.startsWith(N.EXTERNAL_PREFIX) && !next && refused) {
        path.push(setKey(noEndpoints));
        flows.push({ kind, address, path, policy, outcome: 'drop', note: `externalTrafficPolicy Local and no endpoint on this node: dropped by ${setKey(noEndpoints)}; ${shortCircuit}` });
        return;
      }
      if (next) path.push(next);
      if (to.startsWith(N.EXTERNAL_PREFIX) && policy === 'Local') note = [note, shortCircuit].filter(Boolean).join('; ');
      flows.push({ kind, address, path, policy, outcome: 'endpoints', ...(note ? { note } : {}) });
      return;
    }
    if (!refused) return; // not written (a port kproxy skipped, or before the first sync)
    path.push(setKey(noEndpoints));
    if (gotoTarget(refused.value) === N.REJECT_CHAIN) {
      path.push(N.REJECT_CHAIN);
      flows.push({ kind, address, path, policy, outcome: 'reject', note: `no ready endpoints anywhere: rejected through ${N.REJECT_CHAIN} (filter, after DNAT did not happen)` });
    } else {
      const which = kind === 'clusterIP' ? 'internalTrafficPolicy' : 'externalTrafficPolicy';
      flows.push({ kind, address, path, policy, outcome: 'drop', note: `${which} Local and no endpoint on this node: dropped by ${setKey(noEndpoints)}` });
    }
  };

  const addr = (ip: string) => `${endpointKey(ip, sp.port)}/${sp.protocol}`;
  flow('clusterIP', addr(sp.clusterIP), ipKey(sp.clusterIP), N.SERVICE_IPS, N.NO_ENDPOINT_SERVICES, internalPolicy);
  if (sp.nodePort) flow('nodePort', `node:${sp.nodePort}/${sp.protocol}`, nodePortKey, N.SERVICE_NODEPORTS, N.NO_ENDPOINT_NODEPORTS, externalPolicy);
  for (const ip of sp.externalIPs) flow('externalIP', addr(ip), ipKey(ip), N.SERVICE_IPS, N.NO_ENDPOINT_SERVICES, externalPolicy);
  for (const ip of sp.loadBalancerVIPs) flow('loadBalancerIP', addr(ip), ipKey(ip), N.SERVICE_IPS, N.NO_ENDPOINT_SERVICES, externalPolicy);

  const owned: OwnedChain[] = [];
  const own = (chain: string, role: string) => {
    if (hasChain(chain)) owned.push({ table: name, chain, role });
  };
  own(names.firewall, 'firewall');
  own(names.external, 'external');
  own(names.clusterPolicy, 'service');
  own(names.localPolicy, 'local');
  const epChains = new Map<string, string>();
  const affinity: string[] = [];
  for (const ep of cat.allReachable) {
    const base = N.endpointNameBase(sp.namespace, sp.serviceName, protocol, sp.portName, ep.key);
    const chain = N.ENDPOINT_PREFIX + base;
    if (!hasChain(chain)) continue;
    epChains.set(ep.key, chain);
    own(chain, 'endpoint');
    if (wanted?.sets.has(N.AFFINITY_PREFIX + base)) affinity.push(setKey(N.AFFINITY_PREFIX + base));
  }
  for (const s of affinity) owned.push({ table: name, chain: s, role: 'affinity' });

  const keys = new Set([ipKey(sp.clusterIP), nodePortKey, sp.clusterIP, ...[...sp.externalIPs, ...sp.loadBalancerVIPs].map(ipKey)]);
  return {
    owned,
    entryChains: ENTRY_SETS.map((s) => ({ table: name, chain: setKey(s) })),
    // A map element is the port's when its key is one of the port's (the text before " : " or " comment ").
    isEntryRule: (rule: KernelRule) => keys.has(rule.spec.split(/ : | comment "/)[0]),
    flows,
    endpointObject: (key) => epChains.get(key) ?? null,
  };
}

/**
 * The IPVS mode's public file: what the composition builds the mode with and
 * cleans it up by, what the backend reports (its intent and the types in it),
 * and the names of the objects it writes (kube-proxy's: the dummy link, its
 * chains and sets, the jumps into them), which the dashboard and the tracer
 * read the kernel by. Nothing outside server/proxy imports another file of
 * this folder (the kproxy/layers rule).
 */
export { cleanupIpvsHost, createHostIpvsBackends, type DryRunIpvsKernel, type HostIpvs } from './host.ts';
export type { IpvsBackend, IpvsIntent, IpvsRunners } from './proxier.ts';
export type { WantedVirtualServer } from './builder.ts';
export type { DrainingRealServer } from './graceful-termination.ts';
export {
  DUMMY_DEVICE,
  FILTER_CHAINS,
  IPSETS,
  KUBE_IPVS_FILTER,
  KUBE_LOAD_BALANCER,
  KUBE_NODE_PORT,
  KUBE_POSTROUTING,
  KUBE_PROXY_FIREWALL,
  KUBE_SERVICES,
  KUBE_SOURCE_RANGES_FIREWALL,
  NAT_CHAINS,
  setName,
  setSpec,
  type IpsetInfo,
  type SetKey,
} from './names.ts';
export { JUMP_RULES } from './iptables-rules.ts';

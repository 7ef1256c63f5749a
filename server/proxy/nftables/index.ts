/**
 * The nftables mode's public file: what the composition builds the mode with
 * and cleans it up by, what the backend reports (its intended table), and the
 * names of kube-proxy's table, chains, sets and maps, which the dashboard and
 * the tracer read the kernel by. Nothing outside server/proxy imports another
 * file of this folder (the kproxy/layers rule).
 */
export { createHostNftablesBackends, type HostNftables, type HostNftablesFamilies } from './host.ts';
export { cleanupNftablesLeftovers, takeOverTables } from './cleanup.ts';
export type { NftablesBackend } from './proxier.ts';
export { nftFamilyOf } from './builder.ts';
export {
  AFFINITY_PREFIX,
  CLUSTER_IPS,
  ENDPOINT_PREFIX,
  endpointNameBase,
  EXTERNAL_PREFIX,
  FIREWALL_IPS,
  isAffinitySetName,
  KUBE_PROXY_TABLE,
  NO_ENDPOINT_NODEPORTS,
  NO_ENDPOINT_SERVICES,
  REJECT_CHAIN,
  SERVICE_IPS,
  SERVICE_NODEPORTS,
  servicePortNames,
  TABLE_COMMENT,
} from './names.ts';

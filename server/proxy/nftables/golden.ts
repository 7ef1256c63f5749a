import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import type { ProxyConfig } from '../../config/types.ts';
import { formatTableDump } from '../../kernel/nft-script.ts';
import type { BackendSyncResult } from '../backend.ts';
import { KUBE_PROXY_TABLE, TABLE_COMMENT } from './names.ts';
import { nftHarness, testConfig, type NftHarness } from './testing.ts';
import { objectsFromYaml, stateFromObjects } from '../testing.ts';

/**
 * GoldenOptions is the optional `kind: GoldenOptions` document of a golden
 * case's input.yaml: what the node and the configuration look like.
 */
export interface GoldenOptions {
  nodeName?: string;
  /** config: ProxyConfig fields to override (clusterCIDRs, nodePortAddresses, nftables...). */
  config?: Record<string, unknown>;
  /** hostAddresses: the node's interface addresses (default 127.0.0.1 and 10.0.0.10). */
  hostAddresses?: string[];
  /** serviceCIDRs: the ranges of the cluster's ServiceCIDR objects. */
  serviceCIDRs?: string[];
}

export interface GoldenRun {
  harness: NftHarness;
  result: BackendSyncResult;
  /** table: the kube-proxy table as the simulated kernel holds it after one full sync, as `nft -f` text. */
  table: string;
}

/** runNftGoldenCase programs a case's manifests with one full sync over the simulated kernel. */
export async function runNftGoldenCase(inputPath: string): Promise<GoldenRun> {
  const text = readFileSync(inputPath, 'utf8');
  let opts: GoldenOptions = {};
  for (const doc of parseAllDocuments(text)) {
    const js = doc.toJS() as { kind?: string } & GoldenOptions;
    if (js?.kind === 'GoldenOptions') opts = js;
  }
  const nodeName = opts.nodeName ?? 'node-a';
  const h = nftHarness({ config: testConfig({ mode: 'nftables', ...(opts.config ?? {}) } as Partial<ProxyConfig>), nodeName, hostAddresses: opts.hostAddresses });
  await h.backend.init!();
  const state = stateFromObjects(nodeName, objectsFromYaml(inputPath, text));
  if (opts.serviceCIDRs) state.onServiceCIDR(null, { apiVersion: 'networking.k8s.io/v1', kind: 'ServiceCIDR', metadata: { name: 'kubernetes' }, spec: { cidrs: opts.serviceCIDRs } });
  const result = await h.backend.sync({ state: state.checkout(), forceFull: true });
  if (result.error) throw result.error;
  return { harness: h, result, table: formatTableDump(h.kernel.table('ip', KUBE_PROXY_TABLE)!, TABLE_COMMENT) };
}

import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import type { ProxyConfig } from '../../config/types.ts';
import type { BackendSyncResult } from '../backend.ts';
import { ipvsConfig, ipvsHarness, type IpvsHarness } from './testing.ts';
import { objectsFromYaml, stateFromObjects } from '../testing.ts';

/**
 * GoldenOptions is the optional `kind: GoldenOptions` document of a golden
 * case's input.yaml: the node's links and the configuration.
 */
export interface GoldenOptions {
  nodeName?: string;
  /** config: ProxyConfig fields to override (ipvs.scheduler, clusterCIDRs, nodePortAddresses...). */
  config?: Record<string, unknown>;
  /** links: the node's links with addresses ("10.0.0.10/24"); default lo and eth0 10.0.0.10/24. */
  links?: Record<string, string[]>;
}

export interface GoldenRun {
  harness: IpvsHarness;
  result: BackendSyncResult;
  /** kernel: IPVS, ipsets, kube-ipvs0 and the nat and filter tables after one full sync. */
  kernel: string;
}

/** runGoldenCase programs a case's manifests with one full sync over the simulated kernel. */
export async function runGoldenCase(inputPath: string): Promise<GoldenRun> {
  const text = readFileSync(inputPath, 'utf8');
  let opts: GoldenOptions = {};
  for (const doc of parseAllDocuments(text)) {
    const js = doc.toJS() as { kind?: string } & GoldenOptions;
    if (js?.kind === 'GoldenOptions') opts = js;
  }
  const nodeName = opts.nodeName ?? 'node-a';
  const h = ipvsHarness({ config: ipvsConfig((opts.config ?? {}) as Partial<ProxyConfig>), nodeName, links: opts.links });
  await h.backend.init!();
  const state = stateFromObjects(nodeName, objectsFromYaml(inputPath, text));
  const result = await h.sync(state, true);
  return { harness: h, result, kernel: h.kernel() };
}

import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import type { ProxyConfig } from '../../config/types.ts';
import { SimulatedIptables } from '../../kernel/iptables-simulated.ts';
import { formatIptablesSave } from '../../kernel/iptables-save-parser.ts';
import type { InterfaceAddress } from '../../kernel/netif.ts';
import type { BackendSyncResult } from '../backend.ts';
import { harness, objectsFromYaml, stateFromObjects, testConfig, type Harness } from './testing.ts';

/**
 * GoldenOptions is the optional `kind: GoldenOptions` document of a golden
 * case's input.yaml: what the node and the configuration look like.
 */
export interface GoldenOptions {
  nodeName?: string;
  /** config: ProxyConfig fields to override (clusterCIDRs, detectLocalMode, nodePortAddresses, iptables...). */
  config?: Record<string, unknown>;
  /** hostAddresses: the node's interface addresses (for --nodeport-addresses). */
  hostAddresses?: string[];
  /** randomFully: the iptables binary supports --random-fully (default true, as on iptables >= 1.6.2). */
  randomFully?: boolean;
  /** nfacct: kube-proxy's nfacct counters exist (default false). */
  nfacct?: boolean;
  /** conntrackTCPLiberal: nf_conntrack_tcp_be_liberal is set. */
  conntrackTCPLiberal?: boolean;
}

export interface GoldenRun {
  harness: Harness;
  result: BackendSyncResult;
  /** rules: filter and nat as the simulated kernel holds them after the full sync. */
  rules: string;
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
  const kernel = new SimulatedIptables({ hasRandomFully: opts.randomFully ?? true });
  const h = harness({ config: testConfig((opts.config ?? {}) as Partial<ProxyConfig>), nodeName, kernel, nfacct: opts.nfacct });
  if (opts.hostAddresses) {
    h.netif.list = opts.hostAddresses.map((a): InterfaceAddress => ({
      ifname: a.startsWith('127.') ? 'lo' : 'eth0',
      family: a.includes(':') ? 'IPv6' : 'IPv4',
      address: a,
      prefixLength: a.includes(':') ? 64 : 24,
    }));
  }
  if (opts.conntrackTCPLiberal) h.sysctl.values.set('net/netfilter/nf_conntrack_tcp_be_liberal', '1');
  await h.backend.init!();
  const state = stateFromObjects(nodeName, objectsFromYaml(inputPath, text));
  const result = await h.backend.sync({ state: state.checkout(), forceFull: true });
  if (result.error) throw result.error;
  return { harness: h, result, rules: formatIptablesSave(kernel.dump(), { tables: ['filter', 'nat'] }) };
}

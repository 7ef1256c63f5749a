import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import type { ProxyConfig } from '../../config/types.ts';
import { SimulatedIptables } from '../../kernel/iptables-simulated.ts';
import { formatIptablesSave } from '../../kernel/iptables-save-parser.ts';
import type { InterfaceAddress } from '../../kernel/netif.ts';
import type { BackendSyncResult } from '../backend.ts';
import { isLoopbackIP, type IPFamily } from '../../net/ip.ts';
import { harness, testConfig, type Harness } from './testing.ts';
import { objectsFromYaml, stateFromObjects } from '../testing.ts';

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
  /**
   * families: the proxiers to run (default [IPv4]). With more than one, each
   * family's tables follow a "# iptables-save" / "# ip6tables-save" line.
   */
  families?: IPFamily[];
}

export interface GoldenRun {
  harness: Harness;
  /** families: each family's run, in order (the first is this one). */
  families: GoldenRun[];
  result: BackendSyncResult;
  /** rules: filter and nat as the simulated kernel holds them after the full sync. */
  rules: string;
}

/** runGoldenCase programs a case's manifests with one full sync per family over simulated kernels (of the nft flavour unless told). */
export async function runGoldenCase(inputPath: string, flavor: 'nft' | 'legacy' = 'nft'): Promise<GoldenRun> {
  const text = readFileSync(inputPath, 'utf8');
  let opts: GoldenOptions = {};
  for (const doc of parseAllDocuments(text)) {
    const js = doc.toJS() as { kind?: string } & GoldenOptions;
    if (js?.kind === 'GoldenOptions') opts = js;
  }
  const families = opts.families ?? ['IPv4'];
  const runs: GoldenRun[] = [];
  for (const family of families) runs.push(await runFamily(inputPath, text, opts, family, flavor));
  for (const r of runs) r.families = runs;
  if (families.length === 1) return runs[0];
  const rules = runs.map((r, i) => `# ${families[i] === 'IPv6' ? 'ip6tables' : 'iptables'}-save\n${r.rules}`).join('');
  return { ...runs[0], rules };
}

async function runFamily(inputPath: string, text: string, opts: GoldenOptions, family: IPFamily, flavor: 'nft' | 'legacy'): Promise<GoldenRun> {
  const nodeName = opts.nodeName ?? 'node-a';
  const kernel = new SimulatedIptables({ family, flavor, hasRandomFully: opts.randomFully ?? true });
  const h = harness({ config: testConfig((opts.config ?? {}) as Partial<ProxyConfig>), nodeName, kernel, nfacct: opts.nfacct });
  if (opts.hostAddresses) {
    h.netif.list = opts.hostAddresses.map((a): InterfaceAddress => ({
      ifname: isLoopbackIP(a) ? 'lo' : 'eth0',
      family: a.includes(':') ? 'IPv6' : 'IPv4',
      address: a,
      prefixLength: a.includes(':') ? 64 : 24,
    }));
  }
  if (opts.conntrackTCPLiberal) h.sysctl.values.set('net/netfilter/nf_conntrack_tcp_be_liberal', '1');
  await h.backend.init!();
  const state = stateFromObjects(nodeName, objectsFromYaml(inputPath, text), undefined, family);
  const result = await h.backend.sync({ state: state.checkout(), forceFull: true });
  if (result.error) throw result.error;
  return { harness: h, families: [], result, rules: formatIptablesSave(kernel.dump(), { tables: ['filter', 'nat'] }) };
}

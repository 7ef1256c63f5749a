import type { ProxyConfig } from '../../config/types.ts';
import { formatTableDump } from '../../kernel/nft-script.ts';
import { fullSync, type GoldenMode, type GoldenOptions, type GoldenRun } from '../golden.ts';
import { KUBE_PROXY_TABLE, TABLE_COMMENT } from './names.ts';
import { nftHarness, testConfig, type NftHarness } from './testing.ts';

/** NftGoldenOptions is the GoldenOptions document of an nftables golden case: the node and the configuration (nftables...). */
export interface NftGoldenOptions extends GoldenOptions {
  /** hostAddresses: the node's interface addresses (default 127.0.0.1 and 10.0.0.10). */
  hostAddresses?: string[];
  /** serviceCIDRs: the ranges of the cluster's ServiceCIDR objects. */
  serviceCIDRs?: string[];
}

/** nftablesGolden programs a case with one full sync over the simulated kernel; the output is the kube-proxy table as `nft -f` text. */
export const nftablesGolden: GoldenMode<NftGoldenOptions, GoldenRun<NftHarness>> = {
  expected: 'expected.nft',
  async program(c) {
    const opts = c.options;
    const h = nftHarness({ config: testConfig({ mode: 'nftables', ...c.config } as Partial<ProxyConfig>), nodeName: c.nodeName, hostAddresses: opts.hostAddresses });
    await h.backend.init!();
    const state = c.state();
    if (opts.serviceCIDRs) state.onServiceCIDR(null, { apiVersion: 'networking.k8s.io/v1', kind: 'ServiceCIDR', metadata: { name: 'kubernetes' }, spec: { cidrs: opts.serviceCIDRs } });
    const result = await fullSync(h.backend, state);
    return { harness: h, result, output: formatTableDump(h.kernel.table('ip', KUBE_PROXY_TABLE)!, TABLE_COMMENT) };
  },
};

import { SimulatedIptables } from '../../kernel/iptables-simulated.ts';
import { formatIptablesSave } from '../../kernel/iptables-save-parser.ts';
import type { IPFamily } from '../../net/ip.ts';
import { fullSync, hostAddresses, type GoldenCase, type GoldenMode, type GoldenOptions, type GoldenRun } from '../golden.ts';
import { harness, testConfig, type Harness } from './testing.ts';

/** IptablesGoldenOptions is the GoldenOptions document of an iptables golden case: the node and the configuration. */
export interface IptablesGoldenOptions extends GoldenOptions {
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

/** IptablesGoldenRun: output is filter and nat as the simulated kernel holds them after the full sync (every family's, in order). */
export interface IptablesGoldenRun extends GoldenRun<Harness> {
  /** families: each family's run, in order (the first is this one). */
  families: IptablesGoldenRun[];
}

/** iptablesGolden programs a case with one full sync per family over simulated kernels of the flavour (nft unless told). */
export function iptablesGolden(flavor: 'nft' | 'legacy' = 'nft'): GoldenMode<IptablesGoldenOptions, IptablesGoldenRun> {
  return {
    expected: 'expected.rules',
    async program(c) {
      const families = c.options.families ?? ['IPv4'];
      const runs: IptablesGoldenRun[] = [];
      for (const family of families) runs.push(await programFamily(c, family, flavor));
      for (const r of runs) r.families = runs;
      if (families.length === 1) return runs[0];
      const output = runs.map((r, i) => `# ${families[i] === 'IPv6' ? 'ip6tables' : 'iptables'}-save\n${r.output}`).join('');
      return { ...runs[0], output };
    },
  };
}

async function programFamily(c: GoldenCase<IptablesGoldenOptions>, family: IPFamily, flavor: 'nft' | 'legacy'): Promise<IptablesGoldenRun> {
  const opts = c.options;
  const kernel = new SimulatedIptables({ family, flavor, hasRandomFully: opts.randomFully ?? true });
  const h = harness({ config: testConfig(c.config), nodeName: c.nodeName, kernel, nfacct: opts.nfacct });
  if (opts.hostAddresses) h.netif.list = hostAddresses(opts.hostAddresses);
  if (opts.conntrackTCPLiberal) h.sysctl.values.set('net/netfilter/nf_conntrack_tcp_be_liberal', '1');
  await h.backend.init!();
  const result = await fullSync(h.backend, c.state(family));
  return { harness: h, families: [], result, output: formatIptablesSave(kernel.dump(), { tables: ['filter', 'nat'] }) };
}

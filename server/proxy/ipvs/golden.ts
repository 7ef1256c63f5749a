import { type GoldenMode, type GoldenOptions, type GoldenRun } from '../golden.ts';
import { ipvsConfig, ipvsHarness, type IpvsHarness } from './testing.ts';

/** IpvsGoldenOptions is the GoldenOptions document of an IPVS golden case: the node's links and the configuration (ipvs.scheduler...). */
export interface IpvsGoldenOptions extends GoldenOptions {
  /** links: the node's links with addresses ("10.0.0.10/24"); default lo and eth0 10.0.0.10/24. */
  links?: Record<string, string[]>;
}

/** ipvsGolden programs a case with one full sync over the simulated kernel; the output is IPVS, the ipsets, kube-ipvs0 and the nat and filter tables. */
export const ipvsGolden: GoldenMode<IpvsGoldenOptions, GoldenRun<IpvsHarness>> = {
  expected: 'expected.txt',
  async program(c) {
    const h = ipvsHarness({ config: ipvsConfig(c.config), nodeName: c.nodeName, links: c.options.links });
    await h.backend.init!();
    const result = await h.sync(c.state(), true);
    return { harness: h, result, output: h.kernel() };
  },
};

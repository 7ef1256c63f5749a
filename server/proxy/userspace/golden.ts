import type { ProxyConfig } from '../../config/types.ts';
import { formatIptablesSave } from '../../kernel/iptables-save-parser.ts';
import { fullSync, hostAddresses, type GoldenMode, type GoldenOptions, type GoldenRun } from '../golden.ts';
import { describeProxySockets } from './describe.ts';
import { harness, userspaceConfig, type UserspaceHarness } from './testing.ts';

/** UserspaceGoldenOptions is the GoldenOptions document of a userspace golden case: the node and the configuration (bindAddress...). */
export interface UserspaceGoldenOptions extends GoldenOptions {
  /** userspace: the userspace section's overrides (portRange...). */
  userspace?: Partial<ProxyConfig['userspace']>;
  /** hostAddresses: the node's interface addresses (the host IP, --nodeport-addresses, local external IPs). */
  hostAddresses?: string[];
}

/**
 * userspaceGolden programs a case with one full sync over the simulated kernel
 * and network; the output is nat and filter as the kernel holds them, then the
 * proxy sockets with their rotations and the ports held for them.
 */
export const userspaceGolden: GoldenMode<UserspaceGoldenOptions, GoldenRun<UserspaceHarness>> = {
  expected: 'expected.rules',
  async program(c) {
    const config = userspaceConfig(c.options.userspace ?? {}, c.config);
    const h = harness({ config, nodeName: c.nodeName });
    if (c.options.hostAddresses) h.netif.list = hostAddresses(c.options.hostAddresses);
    const result = await fullSync(h.backend, c.state());
    const rules = formatIptablesSave(h.iptables.dump(), { tables: ['filter', 'nat'] });
    const sockets = describeProxySockets(h.backend.intended(), config.bindAddress, result.skippedServicePorts ?? new Map());
    return { harness: h, result, output: `${rules}${sockets.join('\n')}\n` };
  },
};

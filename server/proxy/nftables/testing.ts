import { FakeClock } from '../../clock-fake.ts';
import { testConfig } from '../../config/testing.ts';
import type { ProxyConfig } from '../../config/types.ts';
import type { InterfaceAddress } from '../../kernel/netif.ts';
import { isLoopbackIP } from '../../net/ip.ts';
import { FakeNetInterfaces } from '../../kernel/netif-fake.ts';
import { SimulatedNft } from '../../kernel/nft-simulated.ts';
import type { NftTable } from '../../kernel/nft-types.ts';
import { silentLogger, type Logger } from '../../log.ts';
import { createNftablesBackend, type NftablesBackend } from './proxier.ts';

/**
 * Test helpers for the nftables backend: a backend over the simulated nft
 * kernel with a fake clock and host addresses. Manifests become a ProxyState
 * with ../testing.ts's stateFromObjects and objectsFromYaml.
 */

export { testConfig };

export interface NftHarness {
  backend: NftablesBackend;
  kernel: SimulatedNft;
  netif: FakeNetInterfaces;
  clock: FakeClock;
}

/** hostAddress makes an interface address ("lo" for loopback). */
export function hostAddress(a: string): InterfaceAddress {
  return { ifname: isLoopbackIP(a) ? 'lo' : 'eth0', family: a.includes(':') ? 'IPv6' : 'IPv4', address: a, prefixLength: a.includes(':') ? 64 : 24 };
}

/** nftHarness builds an nftables backend over the simulated kernel. */
export function nftHarness(
  opts: { config?: ProxyConfig; nodeName?: string; kernel?: SimulatedNft; logger?: Logger; hostAddresses?: string[]; clock?: FakeClock; afterFirstSync?: () => Promise<unknown> } = {},
): NftHarness {
  const kernel = opts.kernel ?? new SimulatedNft();
  const netif = new FakeNetInterfaces();
  netif.list = (opts.hostAddresses ?? ['127.0.0.1', '10.0.0.10']).map(hostAddress);
  const clock = opts.clock ?? new FakeClock();
  const backend = createNftablesBackend({
    config: opts.config ?? testConfig({ mode: 'nftables' }),
    nodeName: opts.nodeName ?? 'node-a',
    family: 'IPv4',
    runner: kernel,
    netif,
    clock,
    logger: opts.logger ?? silentLogger,
    afterFirstSync: opts.afterFirstSync,
  });
  return { backend, kernel, netif, clock };
}

/**
 * staleChains lists the service port chains (named after their service
 * port: "service-…-ns/name/…", "endpoint-…") a kube-proxy table holds
 * flushed: stale, waiting for their deletion a second later, as a reader of
 * the kernel (the dashboard) sees them.
 */
export function staleChains(table: NftTable | null): string[] {
  return [...(table?.chains.values() ?? [])]
    .filter((c) => c.name.includes('/') && c.rules.length === 0)
    .map((c) => c.name)
    .sort();
}

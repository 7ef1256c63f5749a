import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import type { ProxyConfig } from '../../config/types.ts';
import { formatIptablesSave } from '../../kernel/iptables-save-parser.ts';
import type { InterfaceAddress } from '../../kernel/netif.ts';
import { isLoopbackIP } from '../../net/ip.ts';
import type { BackendSyncResult } from '../backend.ts';
import { describeProxySockets } from './describe.ts';
import { harness, userspaceConfig, type UserspaceHarness } from './testing.ts';
import { objectsFromYaml, stateFromObjects } from '../testing.ts';

/**
 * GoldenOptions is the optional `kind: GoldenOptions` document of a golden
 * case's input.yaml: the node and the configuration.
 */
export interface GoldenOptions {
  nodeName?: string;
  /** config: ProxyConfig fields to override (clusterCIDRs, bindAddress, nodePortAddresses...). */
  config?: Record<string, unknown>;
  /** userspace: the userspace section's overrides (portRange...). */
  userspace?: Partial<ProxyConfig['userspace']>;
  /** hostAddresses: the node's interface addresses (the host IP, --nodeport-addresses, local external IPs). */
  hostAddresses?: string[];
}

export interface GoldenRun {
  harness: UserspaceHarness;
  result: BackendSyncResult;
  /** output: nat and filter as the simulated kernel holds them after one full sync, then the proxy sockets and claims. */
  output: string;
}

/** runGoldenCase programs a case's manifests with one full sync over the simulated kernel and network. */
export async function runGoldenCase(inputPath: string): Promise<GoldenRun> {
  const text = readFileSync(inputPath, 'utf8');
  let opts: GoldenOptions = {};
  for (const doc of parseAllDocuments(text)) {
    const js = doc.toJS() as { kind?: string } & GoldenOptions;
    if (js?.kind === 'GoldenOptions') opts = js;
  }
  const nodeName = opts.nodeName ?? 'node-a';
  const config = userspaceConfig(opts.userspace ?? {}, (opts.config ?? {}) as Partial<ProxyConfig>);
  const h = harness({ config, nodeName });
  if (opts.hostAddresses) {
    h.netif.list = opts.hostAddresses.map((a): InterfaceAddress => ({
      ifname: isLoopbackIP(a) ? 'lo' : 'eth0',
      family: a.includes(':') ? 'IPv6' : 'IPv4',
      address: a,
      prefixLength: a.includes(':') ? 64 : 24,
    }));
  }
  const state = stateFromObjects(nodeName, objectsFromYaml(inputPath, text));
  const result = await h.backend.sync({ state: state.checkout(), forceFull: true });
  if (result.error) throw result.error;
  const rules = formatIptablesSave(h.iptables.dump(), { tables: ['filter', 'nat'] });
  const sockets = describeProxySockets(h.backend.intended(), config.bindAddress, skippedOf(result));
  return { harness: h, result, output: `${rules}${sockets.join('\n')}\n` };
}

function skippedOf(result: BackendSyncResult): ReadonlyMap<string, string> {
  return result.skippedServicePorts ?? new Map();
}

import { errorMessage } from '../../errors.ts';
import type { NetInterfaces } from '../../kernel/netif.ts';
import type { Logger } from '../../log.ts';
import type { NodePortAddresses } from '../node-port-addresses.ts';

/**
 * healthCheckBindAddresses decides where health check node ports listen, as
 * kube-proxy's service health server does: on the wildcard address when node
 * ports are accepted on every address, otherwise on each host address inside
 * --nodeport-addresses. If the host addresses cannot be listed it falls back to
 * the wildcard (kube-proxy: "health check port will listen to all node
 * addresses"). An empty result means no address matches: nothing can listen.
 * A dual-stack node gives one NodePortAddresses per family (each its own wildcard).
 */
export async function healthCheckBindAddresses(families: readonly NodePortAddresses[], netif: NetInterfaces, logger: Logger): Promise<string[]> {
  const out: string[] = [];
  for (const npa of families) {
    const wildcard = npa.family === 'IPv4' ? '0.0.0.0' : '::';
    if (npa.matchAll) {
      out.push(wildcard);
      continue;
    }
    try {
      out.push(...npa.nodeIPs((await netif.addresses()).map((a) => a.address)));
    } catch (err) {
      logger.error('failed to list node addresses matching nodePortAddresses; health check ports listen on all addresses', {
        nodePortAddresses: npa.toString(),
        family: npa.family,
        err: errorMessage(err),
      });
      out.push(wildcard);
    }
  }
  return out;
}

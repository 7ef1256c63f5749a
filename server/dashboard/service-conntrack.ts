import { errorMessage, isKproxyError, RateLimitedError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { NodeConntrackCounts, ServiceConntrackCount } from '../proxy/conntrack/counts.ts';
import type { ServicePort } from '../proxy/service-port.ts';
import type { ConntrackFrontend, ConntrackInfo, ServiceConntrack } from './protocol.ts';

/**
 * MAX_CONNTRACK_FRONTENDS: one request lists at most this many frontends. Each
 * listing walks the kernel's whole table (about 2 s at a million entries), so
 * a service with many ports and addresses is counted in part, and says so.
 */
export const MAX_CONNTRACK_FRONTENDS = 32;

/** DashboardConntrack is what the dashboard reads of ConntrackCounts (server/proxy/conntrack/counts.ts). */
export interface DashboardConntrack {
  node(): Promise<NodeConntrackCounts>;
  countForService(vip: string, port: number, protocol: string): Promise<ServiceConntrackCount>;
}

/** Frontend is a destination a client sends a service's traffic to: an address and a port. */
export type Frontend = Pick<ConntrackFrontend, 'kind' | 'portName' | 'vip' | 'port' | 'protocol'>;

/** conntrackInfo turns the node's counts into the Overview's shape. */
export function conntrackInfo(n: NodeConntrackCounts): ConntrackInfo {
  return { count: n.entries, max: n.max, readAt: n.at, ...(n.error ? { error: n.error } : {}) };
}

/**
 * serviceFrontends lists the address:port pairs of a service's ports that a
 * flow's original destination names: the cluster IP, each external IP and
 * each load balancer IP, with the service port. Node ports are left out: their
 * flows go to the node's own addresses, and a listing by port alone would
 * also count unrelated traffic to that port number.
 */
export function serviceFrontends(ports: readonly ServicePort[]): Frontend[] {
  const out: Frontend[] = [];
  const seen = new Set<string>();
  const add = (sp: ServicePort, kind: Frontend['kind'], vip: string) => {
    const key = `${vip} ${sp.port} ${sp.protocol}`;
    if (seen.has(key)) return;
    seen.add(key);
    out.push({ kind, portName: sp.portName, vip, port: sp.port, protocol: sp.protocol });
  };
  for (const sp of ports) {
    add(sp, 'clusterIP', sp.clusterIP);
    for (const ip of sp.externalIPs) add(sp, 'externalIP', ip);
    for (const ip of sp.loadBalancerVIPs) add(sp, 'loadBalancerIP', ip);
  }
  return out;
}

/**
 * countServiceConntrack counts each frontend's flows, one after another (the
 * counter runs listings one at a time anyway; queuing them all at once would
 * fill its queue with one request). A refused count (RateLimitedError) fails
 * the whole request: the caller answers 429 and the counts listed so far are
 * cached for the retry. Any other failure is that frontend's error, logged.
 */
export async function countServiceConntrack(opts: { counter: DashboardConntrack; service: string; ports: readonly ServicePort[]; simulated: boolean; logger: Logger }): Promise<ServiceConntrack> {
  const all = serviceFrontends(opts.ports);
  const counted = all.slice(0, MAX_CONNTRACK_FRONTENDS);
  const frontends: ConntrackFrontend[] = [];
  for (const f of counted) {
    try {
      const c = await opts.counter.countForService(f.vip, f.port, f.protocol);
      frontends.push({ ...f, count: c.count, at: c.at, cached: c.cached });
    } catch (err) {
      if (err instanceof RateLimitedError) throw err;
      // The page shows this frontend's error; the others still count. Failed listings are also in kproxy_conntrack_count_errors_total.
      opts.logger.warn('counting conntrack entries failed', { service: opts.service, frontend: `${f.vip}:${f.port}/${f.protocol}`, err: errorMessage(err) });
      frontends.push({ ...f, count: null, at: null, cached: false, error: { code: isKproxyError(err) ? err.code : 'KPROXY_ERR_CONNTRACK', message: errorMessage(err) } });
    }
  }
  return { service: opts.service, simulated: opts.simulated, frontends, notCounted: all.length - counted.length };
}

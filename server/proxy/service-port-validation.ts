import { RuleBuildError } from '../errors.ts';
import { canonicalIP, parseCIDR, type IPFamily } from '../net/ip.ts';
import { endpointKey, type Endpoint } from './endpoint.ts';
import { PROTOCOLS, type ServicePort } from './service-port.ts';

/**
 * The second wall every mode's pure builder puts before the kernel: the model
 * validates objects already (service-port.ts, endpoint-slice-cache.ts); these
 * checks run again on the values that reach the kernel's input, so a bug
 * elsewhere can cost one service port (a RuleBuildError: the builder skips it),
 * never the whole batch every other Service shares.
 */

const SERVICE_PORT_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?\/[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[a-z0-9]([-a-z0-9]*[a-z0-9])?)?$/;

/**
 * MAX_SERVICE_PORT_NAME: the longest "namespace/name:port" the API server
 * lets through: three DNS labels of 63 characters (a Service port's name is a
 * DNS-1123 label, not IANA_SVC_NAME's 15). The iptables mode's longest
 * comment, "other traffic to NAME will be dropped by KUBE-PROXY-FIREWALL", is
 * then 247 characters, within xt_comment's 255.
 */
export const MAX_SERVICE_PORT_NAME = 63 + 1 + 63 + 1 + 63;

function checkPort(n: number, what: string): string {
  if (!Number.isInteger(n) || n < 1 || n > 65535) throw new RuleBuildError(`${what} ${n} is not a port`);
  return String(n);
}

const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;

function checkIP(ip: string, family: IPFamily, what: string): string {
  // Canonical IPv4 (no leading zeros) is one regular expression: this runs once per endpoint.
  const ok = family === 'IPv4' ? typeof ip === 'string' && IPV4.test(ip) : typeof ip === 'string' && ip.includes(':') && canonicalIP(ip) === ip;
  if (!ok) throw new RuleBuildError(`${what} ${JSON.stringify(ip)} is not a canonical ${family} address`);
  return ip;
}

/**
 * validateServicePort re-checks every value of a service port that reaches
 * the kernel's input. The model validates objects already; this is the second
 * wall, so a bug elsewhere can cost one service, never the whole batch.
 */
export function validateServicePort(sp: ServicePort, family: IPFamily): void {
  if (!SERVICE_PORT_NAME.test(sp.name) || sp.name.length > MAX_SERVICE_PORT_NAME) throw new RuleBuildError(`service port name ${JSON.stringify(sp.name)} is not a valid "namespace/name:port"`);
  if (!PROTOCOLS.includes(sp.protocol)) throw new RuleBuildError(`protocol ${JSON.stringify(sp.protocol)} is not TCP, UDP or SCTP`);
  checkIP(sp.clusterIP, family, 'cluster IP');
  checkPort(sp.port, 'port');
  if (sp.nodePort !== 0) checkPort(sp.nodePort, 'node port');
  if (sp.healthCheckNodePort !== 0) checkPort(sp.healthCheckNodePort, 'health check node port');
  for (const ip of sp.externalIPs) checkIP(ip, family, 'external IP');
  for (const ip of sp.loadBalancerVIPs) checkIP(ip, family, 'load balancer IP');
  for (const c of sp.loadBalancerSourceRanges) {
    if (parseCIDR(c)?.text !== c || parseCIDR(c)?.family !== family) throw new RuleBuildError(`source range ${JSON.stringify(c)} is not a canonical ${family} CIDR`);
  }
  if (!Number.isInteger(sp.stickyMaxAgeSeconds) || sp.stickyMaxAgeSeconds < 0 || sp.stickyMaxAgeSeconds > 86400) {
    throw new RuleBuildError(`session affinity timeout ${sp.stickyMaxAgeSeconds} is out of range`);
  }
}

/** validateEndpoint re-checks an endpoint's address (canonical, of the family), port and key. */
export function validateEndpoint(ep: Endpoint, family: IPFamily): void {
  checkIP(ep.ip, family, 'endpoint IP');
  checkPort(ep.port, 'endpoint port');
  if (ep.key !== endpointKey(ep.ip, ep.port)) throw new RuleBuildError(`endpoint key ${JSON.stringify(ep.key)} does not match ${ep.ip}:${ep.port}`);
}

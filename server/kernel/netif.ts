import { NetlinkError } from '../errors.ts';
import { canonicalIP, type IPFamily } from '../proxy/ip.ts';
import { execFile, type ExecFn } from './exec.ts';

/** InterfaceAddress is one address assigned to a host interface. */
export interface InterfaceAddress {
  readonly ifname: string;
  readonly family: IPFamily;
  /** address: canonical IP text. */
  readonly address: string;
  readonly prefixLength: number;
}

/**
 * NetInterfaces lists the host's interface addresses (what --nodeport-addresses
 * is matched against, like Go's net.InterfaceAddrs in kube-proxy).
 */
export interface NetInterfaces {
  addresses(): Promise<InterfaceAddress[]>;
}

interface IpJsonLink {
  ifname?: unknown;
  addr_info?: { family?: unknown; local?: unknown; prefixlen?: unknown }[];
}

/** parseIpAddrJson reads `ip -j addr show` output. */
export function parseIpAddrJson(text: string): InterfaceAddress[] {
  let links: unknown;
  try {
    links = JSON.parse(text);
  } catch (err) {
    throw new NetlinkError('`ip -j addr show` printed invalid JSON', { cause: err });
  }
  if (!Array.isArray(links)) throw new NetlinkError('`ip -j addr show` did not print a list of links');
  const out: InterfaceAddress[] = [];
  for (const link of links as IpJsonLink[]) {
    if (typeof link?.ifname !== 'string' || !Array.isArray(link.addr_info)) continue;
    for (const a of link.addr_info) {
      const family = a?.family === 'inet' ? 'IPv4' : a?.family === 'inet6' ? 'IPv6' : null;
      const address = canonicalIP(a?.local);
      if (!family || !address || typeof a.prefixlen !== 'number') continue;
      out.push({ ifname: link.ifname, family, address, prefixLength: a.prefixlen });
    }
  }
  return out;
}

/** hostInterfaces lists addresses with `ip -j addr show` (one process; the caller decides how often). */
export function hostInterfaces(exec: ExecFn = execFile): NetInterfaces {
  return {
    async addresses() {
      let res;
      try {
        res = await exec('ip', ['-j', 'addr', 'show'], { timeoutMs: 10_000 });
      } catch (err) {
        throw new NetlinkError('cannot list interface addresses (ip -j addr show)', { cause: err });
      }
      if (res.code !== 0) throw new NetlinkError(`ip -j addr show failed (exit ${res.code}): ${res.stderr.trim()}`);
      return parseIpAddrJson(res.stdout);
    },
  };
}

import { errorMessage, NetlinkError } from '../errors.ts';
import { canonicalIP, type IPFamily } from '../net/ip.ts';
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

/** LinkTable maps each link name to its addresses (a link without addresses maps to []). */
export type LinkTable = Map<string, InterfaceAddress[]>;

/** parseLinkTable reads `ip -j addr show`, keeping links that have no address. */
export function parseLinkTable(text: string): LinkTable {
  let links: unknown;
  try {
    links = JSON.parse(text);
  } catch (err) {
    throw new NetlinkError('`ip -j addr show` printed invalid JSON', { cause: err });
  }
  if (!Array.isArray(links)) throw new NetlinkError('`ip -j addr show` did not print a list of links');
  const out: LinkTable = new Map();
  for (const link of links as IpJsonLink[]) {
    if (typeof link?.ifname !== 'string') continue;
    const addrs: InterfaceAddress[] = [];
    for (const a of Array.isArray(link.addr_info) ? link.addr_info : []) {
      const family: IPFamily | null = a?.family === 'inet' ? 'IPv4' : a?.family === 'inet6' ? 'IPv6' : null;
      const address = canonicalIP(a?.local);
      if (!family || !address || typeof a.prefixlen !== 'number') continue;
      addrs.push({ ifname: link.ifname, family, address, prefixLength: a.prefixlen });
    }
    out.set(link.ifname, addrs);
  }
  return out;
}

/** ipAddrShow runs `ip -j addr show` in this process's network namespace and returns its links. */
export async function ipAddrShow(exec: ExecFn = execFile): Promise<LinkTable> {
  let res;
  try {
    res = await exec('ip', ['-j', 'addr', 'show'], { timeoutMs: 10_000 });
  } catch (err) {
    throw new NetlinkError(`cannot list interface addresses (ip -j addr show): ${errorMessage(err)}`, { cause: err });
  }
  if (res.code !== 0) throw new NetlinkError(`ip -j addr show failed (exit ${res.code}): ${res.stderr.trim()}`);
  return parseLinkTable(res.stdout);
}

/** hostInterfaces lists addresses with `ip -j addr show` (one process; the caller decides how often). */
export function hostInterfaces(exec: ExecFn = execFile): NetInterfaces {
  return {
    async addresses() {
      // Links in listing order, each link's addresses in order: one flat list.
      return [...(await ipAddrShow(exec)).values()].flat();
    },
  };
}

import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { realClock } from '../clock.ts';
import { familyTable, FamilyKernelView } from '../dashboard/family-view.ts';
import { readSaveOutput } from '../dashboard/iptables/tables.ts';
import { IpvsView } from '../dashboard/ipvs/view.ts';
import { ADDRESSES_TABLE, IPVS_TABLE, SETS_TABLE } from '../dashboard/ipvs/tables.ts';
import { kernelTables, type KernelTable, type KernelTables } from '../dashboard/kernel-view.ts';
import { nftKernelTable } from '../dashboard/nftables/tables.ts';
import type { KernelKind } from '../dashboard/protocol.ts';
import { yieldToEventLoop } from '../dashboard/yield.ts';
import { errorMessage, TraceUnavailableError } from '../errors.ts';
import { execFile, type ExecFn } from '../kernel/exec.ts';
import { createIpsetRunner } from '../kernel/ipset.ts';
import { createIptablesRunner, type IptablesRunner } from '../kernel/iptables.ts';
import { resolveIptablesFlavor, type FlavorChoice } from '../kernel/iptables-flavor.ts';
import { createIpvsRunner } from '../kernel/ipvs.ts';
import { createNetlink } from '../kernel/netlink.ts';
import { hostInterfaces } from '../kernel/netif.ts';
import { createNftRunner } from '../kernel/nft.ts';
import { isLinkLocalIPv6, isLoopbackIP, type IPFamily } from '../net/ip.ts';
import { KUBE_PROXY_TABLE } from '../proxy/nftables/index.ts';
import { DUMMY_DEVICE } from '../proxy/ipvs/index.ts';
import { KUBE_PORTALS_CONTAINER as PORTALS_CONTAINER } from '../proxy/userspace/index.ts';

/**
 * Reading the network namespace `kproxy trace` runs in, through the same
 * runners the daemon uses (one process per listing, never a shell): the
 * rules of the mode (given, or found: a `kube-proxy` nftables table means
 * nftables mode, a kube-ipvs0 link IPVS mode, userspace mode's portal chains
 * in nat userspace mode, else iptables), the node's
 * addresses, and xt_recent lists on demand.
 */

export interface HostRead {
  readonly mode: KernelKind;
  readonly read: KernelTables;
  readonly localAddresses: ReadonlySet<string>;
  /** nodeIPs: the interfaces' addresses that are neither loopback nor link-local, in listing order. */
  readonly nodeIPs: readonly string[];
  /** how: what was read ("iptables-nft-save -c, ip6tables-nft-save -c"), for the text output. */
  readonly how: string;
  /** notes: what could not be read and why (a family without ip6tables). */
  readonly notes: readonly string[];
}

export interface HostReadOptions {
  /** mode: the proxy mode, or null to find it from what the namespace holds. */
  readonly mode: KernelKind | null;
  readonly flavor: FlavorChoice;
  readonly exec?: ExecFn;
}

const pause = yieldToEventLoop;

/** detectMode: which mode's objects this namespace holds. */
export async function detectMode(exec: ExecFn): Promise<KernelKind> {
  const nft = createNftRunner({ exec });
  try {
    for (const family of ['ip', 'ip6'] as const) if ((await nft.listTable(family, KUBE_PROXY_TABLE))?.chains.size) return 'nftables';
  } catch {
    // No nft on this host (or no nf_tables): not nftables mode.
  }
  const links = await createNetlink(exec)
    .show()
    .catch(() => null);
  if (links?.has(DUMMY_DEVICE)) return 'ipvs';
  return 'iptables';
}

async function iptablesRunners(flavor: FlavorChoice, exec: ExecFn): Promise<{ runners: Map<IPFamily, IptablesRunner>; notes: string[]; flavor: string }> {
  const decision = await resolveIptablesFlavor(flavor, { exec });
  const runners = new Map<IPFamily, IptablesRunner>();
  const notes: string[] = [];
  for (const family of ['IPv4', 'IPv6'] as const) {
    try {
      runners.set(family, await createIptablesRunner({ family, flavor: decision.flavor, exec }));
    } catch (err) {
      notes.push(`${family}: ${errorMessage(err)}`);
    }
  }
  return { runners, notes, flavor: decision.flavor };
}

/** readHost reads what the tracer needs from this network namespace. */
export async function readHost(opts: HostReadOptions): Promise<HostRead> {
  const exec = opts.exec ?? execFile;
  let mode = opts.mode ?? (await detectMode(exec));
  const tables = new Map<string, KernelTable>();
  const notes: string[] = [];
  let how: string;
  switch (mode) {
    case 'userspace':
    case 'iptables': {
      const { runners, notes: n, flavor } = await iptablesRunners(opts.flavor, exec);
      const read: string[] = [];
      for (const [family, runner] of runners) {
        try {
          for (const [name, t] of (await readSaveOutput(await runner.save({ counters: true, background: true }), pause)).tables) {
            const shown = familyTable(name, family);
            tables.set(shown, { ...t, name: shown });
          }
          read.push(`${family === 'IPv6' ? 'ip6tables' : 'iptables'}-${flavor}-save -c`);
        } catch (err) {
          // The primary family must be readable; the other may simply not exist here.
          if (family === 'IPv4') throw new TraceUnavailableError(`cannot read the iptables rules of this namespace: ${errorMessage(err)}`, { cause: err });
          n.push(`${family}: ${errorMessage(err)}`);
        }
      }
      notes.push(...n);
      how = read.join(', ');
      // Userspace mode's rules are iptables rules too: its portal chains tell it apart.
      if (opts.mode === null && tables.get('nat')?.chains.has(PORTALS_CONTAINER)) mode = 'userspace';
      break;
    }
    case 'nftables': {
      const nft = createNftRunner({ exec });
      const read: string[] = [];
      for (const [family, nf] of [
        ['IPv4', 'ip'],
        ['IPv6', 'ip6'],
      ] as const) {
        let listed;
        try {
          listed = await nft.listTable(nf, KUBE_PROXY_TABLE);
        } catch (err) {
          throw new TraceUnavailableError(`cannot list the ${nf} ${KUBE_PROXY_TABLE} nftables table of this namespace: ${errorMessage(err)}`, { cause: err });
        }
        if (!listed) continue;
        const shown = familyTable(KUBE_PROXY_TABLE, family);
        tables.set(shown, await nftKernelTable(shown, listed, { pause }));
        read.push(`nft -j list table ${nf} ${KUBE_PROXY_TABLE}`);
      }
      how = read.join(', ') || `nft: no ${KUBE_PROXY_TABLE} table`;
      break;
    }
    case 'ipvs': {
      const { runners, notes: n } = await iptablesRunners(opts.flavor, exec);
      notes.push(...n);
      const shared = { ipvs: createIpvsRunner({ exec }), ipset: createIpsetRunner({ exec }), netlink: createNetlink(exec) };
      const parts = [...runners].map(([family, iptables]) => ({
        family,
        provider: new IpvsView({ backend: { runners: { ...shared, iptables }, intended: () => null }, simulated: false, clock: realClock, pause }),
      }));
      if (parts.length === 0) throw new TraceUnavailableError(`cannot read IPVS mode's iptables rules: ${notes.join('; ')}`);
      try {
        for (const [name, t] of (await new FamilyKernelView(parts, [IPVS_TABLE, SETS_TABLE, ADDRESSES_TABLE]).read()).tables) tables.set(name, t);
      } catch (err) {
        throw new TraceUnavailableError(`cannot read IPVS mode's objects in this namespace: ${errorMessage(err)}`, { cause: err });
      }
      how = 'ipvsadm -Ln --exact, ipset save, ip -j addr show, iptables-save -c';
      break;
    }
    default:
      throw new TraceUnavailableError(`the packet tracer does not know ${mode} mode yet`);
  }
  const addresses = await hostInterfaces(exec)
    .addresses()
    .catch((err: unknown) => {
      throw new TraceUnavailableError(`cannot list this namespace's addresses (ip -j addr show): ${errorMessage(err)}`, { cause: err });
    });
  const nodeIPs = addresses.map((a) => a.address).filter((a) => !isLoopbackIP(a) && !isLinkLocalIPv6(a));
  return { mode, read: kernelTables(tables), localAddresses: new Set(addresses.map((a) => a.address)), nodeIPs, how, notes };
}

/** XT_RECENT: where the kernel lists each xt_recent list's sources. */
export const XT_RECENT = '/proc/net/xt_recent';

/** readRecentList reads the sources one xt_recent list holds (`src=10.0.0.2 ttl: …` per line); null when it cannot be read. */
export async function readRecentList(name: string, dir = XT_RECENT): Promise<ReadonlySet<string> | null> {
  // List names come from the kernel's own rules; one that could leave the directory is not read.
  if (!/^[A-Za-z0-9_.-]{1,200}$/.test(name) || name.startsWith('.')) return null;
  try {
    const text = await readFile(join(dir, name), 'utf8');
    const out = new Set<string>();
    for (const m of text.matchAll(/^src=(\S+)/gm)) out.add(m[1]);
    return out;
  } catch {
    // No such list yet (no client was remembered), or no xt_recent here: unknown, not empty.
    return null;
  }
}

import { DRY_RUN_LIMITS } from '../../kernel/call-log.ts';
import type { Clock } from '../../clock.ts';
import type { ProxyConfig } from '../../config/types.ts';
import { errorMessage, KernelModuleMissingError } from '../../errors.ts';
import { execFile, type ExecFn } from '../../kernel/exec.ts';
import { createIpsetRunner, type IpsetRunner } from '../../kernel/ipset.ts';
import { SimulatedIpset } from '../../kernel/ipset-simulated.ts';
import { IpvsBatch } from '../../kernel/ipvs-batch.ts';
import { checkIpvsSupport, createIpvsRunner, IpvsRestoreError, moduleHint, type IpvsRunner } from '../../kernel/ipvs.ts';
import { SimulatedIpvs } from '../../kernel/ipvs-simulated.ts';
import { createIptablesRunner, type IptablesRunner } from '../../kernel/iptables.ts';
import { SimulatedIptables } from '../../kernel/iptables-simulated.ts';
import { formatIptablesSave } from '../../kernel/iptables-save-parser.ts';
import { resolveIptablesFlavor, type FlavorChoice, type FlavorDecision } from '../../kernel/iptables-flavor.ts';
import { createNetlink, NetlinkBatch, type Netlink } from '../../kernel/netlink.ts';
import { SimulatedNetlink } from '../../kernel/netlink-simulated.ts';
import { SimulatedSysctl } from '../../kernel/sysctl-simulated.ts';
import { procSysctl, type Sysctl } from '../../kernel/sysctl.ts';
import type { Logger } from '../../log.ts';
import { mergeCleanup, type CleanupResult } from '../backend.ts';
import { parseCIDR, type CIDR, type IPFamily } from '../../net/ip.ts';
import { cleanupIptables } from '../xtables/cleanup.ts';
import { iptablesFamilyUnsupported } from '../xtables/family-support.ts';
import { cleanupIpvs } from './cleanup.ts';
import { DUMMY_DEVICE } from './names.ts';
import { createIpvsBackend, type IpvsBackend } from './proxier.ts';
import { ipvsSysctls, validateScheduler } from './sysctls.ts';

export interface HostIpvsOptions {
  config: ProxyConfig;
  nodeName: string;
  /** families: the families to proxy, the primary first (the secondary only when the host supports it). */
  families: readonly IPFamily[];
  flavor: FlavorChoice;
  /** dryRun: program in-memory IPVS, ipsets, links and iptables instead of the host. */
  dryRun: boolean;
  clock: Clock;
  logger: Logger;
  exec?: ExecFn;
  exists?: (path: string) => boolean;
  /**
   * afterFirstSync: what a family's backend removes of the other modes once
   * its first sync has succeeded, given the families proxied (the
   * composition's platform cleanup: nftables mode's tables); none by default,
   * and never with --dry-run.
   */
  afterFirstSync?: (family: IPFamily, proxiedFamilies: readonly IPFamily[]) => Promise<unknown>;
}

/** DryRunIpvsKernel is the simulated kernel of --dry-run: what would be programmed. */
export interface DryRunIpvsKernel {
  readonly ipvs: SimulatedIpvs;
  readonly ipset: SimulatedIpset;
  readonly netlink: SimulatedNetlink;
  /** iptables: one simulated iptables per family (IPv4, IPv6). */
  readonly iptables: ReadonlyMap<IPFamily, SimulatedIptables>;
  describe(): Promise<string>;
}

export interface HostIpvs {
  /** backends: one per family, the primary first; they share IPVS, the ipsets and kube-ipvs0. */
  backends: readonly IpvsBackend[];
  decision: FlavorDecision;
  kernel: DryRunIpvsKernel | null;
  /** unsupported: why the secondary family is not proxied, or null. */
  unsupported: string | null;
}

/** The TEST-NET-2 address kube-proxy probes schedulers with (RFC 5737: never a real service). */
const PROBE_VS = { protocol: 'TCP', address: '198.51.100.0', port: 20000 } as const;

/**
 * createHostIpvsBackend wires IPVS mode for the daemon. On the host it first
 * makes sure the kernel can do it, before anything is programmed: ipvsadm and
 * ip_vs (else KernelModuleMissingError naming ip_vs and what to load). The
 * dummy link type and the scheduler module (kube-proxy's CanUseIPVSProxier
 * probe) are checked by making kube-ipvs0 and probing the scheduler in the
 * backends' first init: at the daemon's start, after the source synced with
 * --once. With --dry-run everything is simulated and the host is only read
 * (its addresses, for node ports).
 */
export async function createHostIpvsBackends(opts: HostIpvsOptions): Promise<HostIpvs> {
  const exec = opts.exec ?? execFile;
  const log = opts.logger.child('ipvs');
  const scheduler = validateScheduler(opts.config.ipvs.scheduler);
  let ipvs: IpvsRunner;
  let ipset: IpsetRunner;
  let netlink: Netlink;
  const iptables = new Map<IPFamily, IptablesRunner>();
  let sysctl: Sysctl;
  let decision: FlavorDecision;
  let kernel: DryRunIpvsKernel | null = null;
  let unsupported: string | null = null;
  let prepare: (() => Promise<void>) | undefined;
  if (opts.dryRun) {
    const simulated = await dryRunKernel(opts, exec, log);
    kernel = simulated;
    ({ ipvs, ipset, netlink } = simulated);
    for (const [family, runner] of simulated.iptables) iptables.set(family, runner);
    decision = { flavor: simulated.iptables.get(opts.families[0])!.flavor, reason: '--dry-run: simulated kernel' };
    sysctl = await seededSysctl(opts.config.ipvs.strictARP, log);
  } else {
    await checkIpvsSupport({ exec, exists: opts.exists, scheduler });
    ipvs = createIpvsRunner({ exec });
    ipset = createIpsetRunner({ exec });
    netlink = createNetlink(exec);
    // kube-ipvs0 and the scheduler probe come with the first init (once for both families), not
    // here: --once touches nothing before its source synced; the daemon's init runs at start.
    const [runner, links] = [ipvs, netlink];
    prepare = memoize(async () => {
      await ensureDummyLink(links, scheduler);
      await probeScheduler(runner, scheduler, log);
    });
    decision = await resolveIptablesFlavor(opts.flavor, { exec });
    const flavor = decision.flavor === 'legacy' ? 'legacy' : 'nft';
    const [primary, secondary] = opts.families;
    iptables.set(primary, await createIptablesRunner({ family: primary, flavor: decision.flavor, exec, logger: log }));
    if (secondary) {
      unsupported = await iptablesFamilyUnsupported(secondary, flavor, exec);
      if (unsupported === null) iptables.set(secondary, await createIptablesRunner({ family: secondary, flavor: decision.flavor, exec, logger: log }));
    }
    sysctl = procSysctl();
  }
  log.info('using IPVS', { scheduler, iptables: decision.flavor, families: [...iptables.keys()].join(','), why: decision.reason });
  const afterFirstSync = opts.afterFirstSync;
  const backends = [...iptables].map(([family, runner]) => {
    const excludeCIDRs = excludeCIDRsOf(opts.config, family);
    return createIpvsBackend({
      config: opts.config,
      nodeName: opts.nodeName,
      family,
      ipvs,
      ipset,
      netlink,
      iptables: runner,
      sysctl,
      clock: opts.clock,
      logger: opts.logger,
      simulated: opts.dryRun,
      prepare,
      // The dashboard's cleanup action: this mode's iptables rules first (they match the sets), then IPVS objects.
      cleanup: async () => {
        const a = await cleanupIptables({ runners: [runner], logger: log });
        const b = await cleanupIpvs({ ipvs, ipset, netlink, logger: log, excludeCIDRs });
        return mergeCleanup(a, b);
      },
      // Taking over from another mode: its leftovers go once this family's objects serve (--dry-run touches nothing on the host).
      ...(afterFirstSync && !opts.dryRun ? { afterFirstSync: () => afterFirstSync(family, [...iptables.keys()]) } : {}),
    });
  });
  return { backends, decision, kernel, unsupported };
}

function excludeCIDRsOf(config: ProxyConfig, family: IPFamily): CIDR[] {
  return config.ipvs.excludeCIDRs.map((c) => parseCIDR(c.trim())).filter((c): c is CIDR => c !== null && c.family === family);
}

/** memoize runs fn once, however many callers ask (each family's backend runs init). */
function memoize(fn: () => Promise<void>): () => Promise<void> {
  let done: Promise<void> | null = null;
  return () => (done ??= fn());
}

/** ensureDummyLink creates kube-ipvs0 now when it is missing, so a kernel without the dummy type fails at start. */
async function ensureDummyLink(netlink: Netlink, scheduler: string): Promise<void> {
  const links = await netlink.show();
  if (links.has(DUMMY_DEVICE)) return;
  const b = new NetlinkBatch();
  b.addDummy(DUMMY_DEVICE);
  try {
    await netlink.batch(b.text());
  } catch (err) {
    if (/Unknown device type|not supported/i.test(errorMessage(err))) {
      throw new KernelModuleMissingError(`--proxy-mode ipvs needs the dummy link type for ${DUMMY_DEVICE}, which this kernel lacks (${errorMessage(err)}): ${moduleHint(scheduler)}`, { cause: err });
    }
    throw err;
  }
}

/**
 * probeScheduler checks that the scheduler's module exists, as kube-proxy does:
 * unless a virtual server already uses it, add and delete a probe virtual
 * server in TEST-NET-2 (one ipvsadm batch; the kernel loads ip_vs_<name>).
 */
async function probeScheduler(ipvs: IpvsRunner, scheduler: string, log: Logger): Promise<void> {
  const services = await ipvs.save();
  if (services.some((s) => s.scheduler === scheduler)) return;
  const b = new IpvsBatch();
  b.addService({ ...PROBE_VS, scheduler, persistence: 0, schedFlags: [] });
  b.deleteService(PROBE_VS);
  try {
    await ipvs.restore(b.text());
  } catch (err) {
    if (err instanceof IpvsRestoreError && err.messages.some((m) => /Scheduler .*not found/i.test(m))) {
      // The delete line failed too (no such service); nothing is left behind.
      throw new KernelModuleMissingError(`IPVS scheduler ${scheduler} is not available: the kernel has no ip_vs_${scheduler} module; ${moduleHint(scheduler)}`, { cause: err });
    }
    throw err;
  }
  log.debug('IPVS scheduler probe passed', { scheduler });
}

async function dryRunKernel(opts: HostIpvsOptions, exec: ExecFn, log: Logger): Promise<DryRunIpvsKernel> {
  const flavor = opts.flavor === 'legacy' ? 'legacy' : 'nft';
  const iptables = new Map(opts.families.map((family) => [family, new SimulatedIptables({ family, flavor, callLog: DRY_RUN_LIMITS })]));
  const ipvs = new SimulatedIpvs();
  ipvs.callLogLimits = DRY_RUN_LIMITS;
  let links: Record<string, string[]> | undefined;
  try {
    // Node ports answer on the host's addresses: read them (read only) so the dry run shows real node IPs.
    const table = await createNetlink(exec).show();
    links = {};
    for (const [name, addrs] of table) if (name !== DUMMY_DEVICE) links[name] = addrs.map((a) => `${a.address}/${a.prefixLength}`);
  } catch (err) {
    // Without the host's addresses the dry run shows a simulated eth0 10.0.0.10 instead.
    log.debug('dry run: cannot read host addresses, simulating eth0', { err: errorMessage(err) });
  }
  const netlink = new SimulatedNetlink(links);
  netlink.callLogLimits = DRY_RUN_LIMITS;
  const matchSet = /--match-set (\S+)/;
  // A set an iptables rule matches cannot be destroyed: the simulated kernel checks the simulated iptables.
  const ipset = new SimulatedIpset({
    references: (name) => {
      let n = 0;
      for (const ipt of iptables.values()) for (const t of ipt.dump().tables.values()) for (const c of t.chains.values()) for (const r of c.rules) if (matchSet.exec(r.spec)?.[1] === name) n++;
      return n;
    },
  });
  ipset.callLogLimits = DRY_RUN_LIMITS;
  return {
    ipvs,
    ipset,
    netlink,
    iptables,
    async describe() {
      const bound = netlink.addresses(DUMMY_DEVICE);
      return [
        '# ipvsadm -Sn',
        ipvs.saveText().trimEnd(),
        '# ipset save',
        ipset.saveText().trimEnd(),
        `# ip addr show ${DUMMY_DEVICE}`,
        ...bound.map((a) => (a.includes(':') ? `inet6 ${a}/128 scope global ${DUMMY_DEVICE}` : `inet ${a}/32 scope global ${DUMMY_DEVICE}`)),
        ...[...iptables].flatMap(([family, ipt]) => [
          `# ${family === 'IPv6' ? 'ip6tables' : 'iptables'}-save -t nat -t filter`,
          formatIptablesSave(ipt.dump(), { tables: ['nat', 'filter'] }).trimEnd(),
        ]),
        '',
      ].join('\n');
    },
  };
}

/** seededSysctl is an in-memory /proc/sys for --dry-run: IPVS settings start at the kernel defaults (0). */
async function seededSysctl(strictARP: boolean, log: Logger): Promise<SimulatedSysctl> {
  const host = procSysctl();
  const values: Record<string, string> = {};
  for (const s of ipvsSysctls(strictARP, '5.10.0')) {
    try {
      values[s.name] = await host.read(s.name);
    } catch (err) {
      // Not readable here (no ip_vs module): the dry run assumes the kernel default, 0.
      log.debug('dry run: sysctl not readable, assuming 0', { name: s.name, err: errorMessage(err) });
      values[s.name] = '0';
    }
  }
  return new SimulatedSysctl(values);
}

/**
 * cleanupIpvsHost is --cleanup for IPVS mode (run after the iptables cleanup):
 * virtual servers when the kernel has IPVS (skipped with a note otherwise, never
 * an error), then ipsets and kube-ipvs0 in any case.
 */
export async function cleanupIpvsHost(opts: { config: ProxyConfig; logger: Logger; exec?: ExecFn; exists?: (p: string) => boolean }): Promise<CleanupResult> {
  const exec = opts.exec ?? execFile;
  const log = opts.logger.child('cleanup');
  let ipvs: IpvsRunner | null = createIpvsRunner({ exec });
  let why = '';
  try {
    await checkIpvsSupport({ exec, exists: opts.exists, scheduler: opts.config.ipvs.scheduler });
  } catch (err) {
    // No IPVS means no virtual servers to remove; ipsets and kube-ipvs0 may still be there.
    ipvs = null;
    why = errorMessage(err);
  }
  return cleanupIpvs({ ipvs, ipset: createIpsetRunner({ exec }), netlink: createNetlink(exec), logger: log, excludeCIDRs: excludeCIDRsOf(opts.config, 'IPv4'), ipvsSkipReason: why });
}

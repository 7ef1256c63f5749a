import type { Clock } from '../../clock.ts';
import type { ProxyConfig } from '../../config/types.ts';
import { ConfigInvalidError, errorMessage } from '../../errors.ts';
import { execFile, type ExecFn } from '../../kernel/exec.ts';
import { createIptablesRunner, type IptablesRunner } from '../../kernel/iptables.ts';
import { DRY_RUN_LIMITS } from '../../kernel/call-log.ts';
import { SimulatedIptables } from '../../kernel/iptables-simulated.ts';
import { resolveIptablesFlavor, type FlavorChoice, type FlavorDecision } from '../../kernel/iptables-flavor.ts';
import { hostInterfaces } from '../../kernel/netif.ts';
import { createNfacctRunner, type NfacctRunner } from '../../kernel/nfacct.ts';
import { SimulatedSysctl } from '../../kernel/sysctl-simulated.ts';
import { procSysctl, type Sysctl } from '../../kernel/sysctl.ts';
import type { Logger } from '../../log.ts';
import type { IPFamily } from '../../net/ip.ts';
import type { PacketCounters } from '../metrics/kube-proxy-metrics.ts';
import { cleanupIptables } from '../xtables/cleanup.ts';
import { iptablesFamilyUnsupported } from '../xtables/family-support.ts';
import { NO_NFACCT, setupNfacctCounters, type NfacctCounters } from './nfacct.ts';
import { createIptablesBackend, SYSCTL_ROUTE_LOCALNET, SYSCTL_TCP_BE_LIBERAL, type IptablesBackend } from './proxier.ts';

export interface HostIptablesOptions {
  config: ProxyConfig;
  nodeName: string;
  family?: IPFamily;
  /** flavor: --iptables-flavor. */
  flavor: FlavorChoice;
  /** dryRun: program an in-memory kernel (SimulatedIptables) instead of the host. */
  dryRun: boolean;
  clock: Clock;
  logger: Logger;
  exec?: ExecFn;
  /** sysctl: /proc/sys (default: the host's; unit tests pass a simulated one, never writing the machine's). */
  sysctl?: Sysctl;
  /** nfacct: the accounting objects' runner (default: the nfacct command; none in --dry-run). */
  nfacct?: NfacctRunner | null;
  /** nfacctSetup: the nfacct counters' one-time creation shared by the families' backends (default: this backend's own). */
  nfacctSetup?: () => Promise<NfacctCounters>;
  /** proxiedFamilies: every family this process proxies, read at the first sync (given to afterFirstSync; default: this family only). */
  proxiedFamilies?: () => readonly IPFamily[];
  /**
   * afterFirstSync: what this family's backend removes of the other modes once
   * its first sync has succeeded (the composition's platform cleanup: nftables
   * mode's tables); none by default, and never with --dry-run.
   */
  afterFirstSync?: (family: IPFamily, proxiedFamilies: readonly IPFamily[]) => Promise<unknown>;
}

export interface HostIptables {
  backend: IptablesBackend;
  family: IPFamily;
  decision: FlavorDecision;
  /** kernel is the simulated kernel in --dry-run (its save() is what would be programmed), else null. */
  kernel: SimulatedIptables | null;
  /** packetCounters: the reader of kube-proxy's nfacct counters at a scrape once init made them; null before, or where nfacct is unavailable. */
  packetCounters: () => PacketCounters | null;
}

/**
 * createHostIptablesBackend wires the iptables backend for the daemon: it
 * picks the iptables flavour (--iptables-flavor, auto as kube-proxy's images
 * do), and the real runner, /proc/sys and interface addresses, or in --dry-run
 * the simulated kernel and an in-memory /proc/sys seeded from the host's values
 * (reads only: a dry run changes nothing on the host).
 */
export async function createHostIptablesBackend(opts: HostIptablesOptions): Promise<HostIptables> {
  const exec = opts.exec ?? execFile;
  const family = opts.family ?? 'IPv4';
  const log = opts.logger.child('iptables');
  const afterFirstSync = opts.afterFirstSync;
  let runner: IptablesRunner;
  let decision: FlavorDecision;
  let kernel: SimulatedIptables | null = null;
  let sysctl = opts.sysctl ?? procSysctl();
  if (opts.dryRun) {
    kernel = new SimulatedIptables({ family, flavor: opts.flavor === 'legacy' ? 'legacy' : 'nft', callLog: DRY_RUN_LIMITS });
    runner = kernel;
    decision = { flavor: kernel.flavor, reason: '--dry-run: simulated kernel' };
    const seeded: Record<string, string> = {};
    for (const name of [SYSCTL_ROUTE_LOCALNET, SYSCTL_TCP_BE_LIBERAL]) {
      try {
        seeded[name] = await sysctl.read(name);
      } catch (err) {
        // Not readable here (no conntrack module, no /proc): the dry run assumes the kernel default, 0.
        log.debug('dry run: sysctl not readable, assuming 0', { name, err: errorMessage(err) });
        seeded[name] = '0';
      }
    }
    sysctl = new SimulatedSysctl(seeded);
  } else {
    decision = await resolveIptablesFlavor(opts.flavor, { exec });
    runner = await createIptablesRunner({ family, flavor: decision.flavor, exec, logger: log });
  }
  log.info('using iptables', { flavor: decision.flavor, why: decision.reason });
  // The nfacct objects are made by the backend's init (prepare below), not here: --once touches
  // nothing before its source synced; the daemon's init runs at start.
  const setupNfacct = opts.nfacctSetup ?? nfacctSetup(opts, exec, log);
  let nfacct = NO_NFACCT;
  const backend = createIptablesBackend({
    config: opts.config,
    nodeName: opts.nodeName,
    family,
    runner,
    netif: hostInterfaces(exec),
    sysctl,
    clock: opts.clock,
    logger: opts.logger,
    // The dashboard's cleanup action removes what kproxy made in the flavour it uses;
    // --cleanup (cleanupIptablesHost) sweeps every flavour and family.
    cleanup: () => cleanupIptables({ runners: [runner], logger: log }),
    prepare: async () => {
      nfacct = await setupNfacct();
    },
    nfacct: () => nfacct.rules,
    // Taking over from another mode: its leftovers go once this family's rules serve (--dry-run touches nothing on the host).
    ...(afterFirstSync && !opts.dryRun ? { afterFirstSync: () => afterFirstSync(family, opts.proxiedFamilies?.() ?? [family]) } : {}),
  });
  return { backend, family, decision, kernel, packetCounters: () => nfacct.read };
}

/**
 * nfacctSetup returns the one-time creation of kube-proxy's nfacct counters
 * (once, whichever family's init asks first: they are the network
 * namespace's, not a family's). The simulated kernel of --dry-run has no
 * accounting objects: its rules are written without -m nfacct.
 */
function nfacctSetup(opts: HostIptablesOptions, exec: ExecFn, log: Logger): () => Promise<NfacctCounters> {
  const runner = opts.nfacct !== undefined ? opts.nfacct : opts.dryRun ? null : createNfacctRunner({ exec });
  let made: Promise<NfacctCounters> | null = null;
  return () => (made ??= runner ? setupNfacctCounters(runner, { clock: opts.clock, logger: log }) : Promise.resolve(NO_NFACCT));
}

export interface HostIptablesFamilies {
  /** hosts: one backend per family, the primary first. */
  hosts: HostIptables[];
  decision: FlavorDecision;
  /** unsupported: why the secondary family is not proxied (its iptables is absent), or null. */
  unsupported: string | null;
}

/**
 * createHostIptablesBackends wires one iptables backend per IP family, the
 * primary first: the secondary family too when its iptables works on this
 * host (kube-proxy's platformCheckSupported: ip6tables can list the nat
 * table), in the flavour chosen for the primary one. --dry-run simulates both.
 */
export async function createHostIptablesBackends(opts: Omit<HostIptablesOptions, 'family'> & { families: readonly IPFamily[] }): Promise<HostIptablesFamilies> {
  const exec = opts.exec ?? execFile;
  const [primary, secondary] = opts.families;
  if (!opts.dryRun && primary === 'IPv6') await requirePrimaryFamily(primary, opts.config, exec);
  const hosts: HostIptables[] = [];
  const proxiedFamilies = () => hosts.map((h) => h.family);
  // One set of nfacct counters for the node, made by whichever family's init comes first.
  const nfacctSetupShared = opts.nfacctSetup ?? nfacctSetup(opts, exec, opts.logger.child('iptables'));
  const first = await createHostIptablesBackend({ ...opts, family: primary, proxiedFamilies, nfacctSetup: nfacctSetupShared });
  hosts.push(first);
  let unsupported: string | null = null;
  if (secondary) {
    const flavor = first.decision.flavor === 'legacy' ? 'legacy' : 'nft';
    unsupported = opts.dryRun ? null : await iptablesFamilyUnsupported(secondary, flavor, exec);
    if (unsupported === null) hosts.push(await createHostIptablesBackend({ ...opts, family: secondary, flavor, proxiedFamilies, nfacctSetup: nfacctSetupShared }));
  }
  return { hosts, decision: first.decision, unsupported };
}

/**
 * requirePrimaryFamily refuses to start (exit 1, naming bindAddress) when the
 * host cannot proxy the primary family: an IPv6 bindAddress on a host whose
 * ip6tables does not work would leave the node's primary family unprogrammed.
 */
export async function requirePrimaryFamily(family: IPFamily, config: Pick<ProxyConfig, 'bindAddress'>, exec: ExecFn = execFile): Promise<void> {
  const why = await iptablesFamilyUnsupported(family, 'nft', exec);
  if (why !== null && (await iptablesFamilyUnsupported(family, 'legacy', exec)) !== null) {
    throw new ConfigInvalidError(`bindAddress: Invalid value: ${JSON.stringify(config.bindAddress)}: makes ${family} the primary IP family, but this host cannot proxy ${family} (${why})`);
  }
}

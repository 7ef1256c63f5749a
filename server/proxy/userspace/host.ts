import { readFile } from 'node:fs/promises';
import type { Clock } from '../../clock.ts';
import type { ProxyConfig } from '../../config/types.ts';
import { errorMessage } from '../../errors.ts';
import type { EventRecorder } from '../../events/event-recorder.ts';
import { DRY_RUN_LIMITS } from '../../kernel/call-log.ts';
import { execFile, type ExecFn } from '../../kernel/exec.ts';
import { createIptablesRunner, type IptablesRunner } from '../../kernel/iptables.ts';
import { resolveIptablesFlavor, type FlavorChoice, type FlavorDecision } from '../../kernel/iptables-flavor.ts';
import { formatIptablesSave } from '../../kernel/iptables-save-parser.ts';
import { SimulatedIptables } from '../../kernel/iptables-simulated.ts';
import { hostInterfaces } from '../../kernel/netif.ts';
import { hostSockets } from '../../kernel/sockets.ts';
import { SimulatedSockets } from '../../kernel/sockets-simulated.ts';
import type { Logger } from '../../log.ts';
import type { IPFamily } from '../../net/ip.ts';
import { cleanupIptables } from '../xtables/cleanup.ts';
import { describeProxySockets } from './describe.ts';
import { createUserspaceBackend, type UserspaceBackend } from './proxier.ts';

export interface HostUserspaceOptions {
  config: ProxyConfig;
  nodeName: string;
  family?: IPFamily;
  flavor: FlavorChoice;
  /** dryRun: the portals go to a simulated iptables and the sockets to an in-memory network: nothing on the host. */
  dryRun: boolean;
  clock: Clock;
  logger: Logger;
  events?: EventRecorder;
  exec?: ExecFn;
  /** openFilesLimit: RLIMIT_NOFILE's soft limit (default: read from /proc/self/limits). */
  openFilesLimit?: () => Promise<number | null>;
  /**
   * afterFirstSync: what the backend removes of the other modes once its
   * first sync has succeeded and the portals serve (the composition's platform
   * cleanup: nftables mode's tables and IPVS mode's objects; the other modes'
   * chains are the full sync's own work); none by default, and never with
   * --dry-run.
   */
  afterFirstSync?: (family: IPFamily, proxiedFamilies: readonly IPFamily[]) => Promise<unknown>;
}

/** DryRunUserspaceKernel is --dry-run's simulated kernel and network: what would be programmed and opened. */
export interface DryRunUserspaceKernel {
  readonly iptables: SimulatedIptables;
  readonly sockets: SimulatedSockets;
  describe(): Promise<string>;
}

export interface HostUserspace {
  backend: UserspaceBackend;
  decision: FlavorDecision;
  kernel: DryRunUserspaceKernel | null;
}

/**
 * createHostUserspaceBackend wires the userspace mode for the daemon: the
 * iptables runner for the portals (flavour chosen as in iptables mode) and the
 * host's sockets, or with --dry-run a simulated iptables and an in-memory
 * network (no port is bound on the host; the host's addresses are only read).
 * It warns when the process may open fewer files than the limits allow
 * connections (each relayed connection holds two descriptors).
 */
export async function createHostUserspaceBackend(opts: HostUserspaceOptions): Promise<HostUserspace> {
  const exec = opts.exec ?? execFile;
  const family = opts.family ?? 'IPv4';
  const log = opts.logger.child('userspace');
  const afterFirstSync = opts.afterFirstSync;
  let iptables: IptablesRunner;
  let decision: FlavorDecision;
  let kernel: DryRunUserspaceKernel | null = null;
  let sockets;
  if (opts.dryRun) {
    const sim = new SimulatedIptables({ family, flavor: opts.flavor === 'legacy' ? 'legacy' : 'nft', callLog: DRY_RUN_LIMITS });
    const net = new SimulatedSockets();
    iptables = sim;
    sockets = net;
    decision = { flavor: sim.flavor, reason: '--dry-run: simulated kernel' };
    kernel = {
      iptables: sim,
      sockets: net,
      async describe() {
        return [
          '# iptables-save -t nat -t filter',
          formatIptablesSave(sim.dump(), { tables: ['nat', 'filter'] }).trimEnd(),
          '# (simulated: nothing is bound on the host)',
          ...describeProxySockets(backend.intended(), opts.config.bindAddress),
          '',
        ].join('\n');
      },
    };
  } else {
    decision = await resolveIptablesFlavor(opts.flavor, { exec });
    iptables = await createIptablesRunner({ family, flavor: decision.flavor, exec, logger: log });
    sockets = hostSockets();
    await warnOpenFiles(opts.config, log, opts.openFilesLimit ?? openFilesSoftLimit);
  }
  log.info('using the userspace proxy', { iptables: decision.flavor, why: decision.reason, listen: opts.config.bindAddress, ...opts.config.userspace });
  // Declared before --dry-run's describe() reads it.
  const backend: UserspaceBackend = createUserspaceBackend({
    config: opts.config,
    nodeName: opts.nodeName,
    family,
    iptables,
    sockets,
    netif: hostInterfaces(exec),
    clock: opts.clock,
    logger: opts.logger,
    events: opts.events,
    // The dashboard's cleanup action removes the portals in the flavour in use; --cleanup sweeps every flavour.
    cleanup: () => cleanupIptables({ runners: [iptables], logger: log }),
    // Taking over from another mode (kube-proxy's or kproxy's): its leftovers go once the portals serve (--dry-run touches nothing on the host).
    ...(afterFirstSync && !opts.dryRun ? { afterFirstSync: () => afterFirstSync(family, [family]) } : {}),
  });
  return { backend, decision, kernel };
}

/** openFilesSoftLimit reads RLIMIT_NOFILE's soft limit of this process (null when unknown or unlimited). */
async function openFilesSoftLimit(): Promise<number | null> {
  const text = await readFile('/proc/self/limits', 'utf8');
  const m = /^Max open files\s+(\d+|unlimited)/m.exec(text);
  return m && m[1] !== 'unlimited' ? Number(m[1]) : null;
}

async function warnOpenFiles(config: ProxyConfig, log: Logger, read: () => Promise<number | null>): Promise<void> {
  const u = config.userspace;
  let limit: number | null;
  try {
    limit = await read();
  } catch (err) {
    // Unknown limit: a too-low one shows later as accept failures (EMFILE), which are logged.
    log.debug('cannot read the open files limit', { err: errorMessage(err) });
    return;
  }
  if (limit === null) return;
  // Two descriptors per TCP connection, one per UDP session, and room for sockets, files and the dashboard.
  const need = u.maxConnections > 0 && u.maxUDPSessions > 0 ? 2 * u.maxConnections + u.maxUDPSessions + 1024 : Infinity;
  if (need > limit) {
    log.warn('the process may open fewer files than the userspace limits allow connections; past it new connections fail (EMFILE) until the limit is raised (ulimit -n) or the limits lowered', {
      openFilesLimit: limit,
      needed: Number.isFinite(need) ? need : 'unbounded (a limit is 0)',
      maxConnections: u.maxConnections,
      maxUDPSessions: u.maxUDPSessions,
    });
  }
}

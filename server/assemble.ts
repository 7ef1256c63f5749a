import type { Clock } from './clock.ts';
import { otherFamily } from './net/ip.ts';
import { realClock } from './clock.ts';
import { primaryFamily } from './config/families.ts';
import type { LoadedConfiguration } from './config/load.ts';
import { PROXY_MODES } from './config/proxy-mode.ts';
import { Daemon } from './daemon.ts';
import { IptablesView } from './dashboard/iptables/view.ts';
import { IpvsView } from './dashboard/ipvs/view.ts';
import { NftablesView } from './dashboard/nftables/view.ts';
import { ADDRESSES_TABLE, IPVS_TABLE, SETS_TABLE } from './dashboard/ipvs/tables.ts';
import { FamilyKernelView } from './dashboard/family-view.ts';
import type { KernelViewProvider } from './dashboard/kernel-view.ts';
import type { PacketTracerFactory } from './dashboard/packet-tracer.ts';
import { ProxyModeUnsupportedError } from './errors.ts';
import { ApiEventSink } from './events/event-sink.ts';
import { teeRecorder, type EventRecorder } from './events/event-recorder.ts';
import { KubeEventRecorder } from './events/kube-event-recorder.ts';
import { MemoryEventRecorder } from './events/memory-event-recorder.ts';
import type { Logger } from './log.ts';
import type { Backend } from './proxy/backend.ts';
import type { NetlinkNftRunner } from './kernel/nft-netlink.ts';
import { registerNetlinkHelperMetrics, registerXtablesLockMetrics } from './proxy/metrics/kernel-writer-metrics.ts';
import type { PacketCounters } from './proxy/metrics/kube-proxy-metrics.ts';
import { createHostIptablesBackends } from './proxy/iptables/index.ts';
import { createHostIpvsBackends } from './proxy/ipvs/index.ts';
import { createHostNftablesBackends } from './proxy/nftables/index.ts';
import type { ProxyMetrics } from './proxy/metrics/metrics.ts';
import { otherModesCleanup } from './platform-cleanup.ts';
import { createHostUserspaceBackend, registerUserspaceMetrics } from './proxy/userspace/index.ts';
import { UserspaceView } from './dashboard/userspace/view.ts';
import { ConntrackSetup } from './proxy/conntrack/setup.ts';
import { FileSource } from './sources/file/file-source.ts';
import { KubeSource } from './sources/k8s/kube-source.ts';
import { loadKubeConfig } from './sources/k8s/kubeconfig.ts';
import type { Source } from './proxy/source.ts';
import { dashboardTracer } from './trace/dashboard-trace.ts';

/** Assembled is a daemon with the parts the CLI and the dashboard reach into. */
export interface Assembled {
  readonly daemon: Daemon;
  /** memoryEvents keeps recent Events for logs and the dashboard, whatever the source. */
  readonly memoryEvents: MemoryEventRecorder;
  /** kubeEvents writes Events to the API server (Kubernetes source only). */
  readonly kubeEvents: KubeEventRecorder | null;
  /** dryRunKernel: the simulated kernel of --dry-run (what would be programmed), else null. */
  readonly dryRunKernel: { describe(): Promise<string> } | null;
  /** describeBackend: one phrase for the start-up log and --once summary ("iptables (nft)"). */
  readonly backendDescription: string;
  /** conntrack: start-up sysctls, the stale-entry cleaner (already a sync observer) and counts; null with --once. */
  readonly conntrack: ConntrackSetup | null;
  /**
   * kernelView builds the dashboard's view of this mode's kernel objects; it is
   * chosen here, with the backend, so a new mode brings its own view.
   */
  readonly kernelView: (logger: Logger) => KernelViewProvider;
  /** tracer builds the dashboard's packet tracer over its kernel read (the tracer sits above the dashboard, which never imports it). */
  readonly tracer: PacketTracerFactory;
  /**
   * packetCounters: kube-proxy's nfacct packet counters (iptables mode where the kernel has nfacct), else null;
   * known once the backends' init made them (the daemon's start).
   */
  readonly packetCounters: () => PacketCounters | null;
  /** attachMetrics registers the backend's own metric families (the userspace relay's, its writers': xtables lock waits, the netlink helper); null when it has none. */
  readonly attachMetrics: ((metrics: ProxyMetrics) => void) | null;
}

/**
 * assembleDaemon builds the parts a configuration asks for: the source (a
 * manifest folder or the Kubernetes API), the Event recorders, and the
 * backend on the host kernel or, with --dry-run, on the simulated one.
 * Nothing is programmed yet.
 */
export async function assembleDaemon(loaded: LoadedConfiguration, logger: Logger, clock: Clock = realClock): Promise<Assembled> {
  const { config, run, nodeName } = loaded;
  const memoryEvents = new MemoryEventRecorder({ clock, logger: logger.child('events') });
  let kubeEvents: KubeEventRecorder | null = null;
  let source: Source;
  if (run.source) {
    source = new FileSource({ path: run.source.slice('file:'.length), nodeName, clock, logger: logger.child('source'), watch: !run.once });
  } else {
    const { kubeConfig, api } = await loadKubeConfig({ kubeconfig: run.kubeconfig ?? undefined });
    source = new KubeSource({ kubeConfig, nodeName, clock, logger: logger.child('source'), serviceCIDRs: config.mode === 'nftables' });
    kubeEvents = new KubeEventRecorder({ sink: new ApiEventSink(api), reportingInstance: nodeName, clock, logger: logger.child('events') });
  }
  const events: EventRecorder = kubeEvents ? teeRecorder(memoryEvents, kubeEvents) : memoryEvents;

  let backends: Backend[];
  let dryRunKernel: Assembled['dryRunKernel'] = null;
  let backendDescription: string;
  let kernelView: Assembled['kernelView'];
  let packetCounters: () => PacketCounters | null = () => null;
  // Both families when the host supports the secondary one, as kube-proxy (see config/families.ts).
  const primary = primaryFamily(config);
  const families = [primary, otherFamily(primary)] as const;
  const stack = (n: number) => (n === 2 ? `dual-stack ${families.join('+')}` : `single-stack ${primary}`);
  let attachMetrics: Assembled['attachMetrics'] = null;
  // What the other modes left goes after each backend's first successful sync (never with --dry-run).
  const afterFirstSync = otherModesCleanup(config.mode, { config, logger });
  switch (config.mode) {
    case 'iptables': {
      const host = await createHostIptablesBackends({ config, nodeName, families, flavor: run.iptablesFlavor, dryRun: run.dryRun, clock, logger, afterFirstSync });
      if (host.unsupported) logger.info(`no ${families[1]} support on this host: proxying ${primary} only`, { why: host.unsupported });
      backends = host.hosts.map((h) => h.backend);
      backendDescription = `iptables (${host.decision.flavor}, ${stack(backends.length)}${run.dryRun ? ', simulated kernel' : ''})`;
      const kernels = host.hosts.flatMap((h) => (h.kernel ? [{ family: h.family, kernel: h.kernel }] : []));
      if (kernels.length) {
        dryRunKernel = {
          describe: async () => (await Promise.all(kernels.map(async (k) => `# ${k.family === 'IPv6' ? 'ip6tables' : 'iptables'}-save\n${await k.kernel.save()}`))).join(''),
        };
      }
      // One view per family's iptables; the IPv6 tables show as ip6-nat and ip6-filter.
      kernelView = (log) => new FamilyKernelView(host.hosts.map((h) => ({ family: h.family, provider: new IptablesView({ runner: h.backend.runner, simulated: run.dryRun, logger: log }) })));
      // kube-proxy's nfacct counters are the node's (one set for both families).
      packetCounters = host.hosts[0].packetCounters;
      attachMetrics = (m) =>
        registerXtablesLockMetrics(
          m.registry,
          host.hosts.map((h) => ({ family: h.family, runner: h.backend.runner })),
        );
      break;
    }
    case 'ipvs': {
      // Checks ip_vs, the dummy link type and the scheduler first: a kernel without them fails here, before anything is programmed.
      const host = await createHostIpvsBackends({ config, nodeName, families, flavor: run.iptablesFlavor, dryRun: run.dryRun, clock, logger, afterFirstSync });
      if (host.unsupported) logger.info(`no ${families[1]} support on this host: proxying ${primary} only`, { why: host.unsupported });
      backends = [...host.backends];
      backendDescription = `ipvs (scheduler ${config.ipvs.scheduler || 'rr'}, iptables ${host.decision.flavor}, ${stack(backends.length)}${run.dryRun ? ', simulated kernel' : ''})`;
      const kernel = host.kernel;
      if (kernel) dryRunKernel = { describe: () => kernel.describe() };
      attachMetrics = (m) =>
        registerXtablesLockMetrics(
          m.registry,
          host.backends.map((b) => ({ family: b.family, runner: b.runners.iptables })),
        );
      // The families share IPVS, the ipsets and kube-ipvs0; each has its own ip6tables/iptables tables.
      kernelView = () =>
        new FamilyKernelView(
          host.backends.map((b) => ({ family: b.family, provider: new IpvsView({ backend: b, simulated: run.dryRun, clock }) })),
          [IPVS_TABLE, SETS_TABLE, ADDRESSES_TABLE],
        );
      break;
    }
    case 'nftables': {
      // Checks nft and nf_tables first: a host without them fails here, before anything is programmed.
      const host = await createHostNftablesBackends({ config, nodeName, families, dryRun: run.dryRun, backend: run.nftablesBackend, clock, logger, afterFirstSync });
      if (host.unsupported) logger.info(`no ${families[1]} support on this host: proxying ${primary} only`, { why: host.unsupported });
      backends = host.backends;
      const tables = backends.map((b) => `${b.family === 'IPv6' ? 'ip6' : 'ip'} kube-proxy`).join(', ');
      backendDescription = `nftables (table${backends.length > 1 ? 's' : ''} ${tables}${host.support ? `, nft ${host.support.nftVersion}` : ''}, ${stack(backends.length)}${run.dryRun ? ', simulated kernel' : ''})`;
      const kernel = host.kernel;
      if (kernel) dryRunKernel = { describe: () => kernel.describe() };
      // One view per family's table; the ip6 kube-proxy table shows as ip6-kube-proxy.
      kernelView = () => new FamilyKernelView(host.backends.map((b) => ({ family: b.family, provider: new NftablesView({ backend: b, simulated: run.dryRun }) })));
      // The families share one runner: with the netlink writer, one helper program.
      const writer = host.backends[0]?.runner as Partial<NetlinkNftRunner> | undefined;
      if (typeof writer?.helperStats === 'function') attachMetrics = (m) => registerNetlinkHelperMetrics(m.registry, () => writer.helperStats!());
      break;
    }
    case 'userspace': {
      // One family, the primary one, as kube-proxy's userspace proxier (it had no dual-stack).
      const host = await createHostUserspaceBackend({ config, nodeName, family: primary, flavor: run.iptablesFlavor, dryRun: run.dryRun, clock, logger, events, afterFirstSync });
      backends = [host.backend];
      logger.info(`userspace mode proxies the primary IP family only: ${primary}`);
      backendDescription = `userspace (relay on ${config.bindAddress}, iptables ${host.decision.flavor}${run.dryRun ? ', simulated kernel and sockets' : ''})`;
      const kernel = host.kernel;
      if (kernel) dryRunKernel = { describe: () => kernel.describe() };
      const userspace = host.backend;
      kernelView = (log) => new UserspaceView({ backend: userspace, simulated: run.dryRun, clock, logger: log });
      attachMetrics = (m) => {
        registerUserspaceMetrics(m.registry, userspace);
        registerXtablesLockMetrics(m.registry, [{ family: primary, runner: userspace.runner }]);
      };
      break;
    }
    default:
      throw new ProxyModeUnsupportedError(`--proxy-mode ${config.mode} is not available in this kproxy version (available: ${PROXY_MODES.join(', ')})`);
  }
  const daemon = new Daemon({ config, run, nodeName, logger, clock, backends, source, events });
  // --once programs rules and exits: no stale-entry cleanup or sysctls for a one-shot run.
  const conntrack = run.once ? null : new ConntrackSetup({ config, families: daemon.proxy.families, nodeName, dryRun: run.dryRun, clock, logger: logger.child('conntrack'), events });
  // Each family's cleaner hears its own family's syncs (its stale flows are in that family's table).
  if (conntrack) for (const p of daemon.proxy.proxiers) p.loop.addObserver(conntrack.cleaners.get(p.family)!);
  return { daemon, memoryEvents, kubeEvents, dryRunKernel, backendDescription, conntrack, kernelView, tracer: dashboardTracer(), packetCounters, attachMetrics };
}

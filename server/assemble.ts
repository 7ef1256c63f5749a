import type { Clock } from './clock.ts';
import { realClock } from './clock.ts';
import type { LoadedConfiguration } from './config/load.ts';
import { Daemon } from './daemon.ts';
import { IptablesView } from './dashboard/iptables/view.ts';
import { IpvsView } from './dashboard/ipvs/view.ts';
import type { KernelViewProvider } from './dashboard/kernel-view.ts';
import { ProxyModeUnsupportedError } from './errors.ts';
import { ApiEventSink } from './events/event-sink.ts';
import { teeRecorder, type EventRecorder } from './events/event-recorder.ts';
import { KubeEventRecorder } from './events/kube-event-recorder.ts';
import { MemoryEventRecorder } from './events/memory-event-recorder.ts';
import type { SimulatedIptables } from './kernel/iptables-simulated.ts';
import type { Logger } from './log.ts';
import type { Backend } from './proxy/backend.ts';
import type { PacketCounters } from './proxy/metrics/kube-proxy-metrics.ts';
import { createHostIptablesBackend } from './proxy/iptables/host.ts';
import { createHostIpvsBackend } from './proxy/ipvs/host.ts';
import { createHostNftablesBackend } from './proxy/nftables/host.ts';
import { ConntrackSetup } from './proxy/conntrack/setup.ts';
import { FileSource } from './sources/file/file-source.ts';
import { KubeSource } from './sources/k8s/kube-source.ts';
import { loadKubeConfig } from './sources/k8s/kubeconfig.ts';
import type { Source } from './sources/source.ts';

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
   * chosen here, with the backend, so a new mode brings its own view (null:
   * the mode has none yet and the dashboard is off).
   */
  readonly kernelView: ((logger: Logger) => KernelViewProvider) | null;
  /** packetCounters: kube-proxy's nfacct packet counters (iptables mode where the kernel has nfacct), else null. */
  readonly packetCounters: PacketCounters | null;
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
    const { kubeConfig } = loadKubeConfig({ kubeconfig: run.kubeconfig ?? undefined });
    source = new KubeSource({ kubeConfig, nodeName, clock, logger: logger.child('source'), serviceCIDRs: config.mode === 'nftables' });
    kubeEvents = new KubeEventRecorder({ sink: new ApiEventSink(kubeConfig), reportingInstance: nodeName, clock, logger: logger.child('events') });
  }
  const events: EventRecorder = kubeEvents ? teeRecorder(memoryEvents, kubeEvents) : memoryEvents;

  let backend: Backend;
  let dryRunKernel: Assembled['dryRunKernel'] = null;
  let backendDescription: string;
  let kernelView: Assembled['kernelView'];
  let packetCounters: PacketCounters | null = null;
  switch (config.mode) {
    case 'iptables': {
      const host = await createHostIptablesBackend({ config, nodeName, flavor: run.iptablesFlavor, dryRun: run.dryRun, clock, logger });
      backend = host.backend;
      backendDescription = `iptables (${host.decision.flavor}${run.dryRun ? ', simulated kernel' : ''})`;
      const kernel: SimulatedIptables | null = host.kernel;
      if (kernel) dryRunKernel = { describe: () => kernel.save() };
      const runner = host.backend.runner;
      kernelView = (log) => new IptablesView({ runner, simulated: run.dryRun, logger: log });
      packetCounters = host.packetCounters;
      break;
    }
    case 'ipvs': {
      // Checks ip_vs, the dummy link type and the scheduler first: a kernel without them fails here, before anything is programmed.
      const host = await createHostIpvsBackend({ config, nodeName, flavor: run.iptablesFlavor, dryRun: run.dryRun, clock, logger });
      backend = host.backend;
      backendDescription = `ipvs (scheduler ${config.ipvs.scheduler || 'rr'}, iptables ${host.decision.flavor}${run.dryRun ? ', simulated kernel' : ''})`;
      const kernel = host.kernel;
      if (kernel) dryRunKernel = { describe: () => kernel.describe() };
      const ipvsBackend = host.backend;
      kernelView = () => new IpvsView({ backend: ipvsBackend, simulated: run.dryRun, clock });
      break;
    }
    case 'nftables': {
      // Checks nft and nf_tables first: a host without them fails here, before anything is programmed.
      const host = await createHostNftablesBackend({ config, nodeName, dryRun: run.dryRun, clock, logger });
      backend = host.backend;
      backendDescription = `nftables (table ip kube-proxy${host.support ? `, nft ${host.support.nftVersion}` : ''}${run.dryRun ? ', simulated kernel' : ''})`;
      const kernel = host.kernel;
      if (kernel) dryRunKernel = { describe: () => kernel.describe() };
      // The dashboard's nftables view is not there yet (its own issue): the daemon runs with the dashboard off.
      kernelView = null;
      break;
    }
    default:
      throw new ProxyModeUnsupportedError(`--proxy-mode ${config.mode} is not available in this kproxy version (available: iptables, nftables, ipvs)`);
  }
  const daemon = new Daemon({ config, run, nodeName, logger, clock, backend, source, events });
  // --once programs rules and exits: no stale-entry cleanup or sysctls for a one-shot run.
  const conntrack = run.once ? null : new ConntrackSetup({ config, family: daemon.state.family, nodeName, dryRun: run.dryRun, clock, logger: logger.child('conntrack'), events });
  if (conntrack) daemon.loop.addObserver(conntrack.cleaner);
  return { daemon, memoryEvents, kubeEvents, dryRunKernel, backendDescription, conntrack, kernelView, packetCounters };
}

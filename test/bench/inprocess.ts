/**
 * inprocess assembles a whole kproxy daemon in this process, as cli.ts does
 * (file source, state, sync loop, iptables backend, metrics, health, service
 * health checks, dashboard), over a kernel that accepts every restore input
 * at once. It measures what the kernel cannot tell apart: each observer's
 * time per sync, the dashboard's snapshot and deltas, memory over many syncs.
 */
import type { RequestListener } from 'node:http';
import { realClock } from '../../server/clock.ts';
import type { RunOptions } from '../../server/config/types.ts';
import { Daemon } from '../../server/daemon.ts';
import { Dashboard } from '../../server/dashboard/dashboard.ts';
import { nodeHealth } from '../../server/dashboard/setup.ts';
import { IptablesView } from '../../server/dashboard/iptables/view.ts';
import { MemoryEventRecorder } from '../../server/events/memory-event-recorder.ts';
import type { IptablesRunner } from '../../server/kernel/iptables.ts';
import { FakeNetInterfaces } from '../../server/kernel/netif-fake.ts';
import { SimulatedSysctl } from '../../server/kernel/sysctl-simulated.ts';
import { silentLogger } from '../../server/log.ts';
import { createIptablesBackend, SYSCTL_ROUTE_LOCALNET, SYSCTL_TCP_BE_LIBERAL, type IptablesBackend } from '../../server/proxy/iptables/proxier.ts';
import { testConfig } from '../../server/proxy/iptables/testing.ts';
import type { ProxyMetrics } from '../../server/proxy/metrics/metrics.ts';
import type { SyncObserver } from '../../server/proxy/sync-loop.ts';
import { createSyncObservers } from '../../server/proxy/sync-observers.ts';
import { FileSource } from '../../server/sources/file/file-source.ts';

/** NullKernel accepts every restore input instantly and counts what it got. */
export class NullKernel implements IptablesRunner {
  readonly family = 'IPv4' as const;
  readonly flavor: 'nft' | 'legacy';
  readonly hasRandomFully = true;
  restores = 0;
  lastInputBytes = 0;
  constructor(flavor: 'nft' | 'legacy' = 'nft') {
    this.flavor = flavor;
  }
  async restore(input: string): Promise<void> {
    this.restores++;
    this.lastInputBytes = input.length;
  }
  async save(): Promise<string> {
    return '';
  }
  async ensureChain(): Promise<boolean> {
    return true;
  }
  async chainExists(): Promise<boolean> {
    return true;
  }
  async checkRule(): Promise<boolean> {
    return true;
  }
  async insertRule(): Promise<void> {}
  async deleteRule(): Promise<boolean> {
    return true;
  }
  async flushChain(): Promise<void> {}
  async deleteChain(): Promise<void> {}
}

/** ObserverTimes: ms spent in each observer's onSync, one entry per sync. */
export type ObserverTimes = Record<'metrics' | 'health' | 'dashboard', number[]>;

export interface InProcess {
  daemon: Daemon;
  backend: IptablesBackend;
  kernel: NullKernel;
  source: FileSource;
  dashboard: Dashboard;
  metrics: ProxyMetrics;
  times: ObserverTimes;
  stop(): Promise<void>;
}

function timed(times: number[], o: SyncObserver): SyncObserver {
  return {
    onStart: o.onStart?.bind(o),
    onQueued: o.onQueued?.bind(o),
    onSync(record, checkout, result) {
      const t0 = performance.now();
      o.onSync?.(record, checkout, result);
      times.push(performance.now() - t0);
    },
  };
}

/** startInProcess runs the daemon on a manifest folder and resolves after its first sync. */
export async function startInProcess(opts: { dir: string; nodeName: string; clusterCIDR: string; minSyncPeriodMs?: number }): Promise<InProcess> {
  const clock = realClock;
  const config = testConfig({ clusterCIDRs: [opts.clusterCIDR], iptables: { minSyncPeriodMs: opts.minSyncPeriodMs ?? 0 } });
  const kernel = new NullKernel();
  const backend = createIptablesBackend({
    config,
    nodeName: opts.nodeName,
    family: 'IPv4',
    runner: kernel,
    netif: new FakeNetInterfaces(),
    sysctl: new SimulatedSysctl({ [SYSCTL_ROUTE_LOCALNET]: '1', [SYSCTL_TCP_BE_LIBERAL]: '0' }),
    clock,
    logger: silentLogger,
  });
  const source = new FileSource({ path: opts.dir, nodeName: opts.nodeName, clock, logger: silentLogger, watch: false, pollMs: 0 });
  const run: RunOptions = {
    configFile: null,
    kubeconfig: null,
    source: `file:${opts.dir}`,
    sourceIsDefault: false,
    once: false,
    onceTimeoutMs: 0,
    cleanup: false,
    dryRun: false,
    dashboardTokenFile: null,
    dashboardBindAddress: null,
    dashboardTlsCertFile: null,
    dashboardTlsKeyFile: null,
    dashboardTokenAudience: 'kproxy-dashboard',
    iptablesFlavor: 'nft',
    version: false,
    help: false,
  };
  const events = new MemoryEventRecorder({ clock, logger: silentLogger });
  const times: ObserverTimes = { metrics: [], health: [], dashboard: [] };
  const daemon = new Daemon({ config, run, nodeName: opts.nodeName, logger: silentLogger, clock, backends: [backend], source, events });

  // The observers the CLI adds (server/proxy/sync-observers.ts), each timed; no listeners.
  const fakeListen = async (_host: string, _port: number, _h: RequestListener) => ({ close: async () => {} });
  const observers = createSyncObservers({ daemon, netInterfaces: new FakeNetInterfaces(), listenHealthCheck: fakeListen, processMetrics: false });
  const metrics = observers.metrics;
  daemon.proxy.addObserver(timed(times.metrics, observers.observers.metrics));
  daemon.proxy.addObserver(timed(times.health, observers.observers.health));
  const proxyTimed = {
    addObserver: (o: SyncObserver) => daemon.proxy.addObserver(timed(times.dashboard, o)),
    requestFullSync: daemon.proxy.requestFullSync.bind(daemon.proxy),
    pause: daemon.proxy.pause.bind(daemon.proxy),
    resume: daemon.proxy.resume.bind(daemon.proxy),
    get paused() {
      return daemon.proxy.paused;
    },
    get lastRecord() {
      return daemon.proxy.lastRecord;
    },
  };
  const dashboard = new Dashboard({
    daemon: { ...daemonFields(daemon), proxy: proxyTimed },
    provider: new IptablesView({ runner: kernel, simulated: false }),
    // The leak check has no conntrack: the dashboard shows it as not available.
    conntrack: null,
    backendDescription: 'iptables (bench, null kernel)',
    events,
    health: () => nodeHealth(observers.health, observers.readiness),
  });
  await daemon.start();
  await waitUntil(() => daemon.proxy.lastRecord !== null, 600_000);
  return {
    daemon,
    backend,
    kernel,
    source,
    dashboard,
    metrics,
    times,
    stop: async () => {
      dashboard.stop();
      await daemon.stop();
      await observers.close();
    },
  };
}

function daemonFields(d: Daemon) {
  return { config: d.config, nodeName: d.nodeName, clock: d.clock, logger: d.logger, states: d.states, invalid: d.invalid, cleanup: () => d.cleanup(), source: d.source };
}

export async function waitUntil(test: () => boolean, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!test()) {
    if (Date.now() > end) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

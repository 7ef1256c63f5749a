import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { FakeClock, flushMicrotasks } from '../clock-fake.ts';
import type { RunOptions } from '../config/types.ts';
import { Daemon } from '../daemon.ts';
import { MemoryEventRecorder } from '../events/memory-event-recorder.ts';
import { buildMetricsApp } from '../http/app.ts';
import { Conntrack, type ConntrackRunner } from '../kernel/conntrack.ts';
import { SimulatedConntrack } from '../kernel/conntrack-simulated.ts';
import { SimulatedIptables } from '../kernel/iptables-simulated.ts';
import { SimulatedSysctl } from '../kernel/sysctl-simulated.ts';
import { MemoryLog } from '../log.ts';
import type { EndpointSlice, Node, Service } from '../proxy/kube-objects.ts';
import type { Backend } from '../proxy/backend.ts';
import { ConntrackCounts, type ConntrackCountsOptions } from '../proxy/conntrack/counts.ts';
import { harness, testConfig } from '../proxy/iptables/testing.ts';
import type { ChangeHandlers } from '../proxy/proxy-state.ts';
import type { Source, SourceStatus } from '../proxy/source.ts';
import { DashboardActions } from './actions.ts';
import type { AccessReviewer } from './auth/access-review.ts';
import { DashboardAuth } from './auth/auth.ts';
import { Dashboard } from './dashboard.ts';
import type { HeavyReads } from './heavy-reads.ts';
import type { PacketTracerFactory } from './packet-tracer.ts';
import { dashboardPlugins } from './http/plugin.ts';
import { IptablesView } from './iptables/view.ts';
import { IpvsView } from './ipvs/view.ts';
import { ipvsConfig, ipvsHarness, type IpvsHarness } from '../proxy/ipvs/testing.ts';
import { ActionRateLimiter } from './rate-limiter.ts';
import type { StreamHubOptions } from './stream-hub.ts';
import { noYield } from './yield.ts';
import { objectsFromYaml } from '../proxy/testing.ts';

/** MemorySource hands objects to the state directly, like a source that has listed. */
export class MemorySource implements Source {
  handlers: ChangeHandlers | null = null;
  readonly #initial: (Service | EndpointSlice | Node)[];

  constructor(initial: (Service | EndpointSlice | Node)[] = []) {
    this.#initial = initial;
  }

  async start(h: ChangeHandlers): Promise<void> {
    this.handlers = h;
    for (const o of this.#initial) {
      if (o.kind === 'Service') h.onService(null, o as Service);
      else if (o.kind === 'EndpointSlice') h.onEndpointSlice(null, o as EndpointSlice);
      else h.onNode(null, o as Node);
    }
    h.onSynced('Service');
    h.onSynced('EndpointSlice');
    h.onSynced('Node');
  }

  async stop(): Promise<void> {}

  status(): SourceStatus {
    return { kind: 'file', description: 'memory', synced: true, objects: this.#initial.length, counters: {} };
  }
}

/** exampleObjects reads deploy/examples (the demo cluster the e2e test also uses). */
export function exampleObjects(): (Service | EndpointSlice | Node)[] {
  const out: (Service | EndpointSlice | Node)[] = [];
  for (const f of ['nodes.yaml', 'kube-dns.yaml', 'shop.yaml']) {
    const path = new URL(`../../deploy/examples/${f}`, import.meta.url);
    out.push(...objectsFromYaml(f, readFileSync(path, 'utf8')));
  }
  return out;
}

export interface TestDashboardOptions {
  token?: string | null;
  reviewer?: AccessReviewer | null;
  objects?: (Service | EndpointSlice | Node)[];
  hub?: Omit<StreamHubOptions, 'logger'>;
  webRoot?: string;
  /** mode: the backend under the dashboard (default iptables); "ipvs" runs IPVS mode over its simulated kernel. */
  mode?: 'iptables' | 'ipvs';
  /** collect: what the dashboard runs to give memory back after dropping its tables (default none). */
  collect?: () => void;
  /** conntrack: the counter's runner (default: an empty SimulatedConntrack) and its limits. */
  conntrack?: { runner?: ConntrackRunner } & Partial<Pick<ConntrackCountsOptions, 'maxQueued' | 'serviceIntervalMs'>>;
  /** wrapBackend lets a test change what the backend reports (the dashboard only sees sync results). */
  wrapBackend?: (backend: Backend) => Backend;
  /** heavy: the API's limit on expensive reads (default 2 running, 8 waiting). */
  heavy?: HeavyReads;
  /** pingIntervalMs: the live stream's keep-alive pings (default 30 s). */
  pingIntervalMs?: number;
  /** tracer: the packet tracer GET /api/v1/trace answers with (default none: 503). */
  tracer?: PacketTracerFactory;
}

/** TestDashboard is a daemon over the simulated kernel with its dashboard on a metrics app (not listening). */
export interface TestDashboard {
  clock: FakeClock;
  /** kernel: the simulated iptables (in IPVS mode too: its nat and filter rules). */
  kernel: SimulatedIptables;
  /** ipvs: the IPVS mode's simulated kernel (mode "ipvs" only). */
  ipvs: IpvsHarness | null;
  /** conntrack: the simulated conntrack table the counts list (unless options.conntrack.runner replaced it). */
  conntrack: SimulatedConntrack;
  /** sysctl: the simulated /proc the node counts read (nf_conntrack_count 1234, nf_conntrack_max 262144). */
  sysctl: SimulatedSysctl;
  daemon: Daemon;
  source: MemorySource;
  events: MemoryEventRecorder;
  log: MemoryLog;
  dashboard: Dashboard;
  auth: DashboardAuth;
  app: FastifyInstance;
  /** settle lets syncs, the dashboard's deferred work and kernel reads finish. */
  settle(ms?: number): Promise<void>;
  close(): Promise<void>;
}

/** testDashboard starts a daemon on the example cluster and waits for its first sync. */
export async function testDashboard(opts: TestDashboardOptions = {}): Promise<TestDashboard> {
  const log = new MemoryLog('info');
  const ipvs = opts.mode === 'ipvs' ? ipvsHarness({ config: ipvsConfig({ clusterCIDRs: ['10.244.0.0/16'] }), logger: log.logger }) : null;
  const config = ipvs ? ipvsConfig({ clusterCIDRs: ['10.244.0.0/16'] }) : testConfig({ clusterCIDRs: ['10.244.0.0/16'] });
  const h = ipvs ? { clock: ipvs.clock, kernel: ipvs.iptables, backend: ipvs.backend } : harness({ config, nodeName: 'node-a', logger: log.logger });
  const clock = h.clock;
  const kernel = h.kernel;
  const events = new MemoryEventRecorder({ clock, logger: log.logger.child('events') });
  const source = new MemorySource(opts.objects ?? exampleObjects());
  const run: RunOptions = {
    configFile: null,
    kubeconfig: null,
    source: 'file:memory',
    sourceIsDefault: false,
    once: false,
    onceTimeoutMs: 0,
    cleanup: false,
    dryRun: true,
    dashboardTokenFile: null,
    dashboardBindAddress: null,
    dashboardTlsCertFile: null,
    dashboardTlsKeyFile: null,
    dashboardTokenAudience: 'kproxy-dashboard',
    iptablesFlavor: 'nft',
    version: false,
    help: false,
  };
  const backend = opts.wrapBackend ? opts.wrapBackend(h.backend) : h.backend;
  const daemon = new Daemon({ config, run, nodeName: 'node-a', logger: log.logger, clock, backends: [backend], source, events });
  const provider = ipvs ? new IpvsView({ backend: ipvs.backend, simulated: true, clock, pause: noYield }) : new IptablesView({ runner: kernel, simulated: true, pause: noYield });
  const sysctl = new SimulatedSysctl({ 'net/netfilter/nf_conntrack_count': '1234', 'net/netfilter/nf_conntrack_max': '262144' });
  const table = new SimulatedConntrack();
  const { runner, ...limits } = opts.conntrack ?? {};
  const counts = new ConntrackCounts({ conntrack: new Conntrack(runner ?? table), sysctl, clock, ...limits });
  const auth = new DashboardAuth({ token: opts.token ?? null, reviewer: opts.reviewer ?? null, nodeName: 'node-a', clock, logger: log.logger.child('dashboard/auth') });
  const dashboard = new Dashboard({
    daemon,
    provider,
    auth,
    heavy: opts.heavy,
    conntrack: counts,
    conntrackSimulated: true,
    backendDescription: ipvs ? 'ipvs (scheduler rr, iptables nft, simulated kernel)' : 'iptables (nft, simulated kernel)',
    events,
    health: () => ({ healthy: true, lastUpdated: clock.now(), nodeEligible: true, ready: true, readyReason: null }),
    pause: noYield,
    hub: opts.hub,
    collect: opts.collect ?? null,
    tracer: opts.tracer,
  });
  const actions = new DashboardActions({ dashboard, events, limiter: new ActionRateLimiter(clock), clock, logger: log.logger.child('dashboard') });
  const app = buildMetricsApp({
    metrics: { contentType: 'text/plain', render: async () => 'kubeproxy_sync_proxy_rules_last_timestamp_seconds 1\n' },
    config,
    plugins: dashboardPlugins({ dashboard, actions, auth, clock, webRoot: opts.webRoot ?? '/nonexistent-web-root', pingIntervalMs: opts.pingIntervalMs }),
  });
  await app.ready();
  await daemon.start();
  const settle = async (ms = 0) => {
    await clock.advanceAsync(ms);
    await daemon.proxy.idle();
    await flushMicrotasks();
  };
  await settle();
  return {
    clock,
    kernel,
    ipvs,
    conntrack: table,
    sysctl,
    daemon,
    source,
    events,
    log,
    dashboard,
    auth,
    app,
    settle,
    close: async () => {
      await app.close();
      await daemon.stop();
    },
  };
}

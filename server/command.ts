import { assembleDaemon, type Assembled } from './assemble.ts';
import { loadConfiguration, type LoadedConfiguration } from './config/load.ts';
import { usage } from './config/flags.ts';
import { errorMessage, isKproxyError, NodeNotFoundError, SourceNotSyncedError } from './errors.ts';
import { realClock } from './clock.ts';
import { ApiEventSink } from './events/event-sink.ts';
import { nodeReference, recordStarting } from './events/event-recorder.ts';
import { KubeEventRecorder } from './events/kube-event-recorder.ts';
import { flushWithin, recordCleanup } from './events/cleanup-event.ts';
import { startNodeServers, type NodeServers } from './http/node-servers.ts';
import { nodeHealth, setupDashboard, type DashboardSetup } from './dashboard/setup.ts';
import { createLogger, type Logger } from './log.ts';
import { cleanupAllModes } from './platform-cleanup.ts';
import { cleanupSummary } from './proxy/backend.ts';
import type { SyncRecord } from './proxy/sync-loop.ts';
import { createSyncObservers } from './proxy/sync-observers.ts';
import { loadKubeConfig } from './sources/k8s/kubeconfig.ts';
import { versionLine } from './version.ts';

/**
 * The kproxy command. Exit codes: 0 success, 1 bad configuration or a failed
 * --once/--cleanup (nothing is touched when the configuration is bad), 2 an
 * unexpected crash. `kproxy trace` is a command of its own (server/trace-command.ts,
 * reached from cli.ts without loading this module): exit 0 traced, 1 bad input.
 */
async function main(argv: readonly string[]): Promise<number> {
  let loaded: LoadedConfiguration;
  try {
    loaded = await loadConfiguration(argv);
  } catch (err) {
    // Configuration errors list every problem, one per line: print them whole.
    process.stderr.write(`kproxy: ${isKproxyError(err) ? err.message : errorMessage(err)}\n`);
    if (isKproxyError(err)) process.stderr.write('Run "kproxy --help" for the flags.\n');
    return 1;
  }
  const { config, run } = loaded;
  if (run.help) {
    process.stdout.write(usage());
    return 0;
  }
  if (run.version) {
    process.stdout.write(versionLine() + '\n');
    return 0;
  }
  const logger = createLogger({ level: config.logging.verbosity >= 4 ? 'debug' : 'info', format: config.logging.format });
  logger.info(versionLine());
  for (const w of loaded.warnings) logger.warn(w);

  if (run.cleanup) return cleanup(logger, loaded);

  let assembled: Assembled;
  try {
    assembled = await assembleDaemon(loaded, logger);
  } catch (err) {
    logger.error(`cannot start: ${errorMessage(err)}`);
    return 1;
  }
  return run.once ? once(loaded, assembled, logger) : serve(loaded, assembled, logger);
}

async function cleanup(logger: Logger, loaded: LoadedConfiguration): Promise<number> {
  const result = await cleanupAllModes({ config: loaded.config, logger });
  const line = cleanupSummary(result);
  process.stdout.write(line + '\n');
  for (const e of result.errors) logger.error(e.message, { code: e.code });
  await recordCleanupEvent(loaded, logger, line, result.errors.length === 0);
  return result.errors.length ? 1 : 0;
}

/**
 * recordCleanupEvent tells the cluster a node's service rules were removed (an
 * operator seeing traffic stop looks at the Node's Events). Only with Kubernetes
 * access; best effort: a cleanup never fails because the API is unreachable,
 * it only waits up to 5 s for the Event to be written.
 */
async function recordCleanupEvent(loaded: LoadedConfiguration, logger: Logger, summary: string, ok: boolean): Promise<void> {
  if (loaded.run.source || !loaded.nodeName) return;
  let recorder: KubeEventRecorder;
  try {
    const { api } = await loadKubeConfig({ kubeconfig: loaded.run.kubeconfig ?? undefined });
    recorder = new KubeEventRecorder({ sink: new ApiEventSink(api), reportingInstance: loaded.nodeName, clock: realClock, logger: logger.child('events') });
  } catch (err) {
    logger.warn('cleanup Event not recorded: no Kubernetes access', { err: errorMessage(err) });
    return;
  }
  recordCleanup(recorder, loaded.nodeName, summary, ok);
  if (!(await flushWithin(recorder, 5000))) logger.warn('cleanup Event not written within 5 s, giving up');
  recorder.stop();
}

async function once(loaded: LoadedConfiguration, a: Assembled, logger: Logger): Promise<number> {
  let recs: SyncRecord[];
  // The clock's timers (list retries, --once-timeout) do not hold the process open: while --once
  // waits for its source this does, or Node would exit 0 with nothing done and nothing said.
  const hold = setInterval(() => {}, 60_000);
  try {
    recs = await a.daemon.once({ timeoutMs: loaded.run.onceTimeoutMs });
  } catch (err) {
    await a.daemon.stop();
    if (err instanceof SourceNotSyncedError || err instanceof NodeNotFoundError) {
      // Nothing was programmed: say so on stdout too, where a script reads --once's summary.
      process.stdout.write(`kproxy: nothing synced, the kernel was not touched: ${errorMessage(err)}\n`);
      return 1;
    }
    logger.error(`sync failed: ${errorMessage(err)}`);
    return 1;
  } finally {
    clearInterval(hold);
  }
  await a.daemon.stop();
  if (a.dryRunKernel) process.stdout.write(await a.dryRunKernel.describe());
  const ok = recs.every((r) => r.ok);
  process.stdout.write(onceSummary(loaded, a, recs) + '\n');
  if (ok) for (const line of skippedLines(a)) process.stdout.write(line + '\n');
  return ok ? 0 : 1;
}

/** skippedLines lists what --once left out as invalid, one object a line (the rest was programmed). */
export function skippedLines(a: Assembled): string[] {
  // Each reason names its object ("Service ns/name: spec.ports[0].port …").
  return [...a.daemon.proxy.invalid.values()].map((why) => `kproxy: skipped ${why}`);
}

/**
 * onceSummary is --once's one line: what was programmed, where, how fast,
 * per IP family ("IPv4: 10 services (13 ports), ...; IPv6: ...").
 */
export function onceSummary(loaded: LoadedConfiguration, a: Assembled, recs: readonly SyncRecord[]): string {
  const failed = recs.find((r) => !r.ok);
  if (failed) return `kproxy: sync FAILED on node ${loaded.nodeName} with ${a.backendDescription}: ${failed.family}: ${failed.error?.message ?? 'unknown error'} [${failed.error?.code}]`;
  const perFamily = recs.map((rec) => {
    const state = a.daemon.proxy.proxier(rec.family)!.state;
    const services = new Set([...state.services.values()].map((sp) => sp.service)).size;
    const rules = Object.values(rec.rulesByTable).reduce((n, x) => n + x, 0);
    const tables = Object.entries(rec.rulesByTable)
      .map(([t, n]) => `${t} ${n}`)
      .join(', ');
    const noNodeIP = state.withoutNodeIP ? ' (skipped: the Node has no IP of this family)' : '';
    const v = rec.verify;
    const verified = !v ? '' : v.skipped !== undefined ? `, not verified (${v.skipped})` : `, verified (${v.objects} objects in ${Math.round(v.ms)} ms)`;
    return `${rec.family}: ${services} services (${rec.servicePorts} ports), ${rec.endpoints} endpoints, ${rules} rules${tables ? ` (${tables})` : ''}${verified}${noNodeIP}`;
  });
  const invalid = a.daemon.proxy.invalid.size;
  const left = a.daemon.source.status().counters.objectsSkipped ?? 0;
  const skipped = [
    ...(invalid ? [`${invalid} invalid object${invalid === 1 ? '' : 's'} skipped (listed below)`] : []),
    ...(left ? [`${left} manifest document${left === 1 ? '' : 's'} left out (see the warnings)`] : []),
  ];
  const ms = recs.reduce((n, r) => n + r.durationMs, 0);
  return `kproxy: synced ${a.backendDescription} on node ${loaded.nodeName} in ${Math.round(ms)} ms: ${perFamily.join('; ')}${skipped.length ? `; ${skipped.join(', ')}` : ''}`;
}

async function serve(loaded: LoadedConfiguration, a: Assembled, logger: Logger): Promise<number> {
  const { daemon } = a;
  // Health, metrics and service health checks follow the syncs; the listeners and the dashboard only read them.
  const observers = createSyncObservers({
    daemon,
    // --dry-run touches nothing on the host: no health check node port is bound.
    simulateHealthChecks: loaded.run.dryRun,
    onPortError: (e) =>
      daemon.events.record(
        nodeReference(daemon.nodeName),
        'Warning',
        'FailedToStartServiceHealthcheck',
        'Listen',
        `health check node port ${e.port} for service ${e.namespace}/${e.name} could not be opened: ${e.error.message}`,
      ),
  });
  for (const o of Object.values(observers.observers)) daemon.proxy.addObserver(o);
  a.attachMetrics?.(observers.metrics);
  let dashboard: DashboardSetup;
  try {
    // A bad --dashboard-token-file, or a network-reachable dashboard without auth, stops start-up (exit 1).
    dashboard = await setupDashboard({ loaded, assembled: a, logger, health: () => nodeHealth(observers.health, observers.readiness), healthChecks: () => observers.serviceHealth.entries() });
  } catch (err) {
    logger.error(`cannot start: ${errorMessage(err)}`, { code: isKproxyError(err) ? err.code : undefined });
    return 1;
  }
  let servers: NodeServers;
  try {
    // A port that cannot be bound (with bindAddressHardFail), or a dashboard whose listener is bound off loopback without auth, stops start-up (exit 1).
    servers = await startNodeServers({ config: loaded.config, logger: daemon.logger, clock: daemon.clock, observers, dashboard });
  } catch (err) {
    logger.error(`cannot start: ${errorMessage(err)}`, { code: isKproxyError(err) ? err.code : undefined });
    return 1;
  }
  const board = dashboard.dashboard;
  if (board) observers.metrics.attachDashboard(() => board.counters());
  if (a.conntrack) {
    // kube-proxy sets its conntrack sysctls before the proxier runs; a refused write is a warning, never fatal.
    a.conntrack.attachMetrics(observers.metrics);
    await a.conntrack.applySysctls();
  }
  try {
    await daemon.start();
  } catch (err) {
    // A backend's init refused the host (no dummy link type for kube-ipvs0, no IPVS scheduler module, a sysctl it must set).
    logger.error(`cannot start: ${errorMessage(err)}`, { code: isKproxyError(err) ? err.code : undefined });
    await Promise.allSettled([servers.close(), observers.close(), daemon.stop(), a.kubeEvents?.stop(), a.conntrack?.stop()]);
    return 1;
  }
  // The nfacct counters exist once the backends' init (in start) made them.
  const packets = a.packetCounters();
  if (packets) observers.metrics.enablePacketCounters(packets);
  recordStarting(daemon.events, daemon.nodeName);
  logger.info('kproxy is running', {
    node: loaded.nodeName,
    mode: a.backendDescription,
    source: loaded.run.source ?? 'kubernetes',
    healthz: loaded.config.healthzBindAddress,
    metrics: loaded.config.metricsBindAddress,
    dashboard: dashboard.dashboard && dashboard.auth ? `${dashboard.ownAddress ?? 'on metrics'}, auth ${dashboard.auth.mode}, TLS ${dashboard.tls ? 'on' : 'off'}` : 'off',
  });
  const signal = await new Promise<string>((resolve) => {
    for (const s of ['SIGTERM', 'SIGINT'] as const) process.once(s, () => resolve(s));
  });
  logger.info('stopping', { signal });
  await Promise.allSettled([servers.close(), observers.close(), daemon.stop(), a.kubeEvents?.stop(), a.conntrack?.stop()]);
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`kproxy: unexpected failure: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(2);
  },
);

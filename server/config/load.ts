import { access, readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { ConfigFileError, ConfigInvalidError, FlagInvalidError, NoSourceError, SourceInvalidError } from '../errors.ts';
import { toProxyConfig } from './convert.ts';
import { decodeKubeProxyConfiguration } from './decode.ts';
import { setDefaults } from './defaults.ts';
import { formatFieldError, type FieldError } from './field-error.ts';
import { applyConfigFlags, parseFlags, runFlags } from './flags.ts';
import { dnsSubdomainProblem, EXAMPLE_NODE_NAME, normalizeNodeName } from './node-name.ts';
import { splitHostPort } from './host-port.ts';
import { packageRoot } from './package-root.ts';
import { selectSource } from './source-selection.ts';
import type { ProxyConfig, RunOptions } from './types.ts';
import type { KubeProxyConfiguration, KubeProxyConfigurationDocument } from './v1alpha1.ts';
import { validateKubeProxyConfiguration } from './validation.ts';

/**
 * ConfigEnv is everything loadConfiguration reads from the machine, injectable
 * so tests need no real files, host name or environment. Each member defaults
 * to the real one.
 */
export interface ConfigEnv {
  hostname?: () => string;
  env?: Readonly<Record<string, string | undefined>>;
  exists?: (path: string) => Promise<boolean>;
  readFile?: (path: string) => Promise<string>;
  /** packageRoot: where deploy/examples/ is looked up (default: this package). */
  packageRoot?: string;
}

/** LoadOptions says what the command about to run needs of the configuration. */
export interface LoadOptions {
  /** readsNoServices: the command reads no Services (`kproxy trace` on a node reads only its rules): no source and no valid node name are required, as for --cleanup. */
  readsNoServices?: boolean;
}

/** LoadedConfiguration is the outcome of the command line and --config file together. */
export interface LoadedConfiguration {
  config: ProxyConfig;
  run: RunOptions;
  /** nodeName: this node's name (hostname-override, the example node, or the host name). */
  nodeName: string;
  /** warnings: things the operator should know that do not stop kproxy (log each once at start). */
  warnings: string[];
}

/** DEFAULT_TOKEN_AUDIENCE: what delegated auth asks TokenReview for unless --dashboard-token-audience says otherwise. */
export const DEFAULT_TOKEN_AUDIENCE = 'kproxy-dashboard';

/** DEFAULT_ONCE_TIMEOUT_MS: --once waits this long for its source's first complete read (a big cluster's first lists take seconds). */
export const DEFAULT_ONCE_TIMEOUT_MS = 120_000;

const DEFAULT_RUN: RunOptions = {
  configFile: null,
  kubeconfig: null,
  source: null,
  sourceIsDefault: false,
  once: false,
  onceTimeoutMs: DEFAULT_ONCE_TIMEOUT_MS,
  cleanup: false,
  dryRun: false,
  dashboardTokenFile: null,
  dashboardBindAddress: null,
  dashboardTlsCertFile: null,
  dashboardTlsKeyFile: null,
  dashboardTokenAudience: DEFAULT_TOKEN_AUDIENCE,
  iptablesFlavor: 'auto',
  nftablesBackend: 'netlink',
  version: false,
  help: false,
};

/**
 * loadConfiguration turns argv (without node and script) into kproxy's effective
 * configuration: read --config strictly, apply kube-proxy's defaults, apply the
 * flags over the file, validate, choose the source and the node name. It
 * touches nothing: a bad flag, file or value throws FlagInvalidError,
 * ConfigFileError, ConfigInvalidError, SourceInvalidError or NoSourceError
 * whose message lists every problem, one per line, and the CLI exits 1.
 *
 * With --help or --version only the flags are parsed; the result carries the
 * defaults and no file is read.
 */
export async function loadConfiguration(argv: readonly string[], env: ConfigEnv = {}, opts: LoadOptions = {}): Promise<LoadedConfiguration> {
  const exists = env.exists ?? pathExists;
  const flags = parseFlags(argv);
  const run: RunOptions = { ...DEFAULT_RUN, ...runFlags(flags) };
  if (run.help || run.version) return { config: toProxyConfig(setDefaults()), run, nodeName: '', warnings: [] };

  const doc = run.configFile ? await readConfigFile(run.configFile, env.readFile ?? ((p) => readFile(p, 'utf8'))) : {};
  const c = setDefaults(doc);
  const setBy = applyConfigFlags(c, flags);

  const selection = await selectSource({
    source: run.source ?? undefined,
    kubeconfig: c.clientConnection.kubeconfig,
    env: env.env ?? process.env,
    exists,
    packageRoot: env.packageRoot ?? packageRoot(),
    dryRun: run.dryRun,
  });
  const warnings = [...selection.warnings];

  const errors: FieldError[] = validateKubeProxyConfiguration(c).map((e) => {
    const culprits = [e.field, ...(e.related ?? [])].map((f) => flagFor(setBy, f)).filter((f) => f !== undefined);
    return culprits.length > 0 ? { ...e, flag: [...new Set(culprits)].join(', ') } : e;
  });
  const node = nodeName(c, selection.sourceIsDefault, env.hostname ?? hostname);
  if (node.problem) {
    const flag = node.fromOverride ? setBy.get('hostnameOverride') : undefined;
    if (run.cleanup || opts.readsNoServices) warnings.push(`node name: ${formatFieldError(node.problem)}`);
    else errors.push(flag ? { ...node.problem, flag } : node.problem);
  }
  if (node.warning) warnings.push(node.warning);
  if (errors.length > 0) {
    const where = run.configFile ? `--config ${run.configFile} with flags` : 'flags';
    const message = problemList(`invalid configuration (${where})`, errors.map(formatFieldError));
    // When every problem comes from the command line, the flags are what the operator has to fix.
    throw errors.every((e) => e.flag) ? new FlagInvalidError(message) : new ConfigInvalidError(message);
  }
  // --cleanup (and kproxy trace on a node) reads no Services: it needs no source, and must work on a node that has none.
  if (selection.problem && !run.cleanup && !opts.readsNoServices) throw selection.noSource ? new NoSourceError(selection.problem) : new SourceInvalidError(selection.problem);
  const dashboardProblems = await dashboardFlagProblems(run, exists);
  if (dashboardProblems.length > 0) throw new FlagInvalidError(problemList('invalid dashboard flags', dashboardProblems));
  if (run.onceTimeoutMs < 0) throw new FlagInvalidError(`--once-timeout ${run.onceTimeoutMs} ms: must be greater than or equal to 0`);
  if (run.userspaceDrainTimeoutMs !== undefined && run.userspaceDrainTimeoutMs < 0) {
    throw new FlagInvalidError(`--userspace-drain-timeout ${run.userspaceDrainTimeoutMs} ms: must be greater than or equal to 0`);
  }

  const config = toProxyConfig(c);
  applyUserspaceLimits(config, run);
  config.hostnameOverride = c.hostnameOverride === '' ? '' : normalizeNodeName(c.hostnameOverride);
  warnings.push(...ignoredSettings(c));
  return {
    config,
    run: { ...run, source: selection.source, sourceIsDefault: selection.sourceIsDefault, kubeconfig: selection.kubeconfig },
    nodeName: node.name,
    warnings,
  };
}

/** dashboardFlagProblems checks the dashboard's own flags: files that exist, TLS files in pairs, a host:port. */
async function dashboardFlagProblems(run: RunOptions, exists: (p: string) => Promise<boolean>): Promise<string[]> {
  const problems: string[] = [];
  for (const [flag, path] of [
    ['--dashboard-token-file', run.dashboardTokenFile],
    ['--dashboard-tls-cert-file', run.dashboardTlsCertFile],
    ['--dashboard-tls-private-key-file', run.dashboardTlsKeyFile],
  ] as const) {
    if (path !== null && !(await exists(path))) problems.push(`${flag} ${path}: file does not exist`);
  }
  if ((run.dashboardTlsCertFile === null) !== (run.dashboardTlsKeyFile === null)) {
    problems.push('--dashboard-tls-cert-file and --dashboard-tls-private-key-file go together: give both or neither');
  }
  const hp = run.dashboardBindAddress === null ? null : splitHostPort(run.dashboardBindAddress);
  if (run.dashboardBindAddress !== null && (!hp || !/^\d{1,5}$/.test(hp.port) || Number(hp.port) > 65535)) {
    problems.push(`--dashboard-bind-address ${JSON.stringify(run.dashboardBindAddress)} is not HOST:PORT`);
  }
  if (run.dashboardTokenAudience.trim() === '') problems.push('--dashboard-token-audience is empty');
  return problems;
}

/** applyUserspaceLimits writes the userspace mode's limit flags (kproxy's own, outside KubeProxyConfiguration) into the config. */
function applyUserspaceLimits(config: ProxyConfig, run: RunOptions): void {
  const u = config.userspace;
  if (run.userspaceMaxConnections !== undefined) u.maxConnections = run.userspaceMaxConnections;
  if (run.userspaceMaxConnectionsPerService !== undefined) u.maxConnectionsPerService = run.userspaceMaxConnectionsPerService;
  if (run.userspaceMaxUDPSessions !== undefined) u.maxUDPSessions = run.userspaceMaxUDPSessions;
  if (run.userspaceDrainTimeoutMs !== undefined) u.drainTimeoutMs = run.userspaceDrainTimeoutMs;
}

/** flagFor names the flag that set a field ("nodePortAddresses[1]" and "featureGates.X" count as their list or map). */
function flagFor(setBy: ReadonlyMap<string, string>, field: string): string | undefined {
  return setBy.get(field.replace(/\[\d+\]$/, '')) ?? setBy.get(field.split('.')[0]!);
}

/**
 * problemList renders problems one per line under a header; a single problem
 * stays on the header line, so one-line renderings (errorMessage) keep it.
 */
export function problemList(header: string, problems: readonly string[]): string {
  if (problems.length === 1) return `${header}: ${problems[0]}`;
  return `${header}: ${problems.length} problems:\n${problems.map((p) => `  ${p}`).join('\n')}`;
}

async function pathExists(path: string): Promise<boolean> {
  try {
    await access(path);
    return true;
  } catch {
    return false; // missing or unreadable: both mean "cannot be used", which the caller reports
  }
}

async function readConfigFile(path: string, read: (p: string) => Promise<string>): Promise<KubeProxyConfigurationDocument> {
  let text: string;
  try {
    text = await read(path);
  } catch (err) {
    throw new ConfigFileError(`reading --config ${path}: ${(err as Error).message}`, { cause: err });
  }
  const result = decodeKubeProxyConfiguration(text);
  if (!result.ok) {
    throw new ConfigFileError(problemList(`invalid --config ${path}`, result.errors.map(formatFieldError)));
  }
  return result.document;
}

interface NodeNameResult {
  name: string;
  fromOverride: boolean;
  problem?: FieldError;
  warning?: string;
}

function nodeName(c: KubeProxyConfiguration, sourceIsDefault: boolean, host: () => string): NodeNameResult {
  if (c.hostnameOverride !== '') {
    const name = normalizeNodeName(c.hostnameOverride);
    const why = dnsSubdomainProblem(name);
    return why ? { name, fromOverride: true, problem: { field: 'hostnameOverride', type: 'Invalid', value: c.hostnameOverride, detail: why } } : { name, fromOverride: true };
  }
  if (sourceIsDefault) {
    return {
      name: EXAMPLE_NODE_NAME,
      fromOverride: false,
      warning: `node name ${EXAMPLE_NODE_NAME}: the example cluster's node (pass --hostname-override to be another node)`,
    };
  }
  const name = normalizeNodeName(host());
  const why = dnsSubdomainProblem(name);
  if (!why) return { name, fromOverride: false };
  return {
    name,
    fromOverride: false,
    problem: { field: 'hostnameOverride', type: 'Required', detail: `the host name ${JSON.stringify(name)} is not a valid node name (${why}); set --hostname-override` },
  };
}

/** ignoredSettings warns about accepted kube-proxy settings kproxy does not act on. */
function ignoredSettings(c: KubeProxyConfiguration): string[] {
  const out: string[] = [];
  for (const [gate, on] of Object.entries(c.featureGates)) {
    out.push(`featureGates.${gate}=${on}: kproxy implements no feature gates; it has no effect`);
  }
  if (c.enableProfiling) out.push('enableProfiling: kproxy serves no /debug/pprof; ignored');
  if (c.showHiddenMetricsForVersion !== '') out.push('showHiddenMetricsForVersion: kproxy hides no metrics; ignored');
  if (c.windowsRunAsService || Object.values(c.winkernel).some(Boolean)) out.push('winkernel / windowsRunAsService: Windows settings; ignored on Linux');
  if (c.mode !== 'userspace') {
    if (c.portRange !== '') out.push(`portRange: only the userspace mode uses it; ignored in ${c.mode || 'iptables'} mode`);
    if (c.udpIdleTimeout !== 250) out.push(`udpIdleTimeout: only the userspace mode uses it; ignored in ${c.mode || 'iptables'} mode`);
  }
  if (c.logging.vmodule.length > 0) out.push('logging.vmodule: kproxy logs by level only; ignored');
  const localMode = c.detectLocalMode || 'ClusterCIDR';
  if (localMode === 'ClusterCIDR' && c.clusterCIDR === '') {
    out.push('detectLocalMode is ClusterCIDR but clusterCIDR is empty: no traffic is treated as pod-local (set --cluster-cidr)');
  }
  return out;
}

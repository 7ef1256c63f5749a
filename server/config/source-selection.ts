import { join } from 'node:path';

/**
 * Where Services, EndpointSlices and Nodes come from (docs/configuration.md):
 * an explicit --source wins; otherwise a kubeconfig or the in-cluster config
 * means the Kubernetes API; otherwise, with --dry-run only, the example cluster
 * shipped with kproxy. The example cluster is for trying kproxy, never for a
 * node: programmed onto a real host it would replace the node's Services with
 * the demo's, so a real start without a source is an error naming what was
 * looked for.
 */

/** SERVICE_ACCOUNT_TOKEN is where a pod's in-cluster credentials are mounted (client-go's rest.InClusterConfig). */
export const SERVICE_ACCOUNT_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

export interface SourceSelectionInput {
  /** source: --source as given, or undefined. */
  readonly source: string | undefined;
  /** kubeconfig: --kubeconfig or clientConnection.kubeconfig ("" = none). */
  readonly kubeconfig: string;
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly exists: (path: string) => Promise<boolean>;
  readonly packageRoot: string;
  /** dryRun: --dry-run, the only run that may fall back to the example cluster. */
  readonly dryRun: boolean;
}

export interface SourceSelection {
  /** source: "file:PATH", or null for the Kubernetes API. */
  readonly source: string | null;
  readonly sourceIsDefault: boolean;
  /** kubeconfig: the kubeconfig to use, or null (in-cluster config, or a file source). */
  readonly kubeconfig: string | null;
  readonly warnings: readonly string[];
  /** problem: why the selection cannot be used (SourceInvalidError material), if it cannot. */
  readonly problem?: string;
  /** noSource: the problem is that nothing tells kproxy where Services come from (NoSourceError). */
  readonly noSource?: boolean;
}

/** selectSource decides the source; it never throws, it reports a problem instead. */
export async function selectSource(input: SourceSelectionInput): Promise<SourceSelection> {
  const { env, exists } = input;
  const serviceEnv = Boolean(env.KUBERNETES_SERVICE_HOST && env.KUBERNETES_SERVICE_PORT);
  const inCluster = serviceEnv && (await exists(SERVICE_ACCOUNT_TOKEN));
  const kubeconfig = input.kubeconfig === '' ? null : input.kubeconfig;

  if (input.source !== undefined) {
    const warnings: string[] = [];
    if (kubeconfig) warnings.push(`--source ${input.source} is used; the kubeconfig ${kubeconfig} is ignored`);
    else if (inCluster) warnings.push(`--source ${input.source} is used; the in-cluster Kubernetes API is ignored`);
    const base = { source: input.source, sourceIsDefault: false, kubeconfig: null, warnings };
    if (!input.source.startsWith('file:')) {
      return { ...base, problem: `--source ${JSON.stringify(input.source)}: must be file:PATH (a manifest file or folder)` };
    }
    const path = input.source.slice('file:'.length);
    if (path === '') return { ...base, problem: '--source file:: the path is empty' };
    // A path missing at start is not an error here: like a file that does not parse, the file
    // source holds the first sync back and says why (/readyz 503, the log) until the path
    // appears (a volume mounted or filled late), and --once exits 1 naming it.
    return base;
  }
  if (kubeconfig) {
    const problem = (await exists(kubeconfig)) ? undefined : `kubeconfig ${kubeconfig} does not exist`;
    return { source: null, sourceIsDefault: false, kubeconfig, warnings: [], ...(problem ? { problem } : {}) };
  }
  if (inCluster) return { source: null, sourceIsDefault: false, kubeconfig: null, warnings: [] };

  // What was looked for, in the order kproxy looks: the operator fixes the one they meant.
  const inClusterFound = serviceEnv
    ? `KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are set but the service account token ${SERVICE_ACCOUNT_TOKEN} is missing (automountServiceAccountToken: false?)`
    : 'KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set';
  const lookedFor = `no --source, no --kubeconfig or clientConnection.kubeconfig, and no usable in-cluster config (${inClusterFound})`;
  const examples = join(input.packageRoot, 'deploy', 'examples') + '/';
  const source = `file:${examples}`;
  if (!input.dryRun) {
    return {
      source: null,
      sourceIsDefault: false,
      kubeconfig: null,
      warnings: [],
      noSource: true,
      problem: `nothing to read Services from: ${lookedFor}. kproxy never programs its example cluster onto a host: pass --kubeconfig FILE or --source file:PATH (or --dry-run to try kproxy on the example cluster)`,
    };
  }
  if (!(await exists(examples))) {
    return {
      source,
      sourceIsDefault: true,
      kubeconfig: null,
      warnings: [],
      problem: `--dry-run without a source uses the example cluster, and ${examples} is not installed (kproxy's image does not ship it): pass --source file:PATH or --kubeconfig FILE`,
    };
  }
  return {
    source,
    sourceIsDefault: true,
    kubeconfig: null,
    warnings: [`${lookedFor}: --dry-run serves the example cluster from ${source} (pass --kubeconfig or --source to choose)`],
  };
}

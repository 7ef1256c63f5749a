import { join } from 'node:path';

/**
 * Where Services, EndpointSlices and Nodes come from (../../../shared/DESIGN.md §4):
 * an explicit --source wins; otherwise a kubeconfig or the in-cluster config
 * means the Kubernetes API; otherwise the example cluster shipped with kproxy.
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
}

/** selectSource decides the source; it never throws, it reports a problem instead. */
export async function selectSource(input: SourceSelectionInput): Promise<SourceSelection> {
  const { env, exists } = input;
  const inCluster = Boolean(env.KUBERNETES_SERVICE_HOST && env.KUBERNETES_SERVICE_PORT) && (await exists(SERVICE_ACCOUNT_TOKEN));
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
    if (!(await exists(path))) return { ...base, problem: `--source ${input.source}: ${path} does not exist` };
    return base;
  }
  if (kubeconfig) {
    const problem = (await exists(kubeconfig)) ? undefined : `kubeconfig ${kubeconfig} does not exist`;
    return { source: null, sourceIsDefault: false, kubeconfig, warnings: [], ...(problem ? { problem } : {}) };
  }
  if (inCluster) return { source: null, sourceIsDefault: false, kubeconfig: null, warnings: [] };

  const examples = join(input.packageRoot, 'deploy', 'examples') + '/';
  const source = `file:${examples}`;
  if (!(await exists(examples))) {
    return { source, sourceIsDefault: true, kubeconfig: null, warnings: [], problem: `no kubeconfig, no in-cluster config, and the embedded default ${examples} is missing: pass --kubeconfig or --source file:PATH` };
  }
  return {
    source,
    sourceIsDefault: true,
    kubeconfig: null,
    warnings: [`no kubeconfig and no in-cluster config: serving the example cluster from ${source} (pass --kubeconfig or --source to choose)`],
  };
}

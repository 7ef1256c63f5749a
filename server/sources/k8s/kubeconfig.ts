import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { KubeConfig } from '@kubernetes/client-node';
import { errorMessage, KubeconfigError } from '../../errors.ts';
import { KubeApi } from './api-request.ts';
import { loadClientNode } from './client-node.ts';

/** SERVICE_ACCOUNT_DIR is where Kubernetes mounts a pod's service account credentials. */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

export interface KubeconfigLoadOptions {
  /** kubeconfig: --kubeconfig FILE; null or "" means in-cluster config. */
  kubeconfig?: string | null;
  /** rootPrefix: prepended to SERVICE_ACCOUNT_DIR (tests point it at a temporary folder). */
  rootPrefix?: string;
}

/** LoadedKubeconfig is API access ready for clients, with a line that says where it leads. */
export interface LoadedKubeconfig {
  readonly kubeConfig: KubeConfig;
  /** server: the API server URL (for logs, status and the dashboard). */
  readonly server: string;
  /** origin: "kubeconfig /path" or "in-cluster service account". */
  readonly origin: string;
  /** api: plain JSON requests with these credentials (Events, access reviews, lists). */
  readonly api: KubeApi;
}

/**
 * inClusterConfigPresent tells whether this process runs in a pod with a service
 * account (the daemon falls back to the embedded file source when it does not
 * and no --kubeconfig is given).
 */
export function inClusterConfigPresent(env: NodeJS.ProcessEnv = process.env, rootPrefix = ''): boolean {
  return Boolean(env.KUBERNETES_SERVICE_HOST && env.KUBERNETES_SERVICE_PORT && existsSync(join(rootPrefix + SERVICE_ACCOUNT_DIR, 'token')));
}

/**
 * loadKubeConfig reads --kubeconfig FILE, or the in-cluster service account when
 * no file is given. Every failure is a KubeconfigError that names the file or the
 * missing piece, so the daemon can exit 1 with a message an operator can act on.
 * The Kubernetes client is loaded here, on first use (client-node.ts).
 */
export async function loadKubeConfig(opts: KubeconfigLoadOptions = {}): Promise<LoadedKubeconfig> {
  const client = await loadClientNode();
  // In-cluster: client-node reads KUBERNETES_SERVICE_HOST/PORT from process.env itself, so we check the same place.
  const found = opts.kubeconfig ? fromFile(client.KubeConfig, opts.kubeconfig) : inCluster(client.KubeConfig, process.env, opts.rootPrefix ?? '');
  return { ...found, api: new KubeApi(found.kubeConfig, client) };
}

function fromFile(KubeConfig: new () => KubeConfig, path: string): Omit<LoadedKubeconfig, 'api'> {
  try {
    if (!statSync(path).isFile()) throw new Error('not a regular file');
  } catch (err) {
    throw new KubeconfigError(`kubeconfig ${path} cannot be read: ${errorMessage(err)}`, { cause: err });
  }
  const kc = new KubeConfig();
  try {
    kc.loadFromFile(path);
  } catch (err) {
    throw new KubeconfigError(`kubeconfig ${path} is not a valid kubeconfig: ${errorMessage(err)}`, { cause: err });
  }
  const context = kc.getCurrentContext();
  if (!context) throw new KubeconfigError(`kubeconfig ${path} sets no current-context`);
  if (!kc.getContextObject(context)) throw new KubeconfigError(`kubeconfig ${path}: current-context "${context}" is not defined in contexts`);
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new KubeconfigError(`kubeconfig ${path}: context "${context}" names a cluster that is not defined in clusters`);
  const where = `kubeconfig ${path} (cluster "${cluster.name}")`;
  if (cluster.server?.startsWith('http:') && !cluster.skipTLSVerify) {
    // client-node refuses plain http unless TLS verification is off; say so now rather than failing every request.
    throw new KubeconfigError(`${where}: server ${cluster.server} is plain http, which the Kubernetes client only accepts with insecure-skip-tls-verify: true`);
  }
  return { kubeConfig: kc, server: checkServer(cluster.server, where), origin: `kubeconfig ${path}` };
}

function inCluster(KubeConfig: new () => KubeConfig, env: NodeJS.ProcessEnv, rootPrefix: string): Omit<LoadedKubeconfig, 'api'> {
  const dir = rootPrefix + SERVICE_ACCOUNT_DIR;
  if (!env.KUBERNETES_SERVICE_HOST || !env.KUBERNETES_SERVICE_PORT) {
    throw new KubeconfigError('no --kubeconfig given and not running in a cluster (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set): pass --kubeconfig FILE or --source file:PATH');
  }
  for (const file of ['token', 'ca.crt']) {
    const p = join(dir, file);
    try {
      readFileSync(p);
    } catch (err) {
      throw new KubeconfigError(`in-cluster config: the service account ${file} ${p} cannot be read (is automountServiceAccountToken off?): ${errorMessage(err)}`, { cause: err });
    }
  }
  const kc = new KubeConfig();
  try {
    kc.loadFromCluster(rootPrefix);
  } catch (err) {
    throw new KubeconfigError(`in-cluster config could not be loaded: ${errorMessage(err)}`, { cause: err });
  }
  const server = kc.getCurrentCluster()?.server ?? '';
  return { kubeConfig: kc, server: checkServer(server, 'in-cluster config (KUBERNETES_SERVICE_HOST/PORT)'), origin: 'in-cluster service account' };
}

function checkServer(server: string, where: string): string {
  let url: URL;
  try {
    url = new URL(server);
  } catch (err) {
    throw new KubeconfigError(`${where}: server ${JSON.stringify(server)} is not a URL`, { cause: err });
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new KubeconfigError(`${where}: server ${server} must be an http or https URL`);
  return server;
}

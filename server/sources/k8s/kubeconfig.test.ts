import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { KubeconfigError, type KproxyError } from '../../errors.ts';
import { inClusterConfigPresent, loadKubeConfig, SERVICE_ACCOUNT_DIR } from './kubeconfig.ts';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kproxy-kubeconfig-test-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function kubeconfig(opts: { server?: string; context?: string | null; clusterName?: string; skipTLS?: boolean } = {}): string {
  return `apiVersion: v1
kind: Config
clusters:
  - name: ${opts.clusterName ?? 'prod'}
    cluster:
      server: ${opts.server ?? 'https://10.0.0.1:6443'}
${opts.skipTLS ? '      insecure-skip-tls-verify: true\n' : ''}users:
  - name: admin
    user: { token: abc }
contexts:
  - name: prod
    context: { cluster: prod, user: admin }
${opts.context === null ? '' : `current-context: ${opts.context ?? 'prod'}\n`}`;
}

async function file(text: string): Promise<string> {
  const p = join(dir, 'config');
  await writeFile(p, text);
  return p;
}

async function failure(fn: () => Promise<unknown>): Promise<KproxyError> {
  try {
    await fn();
  } catch (err) {
    expect(err).toBeInstanceOf(KubeconfigError);
    return err as KproxyError;
  }
  throw new Error('expected a KubeconfigError');
}

describe('loadKubeConfig with --kubeconfig', () => {
  it('loads a kubeconfig and says which server it leads to', async () => {
    const path = await file(kubeconfig());
    const loaded = await loadKubeConfig({ kubeconfig: path });
    expect(loaded.server).toBe('https://10.0.0.1:6443');
    expect(loaded.origin).toBe(`kubeconfig ${path}`);
    expect(loaded.kubeConfig.getCurrentUser()?.token).toBe('abc');
  });

  it('names a missing file', async () => {
    const e = await failure(() => loadKubeConfig({ kubeconfig: join(dir, 'nope') }));
    expect(e.message).toMatch(new RegExp(`^kubeconfig ${dir}/nope cannot be read: .*ENOENT`));
    expect(e.code).toBe('KPROXY_ERR_KUBECONFIG');
  });

  it('names a file that is not a kubeconfig', async () => {
    const path = await file('clusters: [: bad yaml');
    expect((await failure(() => loadKubeConfig({ kubeconfig: path }))).message).toMatch(new RegExp(`^kubeconfig ${path} is not a valid kubeconfig: `));
  });

  it('refuses a kubeconfig without a current context, or whose context names no cluster', async () => {
    let path = await file(kubeconfig({ context: null }));
    expect((await failure(() => loadKubeConfig({ kubeconfig: path }))).message).toBe(`kubeconfig ${path} sets no current-context`);
    path = await file(kubeconfig({ context: 'staging' }));
    expect((await failure(() => loadKubeConfig({ kubeconfig: path }))).message).toBe(`kubeconfig ${path}: current-context "staging" is not defined in contexts`);
    path = await file(kubeconfig({ clusterName: 'other' }));
    expect((await failure(() => loadKubeConfig({ kubeconfig: path }))).message).toBe(`kubeconfig ${path}: context "prod" names a cluster that is not defined in clusters`);
  });

  it('says at start that plain http needs insecure-skip-tls-verify, which the client requires', async () => {
    let path = await file(kubeconfig({ server: 'http://127.0.0.1:8001' }));
    expect((await failure(() => loadKubeConfig({ kubeconfig: path }))).message).toMatch(
      /server http:\/\/127\.0\.0\.1:8001 is plain http, which the Kubernetes client only accepts with insecure-skip-tls-verify: true/,
    );
    path = await file(kubeconfig({ server: 'http://127.0.0.1:8001', skipTLS: true }));
    expect((await loadKubeConfig({ kubeconfig: path })).server).toBe('http://127.0.0.1:8001');
  });
});

describe('loadKubeConfig in a cluster', () => {
  const env = { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' };

  async function serviceAccount(files: Record<string, string>): Promise<void> {
    const sa = join(dir, SERVICE_ACCOUNT_DIR);
    await mkdir(sa, { recursive: true });
    for (const [name, text] of Object.entries(files)) await writeFile(join(sa, name), text);
  }

  afterEach(() => {
    vi.unstubAllEnvs();
  });

  function inPod(): void {
    vi.stubEnv('KUBERNETES_SERVICE_HOST', env.KUBERNETES_SERVICE_HOST);
    vi.stubEnv('KUBERNETES_SERVICE_PORT', env.KUBERNETES_SERVICE_PORT);
  }

  it('uses the service account when KUBERNETES_SERVICE_HOST/PORT are set', async () => {
    await serviceAccount({ token: 'sa-token', 'ca.crt': 'CERT', namespace: 'kube-system' });
    expect(inClusterConfigPresent(env, dir)).toBe(true);
    inPod();
    const loaded = await loadKubeConfig({ rootPrefix: dir });
    expect(loaded.server).toBe('https://10.96.0.1:443');
    expect(loaded.origin).toBe('in-cluster service account');
  });

  it('explains what to pass when not in a cluster', async () => {
    expect(inClusterConfigPresent({}, dir)).toBe(false);
    vi.stubEnv('KUBERNETES_SERVICE_HOST', undefined);
    vi.stubEnv('KUBERNETES_SERVICE_PORT', undefined);
    expect((await failure(() => loadKubeConfig({ rootPrefix: dir }))).message).toMatch(/no --kubeconfig given and not running in a cluster .* pass --kubeconfig FILE or --source file:PATH/);
  });

  it('names the missing service account file', async () => {
    await serviceAccount({ token: 'sa-token' });
    inPod();
    expect((await failure(() => loadKubeConfig({ rootPrefix: dir }))).message).toMatch(new RegExp(`in-cluster config: the service account ca.crt ${dir}${SERVICE_ACCOUNT_DIR}/ca.crt cannot be read`));
  });
});

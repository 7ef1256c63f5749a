import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** FAKE_TOKEN is the bearer token the written kubeconfig carries (the fake server records it). */
export const FAKE_TOKEN = 'kproxy-api-test-token';

/** KubeconfigFile is a kubeconfig on disk pointing at a fake API server over plain http. */
export interface KubeconfigFile {
  readonly path: string;
  remove(): Promise<void>;
}

/** writeKubeconfig writes a kubeconfig for serverUrl into a fresh temporary folder. */
export async function writeKubeconfig(serverUrl: string): Promise<KubeconfigFile> {
  const dir = await mkdtemp(join(tmpdir(), 'kproxy-kubeconfig-'));
  const path = join(dir, 'kubeconfig');
  await writeFile(
    path,
    `apiVersion: v1
kind: Config
clusters:
  - name: fake
    cluster:
      server: ${serverUrl}
      # client-node only speaks plain http with TLS verification off
      insecure-skip-tls-verify: true
users:
  - name: kproxy
    user:
      token: ${FAKE_TOKEN}
contexts:
  - name: fake
    context: { cluster: fake, user: kproxy }
current-context: fake
`,
  );
  return { path, remove: () => rm(dir, { recursive: true, force: true }) };
}

import type { TestCluster } from './topology.ts';

/**
 * diagnosed runs a test body and, when it fails, appends what one needs to
 * see why without rerunning it: node-a's iptables-save (both flavours) and
 * the tail of kproxy's log. The original error (and its assertion diff) is
 * kept; only its message grows.
 */
export async function diagnosed(cluster: TestCluster | undefined, body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (err) {
    const report = cluster ? await cluster.diagnostics().catch((e: Error) => `(collecting diagnostics failed: ${e.message})`) : '(no test cluster was created)';
    if (err instanceof Error) {
      err.message += `\n\n${report}`;
      throw err;
    }
    throw new Error(`${String(err)}\n\n${report}`);
  }
}

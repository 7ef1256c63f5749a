import { TestCluster } from './topology.ts';

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
    throw new Error(`${String(err)}\n\n${report}`, { cause: err });
  }
}

/**
 * withTestCluster gives one test a cluster of its own (for tests that change
 * the node itself: restarts, take-over, cleanup), reports like `diagnosed`,
 * and always removes the cluster.
 */
export async function withTestCluster(body: (c: TestCluster) => Promise<void>): Promise<void> {
  const c = await TestCluster.create();
  let failure: unknown = null;
  try {
    await diagnosed(c, () => body(c));
  } catch (err) {
    failure = err;
  }
  try {
    await c.destroy();
  } catch (err) {
    // A failed teardown must not hide why the test failed: report both.
    if (failure instanceof Error) failure.message += `\n\n(teardown failed too: ${(err as Error).message})`;
    else throw err;
  }
  if (failure) throw failure;
}

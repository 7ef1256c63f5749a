import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIptablesRunner, IptablesRestoreError, type IptablesFlavor } from '../../server/kernel/iptables.ts';
import { XTABLES_LOCK_PATH } from '../../server/kernel/xtables-lock.ts';
import { createLogger } from '../../server/log.ts';
import { tiers } from '../tiers.ts';
import { waitFor } from '../wait.ts';
import { withTestCluster } from './harness/diagnostics.ts';
import { METRICS_ADDRESS, HEALTHZ_PORT } from './harness/kproxy.ts';
import { ready, tcpPort, type ServiceSpec } from './harness/manifests.ts';
import { addNamespace, deleteNamespace, HARNESS_PREFIX, nsRun } from './harness/netns.ts';
import { nsExecFn } from './harness/nft.ts';
import { PODS } from './harness/plan.ts';

/**
 * Another program holding the xtables lock. Legacy iptables flock()s the lock
 * file (/run/xtables.lock, or XTABLES_LOCKFILE) around each command and
 * restore; kproxy passes kube-proxy's `-w 5 -W 100000`, so a restore waits up
 * to 5 s, says so in the log while it waits, and goes on once the lock is
 * free; past 5 s it fails with an error naming the lock, and the sync is
 * retried. iptables-nft takes no lock and never waits.
 *
 * The lock is per mount namespace, not per network namespace: holding the
 * real /run/xtables.lock delays every legacy iptables on the machine. The
 * tests hold a lock file of their own (XTABLES_LOCKFILE, which iptables and
 * kproxy both read) for the long waits, and the real one for two seconds
 * only, released in `finally`.
 */
const RULES = (chain: string) => `*filter\n:${chain} - [0:0]\n-A ${chain} -j RETURN\nCOMMIT\n`;

interface HeldLock {
  readonly pid: number;
  release(): Promise<void>;
}

/** holdLock takes the lock file with flock(1) (its child `cat` keeps it until its stdin closes) and resolves once it is held. */
async function holdLock(file: string): Promise<HeldLock> {
  const child: ChildProcess = spawn('flock', ['--exclusive', file, 'sh', '-c', 'echo held; exec cat >/dev/null'], { stdio: ['pipe', 'pipe', 'pipe'] });
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`flock ${file} exited (${code}) before it held the lock`)));
  });
  return {
    pid: child.pid!,
    async release() {
      child.stdin!.end();
      const gone = await Promise.race([exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 3000))]);
      if (!gone) {
        // Ours, by PID: flock and the cat it started.
        const kids = readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
        for (const pid of [...kids, child.pid!]) {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            // Already gone.
          }
        }
        await exited;
      }
    },
  };
}

/** withLockFile points iptables and kproxy at a lock file of the test's own (XTABLES_LOCKFILE) while body runs. */
async function withLockFile<T>(file: string, body: () => Promise<T>): Promise<T> {
  const saved = process.env.XTABLES_LOCKFILE;
  process.env.XTABLES_LOCKFILE = file;
  try {
    return await body();
  } finally {
    if (saved === undefined) delete process.env.XTABLES_LOCKFILE;
    else process.env.XTABLES_LOCKFILE = saved;
  }
}

describe.skipIf(!tiers().kernel.ok)('iptables restores while another program holds the xtables lock', () => {
  const NS = `${HARNESS_PREFIX}xtlock`;
  let dir: string;
  let lockFile: string;
  let chains = 0;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), `${HARNESS_PREFIX}xtlock-`));
    lockFile = join(dir, 'xtables.lock');
    writeFileSync(lockFile, '');
    await addNamespace(NS);
  });
  afterAll(async () => {
    await deleteNamespace(NS);
    rmSync(dir, { recursive: true, force: true });
  });

  async function runner(flavor: IptablesFlavor, lines: string[]) {
    return createIptablesRunner({ family: 'IPv4', flavor, exec: nsExecFn(NS), logger: createLogger({ write: (l) => lines.push(l) }) });
  }
  const has = async (flavor: IptablesFlavor, chain: string) => (await nsRun(NS, [`iptables-${flavor}-save`, '-t', 'filter'])).includes(`:${chain} `);

  it('legacy: waits for the lock, says so while it waits, and restores once it is released', () =>
    withLockFile(lockFile, async () => {
      const lines: string[] = [];
      const r = await runner('legacy', lines);
      const chain = `KPT-WAIT-${chains++}`;
      const lock = await holdLock(lockFile);
      let restored = false;
      try {
        const restore = r.restore(RULES(chain)).then(() => (restored = true));
        await waitFor(() => lines.some((l) => l.includes('is waiting for the xtables lock')), { timeoutMs: 4000, intervalMs: 50, what: 'the log to say the restore waits' });
        // Said while it waits: nothing restored yet.
        expect(restored).toBe(false);
        expect(await has('legacy', chain)).toBe(false);
        expect(lines.find((l) => l.includes('is waiting'))).toContain(`holder="held by pid ${lock.pid} (flock)"`);
        await lock.release();
        await restore;
      } finally {
        await lock.release();
      }
      expect(await has('legacy', chain)).toBe(true);
      expect(lines.some((l) => /^I .*iptables-legacy-restore got the xtables lock /.test(l))).toBe(true);
      expect(r.lockWaits!()).toEqual({ acquired: 1, timedOut: 0 });
    }));

  it('legacy: gives up after 5 s with an error naming the lock and its holder, writes nothing, and the retry restores', () =>
    withLockFile(lockFile, async () => {
      const r = await runner('legacy', []);
      const chain = `KPT-LATE-${chains++}`;
      const lock = await holdLock(lockFile);
      let err: unknown;
      try {
        err = await r.restore(RULES(chain)).catch((e: unknown) => e);
      } finally {
        await lock.release();
      }
      expect(err).toBeInstanceOf(IptablesRestoreError);
      expect((err as Error).message).toBe(
        `iptables-legacy-restore could not take the xtables lock (${lockFile}) within 5 s, held by pid ${lock.pid} (flock): nothing was restored, and the sync is retried`,
      );
      expect(await has('legacy', chain)).toBe(false);
      await r.restore(RULES(chain));
      expect(await has('legacy', chain)).toBe(true);
      expect(r.lockWaits!()).toEqual({ acquired: 0, timedOut: 1 });
    }));

  it('nft: takes no lock, so a held one delays nothing', () =>
    withLockFile(lockFile, async () => {
      const lines: string[] = [];
      const r = await runner('nft', lines);
      const chain = `KPT-NFT-${chains++}`;
      const lock = await holdLock(lockFile);
      try {
        await r.restore(RULES(chain));
        // Restored while the lock is still held.
        expect(await has('nft', chain)).toBe(true);
      } finally {
        await lock.release();
      }
      expect(lines).toEqual([]);
      expect(r.lockWaits!()).toEqual({ acquired: 0, timedOut: 0 });
    }));

  it(`legacy: waits for the real ${XTABLES_LOCK_PATH} (held for at most two seconds) in its own network namespace`, async () => {
    expect(process.env.XTABLES_LOCKFILE ?? '').toBe('');
    const lines: string[] = [];
    const r = await runner('legacy', lines);
    const chain = `KPT-REAL-${chains++}`;
    const lock = await holdLock(XTABLES_LOCK_PATH);
    try {
      const restore = r.restore(RULES(chain));
      await waitFor(() => lines.some((l) => l.includes('is waiting for the xtables lock')), { timeoutMs: 1800, intervalMs: 50, what: 'the log to say the restore waits' });
      await new Promise((res) => setTimeout(res, 200));
      await lock.release();
      await restore;
    } finally {
      await lock.release();
    }
    expect(lines.find((l) => l.includes('is waiting'))).toContain(`lock=${XTABLES_LOCK_PATH}`);
    expect(await has('legacy', chain)).toBe(true);
  });
});

describe.skipIf(!tiers().kernel.ok)('a live kproxy (legacy iptables) and a held xtables lock', () => {
  const { a0, a1 } = PODS;
  const web: ServiceSpec = { name: 'web', clusterIP: '10.96.0.10', ports: tcpPort(80) };
  const late: ServiceSpec = { name: 'late', clusterIP: '10.96.0.11', ports: tcpPort(80) };

  it('a sync that waited past 5 s fails naming the lock, is retried, and lands once the lock is free; healthz stays 200', { timeout: 180_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), `${HARNESS_PREFIX}xtlock-daemon-`));
    const lockFile = join(dir, 'xtables.lock');
    writeFileSync(lockFile, '');
    try {
      await withLockFile(lockFile, () =>
        withTestCluster(async (c) => {
          c.manifests.writeService(web, ready(a0));
          await c.startKproxy('legacy', ['--iptables-sync-period', '2s']);
          const client = c.client();
          const lock = await holdLock(lockFile);
          try {
            c.manifests.writeService(late, ready(a1));
            await waitFor(() => c.kproxy.log.tail(400).includes('could not take the xtables lock'), { timeoutMs: 20_000, intervalMs: 100, what: 'a sync to give up on the lock' });
          } finally {
            await lock.release();
          }
          const log = c.kproxy.log.tail(400);
          expect(log).toMatch(/W .*iptables-legacy-restore is waiting for the xtables lock, as kube-proxy does \(up to 5 s\)/);
          expect(log).toMatch(
            new RegExp(`sync failed, the kernel keeps its previous rules; retrying with a full sync .*could not take the xtables lock \\(${lockFile.replaceAll('/', '\\/')}\\) within 5 s`),
          );
          await waitFor(async () => (await client.tcp({ host: late.clusterIP, port: 80 })).backends.join() === 'a1', { timeoutMs: 20_000, intervalMs: 250, what: 'the late service to answer' });
          expect((await client.tcp({ host: web.clusterIP, port: 80 }, 4)).backends).toEqual(['a0']);
          expect((await c.kproxy.curl(`http://127.0.0.1:${HEALTHZ_PORT}/healthz`)).status).toBe(200);
          const metrics = (await c.kproxy.curl(`http://${METRICS_ADDRESS}/metrics`)).body;
          expect(metrics).toMatch(/^kproxy_iptables_xtables_lock_waits_total\{ip_family="IPv4",result="timed_out"\} [1-9]/m);
          expect(metrics).toMatch(/^kubeproxy_sync_proxy_rules_iptables_restore_failures_total\{ip_family="IPv4"\} [1-9]/m);
        }),
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

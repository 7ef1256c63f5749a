import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { waitFor } from '../wait.ts';
import { withTestCluster } from './harness/diagnostics.ts';
import { HEALTHZ_PORT, METRICS_ADDRESS } from './harness/kproxy.ts';
import { ready, serviceObjects, tcpPort, type ServiceSpec } from './harness/manifests.ts';
import { PODS } from './harness/plan.ts';
import type { TestCluster } from './harness/topology.ts';

/**
 * nftables mode's netlink helper (dist/native/nfnl-pipe, a child of the
 * daemon) killed with SIGKILL while kproxy runs: between syncs, the next sync
 * starts a new helper and lands, with no sync failed; during a sync, that sync
 * fails (whether the kernel took the batch is unknown), and the retry, a full
 * sync through a new helper, lands. Read back with `nft list table` in the
 * node; the daemon stays healthy throughout.
 */
const { a0, a1 } = PODS;
const web: ServiceSpec = { name: 'web', clusterIP: '10.96.0.10', ports: tcpPort(80) };
const NFT = ['--proxy-mode', 'nftables', '--iptables-sync-period', '2s'];

/** helperPid: the daemon's nfnl-pipe child (any of the daemon's threads may have spawned it). */
function helperPid(c: TestCluster): number | null {
  const daemon = c.kproxy.pid;
  if (daemon === null) return null;
  for (const task of readdirSync(`/proc/${daemon}/task`)) {
    const kids = readFileSync(`/proc/${daemon}/task/${task}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
    for (const pid of kids) {
      try {
        if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'nfnl-pipe') return pid;
      } catch {
        // Gone meanwhile.
      }
    }
  }
  return null;
}

/** bytesRead: what a process has read so far (/proc/PID/io rchar): the helper reads each batch from its stdin. */
function bytesRead(pid: number): number {
  return Number(/^rchar: (\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'))![1]);
}

/** since: the daemon log's lines after the first that matches `mark`. */
function since(c: TestCluster, mark: string): string[] {
  const lines = c.kproxy.log.tail(2000).split('\n');
  const at = lines.findLastIndex((l) => l.includes(mark));
  return at < 0 ? [] : lines.slice(at + 1);
}

async function metrics(c: TestCluster): Promise<string> {
  return (await c.kproxy.curl(`http://${METRICS_ADDRESS}/metrics`)).body;
}

describe.skipIf(!tiers().kernel.ok)('the netlink helper killed while kproxy runs (nftables mode)', () => {
  it('killed between syncs: the next sync starts a new helper and lands; no sync fails, healthz stays 200', () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0));
      await c.startKproxy('nft', NFT);
      const first = helperPid(c);
      expect(first, 'the daemon runs a netlink helper').not.toBeNull();
      process.kill(first!, 'SIGKILL');
      await waitFor(() => !readdirSync('/proc').includes(String(first)), { what: `helper ${first} to be gone` });

      const added: ServiceSpec = { name: 'added', clusterIP: '10.96.0.11', ports: tcpPort(80) };
      c.manifests.writeService(added, ready(a1));
      await waitFor(async () => (await c.nftTable()).includes('10.96.0.11 . tcp . 80'), { timeoutMs: 20_000, what: 'the added service in the table' });
      expect((await c.client().tcp({ host: added.clusterIP, port: 80 }, 4)).backends).toEqual(['a1']);

      const after = since(c, 'the netlink helper failed');
      expect(c.kproxy.log.tail(2000)).toMatch(new RegExp(`E .*the netlink helper failed; it is started again for the next transaction .*err="the helper exited between transactions" pid=${first} `));
      expect(after.some((l) => /I .*started the netlink helper again pid=\d+ /.test(l))).toBe(true);
      expect(after.filter((l) => l.includes('sync failed'))).toEqual([]);
      // The sync that wrote it went over netlink, not nft -f.
      expect(after.filter((l) => l.includes('writing this transaction with nft -f'))).toEqual([]);
      const second = helperPid(c);
      expect(second).not.toBeNull();
      expect(second).not.toBe(first);
      expect((await c.kproxy.curl(`http://127.0.0.1:${HEALTHZ_PORT}/healthz`)).status).toBe(200);
      const m = await metrics(c);
      expect(m).toMatch(/^kproxy_nftables_netlink_helper_failures_total 1$/m);
      expect(m).toMatch(/^kproxy_nftables_netlink_helper_restarts_total\{result="success"\} 1$/m);
    }));

  it('killed during a sync: that sync fails, and the retry lands through a new helper; healthz stays 200', { timeout: 180_000 }, () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0));
      await c.startKproxy('nft', NFT);
      const first = helperPid(c)!;
      expect(first).not.toBeNull();

      // 600 Services in one change: a batch the helper takes a while to read and the kernel to apply.
      const bulk: ServiceSpec[] = Array.from({ length: 600 }, (_, i) => ({ name: `bulk-${i}`, clusterIP: `10.96.${10 + (i >> 8)}.${i & 255}`, ports: tcpPort(80) }));
      const base = bytesRead(first);
      c.manifests.write(
        'bulk',
        bulk.flatMap((s) => serviceObjects(s, ready(a1))),
      );
      // The moment the helper has read part of the batch, the sync is in flight: kill it there.
      const deadline = Date.now() + 30_000;
      while (bytesRead(first) - base < 64 * 1024) {
        if (Date.now() > deadline) throw new Error('the helper never read the bulk batch');
      }
      process.kill(first, 'SIGKILL');

      await waitFor(() => since(c, 'the netlink helper failed').some((l) => / synced fully family=IPv4 /.test(l)), { timeoutMs: 60_000, intervalMs: 200, what: 'a full sync after the failure' });
      const log = c.kproxy.log.tail(2000);
      expect(log).toMatch(new RegExp(`E .*the netlink helper failed; it is started again for the next transaction .*pid=${first} `));
      expect(log).toMatch(/sync failed, the kernel keeps its previous rules; retrying with a full sync .*netlink: .*exited \(SIGKILL\)/);
      const after = since(c, 'the netlink helper failed');
      expect(after.some((l) => /I .*started the netlink helper again pid=\d+ /.test(l))).toBe(true);

      // Everything is in the kernel: every bulk service's chain and map element, and web still serves.
      const table = await c.nftTable();
      for (const s of [bulk[0], bulk[299], bulk[599]]) expect(table).toContain(`${s.clusterIP} . tcp . 80 : goto service-`);
      expect(table.split('\n').filter((l) => /^\tchain service-/.test(l) && !l.includes('service-endpoints-check'))).toHaveLength(bulk.length + 1);
      expect((await c.client().tcp({ host: bulk[599].clusterIP, port: 80 }, 2)).backends).toEqual(['a1']);
      expect((await c.client().tcp({ host: web.clusterIP, port: 80 }, 2)).backends).toEqual(['a0']);
      expect(helperPid(c)).not.toBe(first);
      expect((await c.kproxy.curl(`http://127.0.0.1:${HEALTHZ_PORT}/healthz`)).status).toBe(200);
      const m = await metrics(c);
      expect(m).toMatch(/^kproxy_nftables_netlink_helper_failures_total 1$/m);
      expect(m).toMatch(/^kubeproxy_sync_proxy_rules_nftables_sync_failures_total\{ip_family="IPv4"\} 1$/m);
    }),
  );
});

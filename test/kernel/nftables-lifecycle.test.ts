import { describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { withTestCluster } from './harness/diagnostics.ts';
import { kubeProxyNftables } from './harness/kube-proxy-rules.ts';
import { ready, tcpPort, type ServiceSpec } from './harness/manifests.ts';
import { nsExec, nsRun } from './harness/netns.ts';
import { PODS } from './harness/plan.ts';
import type { TestCluster } from './harness/topology.ts';

/**
 * nftables mode's life on a node, with real packets: a restart, switching
 * modes back and forth under traffic, taking over a table kube-proxy left, and
 * --cleanup. Each test has a cluster of its own because each changes the node.
 */
const { a0, a1, a2, b0 } = PODS;
const web: ServiceSpec = { name: 'web', clusterIP: '10.96.0.10', ports: tcpPort(80) };
const gone: ServiceSpec = { name: 'gone', clusterIP: '10.96.0.99', ports: tcpPort(80) };
const webTarget = { host: web.clusterIP, port: 80 };
const NFT = ['--proxy-mode', 'nftables'];

/** lastRunSyncs: the IPv4 proxier's "synced …" log lines of the daemon's latest run (these tests program the ip table). */
function lastRunSyncs(c: TestCluster): string[] {
  const log = c.kproxy.log.tail(2000);
  const run = log.lastIndexOf('----- daemon run');
  return log
    .slice(run)
    .split('\n')
    .filter((l) => / synced (fully|partially) family=IPv4 /.test(l));
}

const kubeLines = (save: string) => save.split('\n').filter((l) => l.includes('KUBE-'));

describe.skipIf(!tiers().kernel.ok)('nftables mode on a node over time (real packets)', () => {
  it('a restart keeps an open TCP connection, new ones work throughout, and a right table is not rewritten', () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0, a1));
      await c.startKproxy('nft', NFT);
      const client = c.client();
      const { conn, hello } = await client.open(webTarget);
      expect(['a0', 'a1']).toContain(hello.name);

      // Restart with nothing changed: the table is listed, found right, and nothing is written.
      const traffic = client.tcpFor(webTarget, 4000);
      expect(await c.kproxy.stop()).toBe(0);
      expect(await client.send(conn, 'while stopped')).toMatchObject({ outcome: 'ok', name: hello.name, echo: 'while stopped' });
      await c.startKproxy('nft', NFT);
      expect(lastRunSyncs(c)[0]).toMatch(/synced fully .* lines=0 /);
      const during = await traffic;
      console.info(`[measured] ${during.attempts.length} new connections during the restart, outcomes ${JSON.stringify(during.outcomes)}`);
      expect(during.outcomes).toEqual({ ok: during.attempts.length });
      expect(await client.send(conn, 'after restart')).toMatchObject({ outcome: 'ok', name: hello.name, echo: 'after restart' });

      // An endpoint added while kproxy is down is programmed by the restarted daemon, and only that.
      expect(await c.kproxy.stop()).toBe(0);
      c.manifests.writeService(web, ready(a0, a1, a2));
      await c.startKproxy('nft', NFT);
      // The service chain (flush + its 2 rules) and the new endpoint chain (add + its 2 rules).
      expect(lastRunSyncs(c)[0], lastRunSyncs(c)[0]).toMatch(/synced fully .* lines=6 /);
      expect((await client.tcp(webTarget, 40)).backends).toEqual(['a0', 'a1', 'a2']);
      expect(await client.send(conn, 'after the second restart')).toMatchObject({ outcome: 'ok', name: hello.name });
    }));

  it('iptables -> nftables -> iptables on a live node breaks no established connection, and new ones work throughout', () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0, a1));
      await c.startKproxy('nft');
      const client = c.client();
      const { conn, hello } = await client.open(webTarget);

      // To nftables: the iptables rules serve until the table does, then go.
      let traffic = client.tcpFor(webTarget, 5000);
      expect(await c.kproxy.stop()).toBe(0);
      await c.startKproxy('nft', NFT);
      let during = await traffic;
      console.info(`[measured] iptables -> nftables: ${during.attempts.length} new connections, outcomes ${JSON.stringify(during.outcomes)}`);
      expect(during.outcomes).toEqual({ ok: during.attempts.length });
      expect(await client.send(conn, 'on nftables')).toMatchObject({ outcome: 'ok', name: hello.name, echo: 'on nftables' });
      expect(kubeLines(await c.iptablesSave('nft')).filter((l) => /KUBE-(SVC|SEP|SERVICES)/.test(l))).toEqual([]);
      expect(await c.nftTable()).toContain('chain service-');
      expect((await client.tcp(webTarget, 30)).backends).toEqual(['a0', 'a1']);

      // And back to iptables.
      traffic = client.tcpFor(webTarget, 5000);
      expect(await c.kproxy.stop()).toBe(0);
      await c.startKproxy('nft');
      during = await traffic;
      console.info(`[measured] nftables -> iptables: ${during.attempts.length} new connections, outcomes ${JSON.stringify(during.outcomes)}`);
      expect(during.outcomes).toEqual({ ok: during.attempts.length });
      expect(await client.send(conn, 'back on iptables')).toMatchObject({ outcome: 'ok', name: hello.name, echo: 'back on iptables' });
      expect(kubeLines(await c.iptablesSave('nft')).some((l) => l.includes('KUBE-SVC-'))).toBe(true);
      expect((await client.tcp(webTarget, 30)).backends).toEqual(['a0', 'a1']);
    }));

  it('takes over the table kube-proxy left, in place: established and new connections keep working, its stale chains go', () =>
    withTestCluster(async (c) => {
      // kube-proxy's table for web (a0, a1) and a Service that no longer exists, as kube-proxy spells it:
      // one-element sets in braces, the mark as "0x4000". Generated by kproxy's --dry-run for that state.
      c.manifests.writeService(web, ready(a0, a1));
      c.manifests.writeService(gone, ready(b0));
      await nsRun(c.ns.nodeA, ['nft', '-f', '-'], { stdin: await kubeProxyNftables(c) });
      const client = c.client();
      const { conn, hello } = await client.open(webTarget);
      expect((await client.tcp({ host: gone.clusterIP, port: 80 })).backends).toEqual(['b0']);

      c.manifests.remove('svc-gone');
      c.manifests.writeService(web, ready(a0, a1, a2));
      const traffic = client.tcpFor(webTarget, 3000);
      await c.startKproxy('nft', NFT);
      const during = await traffic;
      expect(during.outcomes).toEqual({ ok: during.attempts.length });
      expect(await client.send(conn, 'after take-over')).toMatchObject({ outcome: 'ok', name: hello.name, echo: 'after take-over' });
      expect((await client.tcp(webTarget, 40)).backends).toEqual(['a0', 'a1', 'a2']);
      // What kube-proxy wrote the way kproxy does was left alone: only web's service chain, its
      // new endpoint chain and gone's objects were written (the first sync's transaction).
      const first = lastRunSyncs(c)[0];
      expect(first).toMatch(/synced fully /);
      expect(Number(/ lines=(\d+) /.exec(first)?.[1])).toBeLessThan(15);
      // gone's chains were flushed, and are deleted a second later.
      const table = await c.nftTable();
      expect(table).not.toContain('10.96.0.99 . tcp . 80');
      expect((await client.tcp({ host: gone.clusterIP, port: 80, timeoutMs: 900 })).outcomes).toEqual({ timeout: 1 });
    }));

  it('--cleanup deletes the table and leaves nothing of nftables mode', () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0, a1));
      await c.startKproxy('nft', NFT);
      expect((await c.client().tcp(webTarget)).outcomes).toEqual({ ok: 1 });
      expect(await c.kproxy.stop()).toBe(0);
      // The rules stay when kproxy stops, as kube-proxy's do.
      expect((await c.client().tcp(webTarget)).outcomes).toEqual({ ok: 1 });

      const cleanup = await c.kproxy.command(['--cleanup']);
      expect(cleanup.code).toBe(0);
      // The host's ip6tables works, so the daemon ran dual-stack: the ip and the ip6 kube-proxy tables.
      expect(cleanup.stdout).toContain('nftables 2');
      const ruleset = (await nsRun(c.ns.nodeA, ['nft', 'list', 'ruleset'])).trim();
      expect(ruleset).not.toMatch(/kube-proxy|KUBE-/);
      expect((await c.client().tcp({ ...webTarget, timeoutMs: 900 })).outcomes).toEqual({ timeout: 1 });
      // A second cleanup finds nothing and still succeeds.
      const again = await c.kproxy.command(['--cleanup']);
      expect(again.code).toBe(0);
      expect((await nsExec(c.ns.nodeA, ['nft', 'list', 'tables'])).stdout).not.toContain('kube-proxy');
    }));
});

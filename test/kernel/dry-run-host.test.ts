import { describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { waitFor } from '../wait.ts';
import { CLI, curlIn, HEALTHZ_PORT, METRICS_ADDRESS } from './harness/kproxy.ts';
import { addNamespace, deleteNamespace, HARNESS_PREFIX, nsRun } from './harness/netns.ts';
import { LogTail, ProcessTracker } from './harness/processes.ts';

/**
 * `--dry-run` changes nothing on the host: in a namespace of its own, the demo
 * (the README's first command: the example cluster, as no source is given)
 * programs no rule, sets no sysctl, and binds only its own two listeners: the
 * example's health check node port (shop/ingress, 32100) is simulated, and
 * shown on the dashboard as such.
 */
describe.skipIf(!tiers().kernel.ok)('--dry-run on a real network namespace', () => {
  it('touches nothing: no listener but its own, no rule, no sysctl; the health check node port is simulated and shown', async () => {
    const ns = `${HARNESS_PREFIX}dry-run`;
    const processes = new ProcessTracker();
    const log = new LogTail();
    await addNamespace(ns);
    try {
      await nsRun(ns, ['ip', 'link', 'set', 'lo', 'up']);
      const routeLocalnet = (await nsRun(ns, ['cat', '/proc/sys/net/ipv4/conf/all/route_localnet'])).trim();
      const p = processes.start('kproxy --dry-run', ns, [
        process.execPath,
        CLI,
        '--dry-run',
        '--conntrack-max-per-core',
        '0',
        '--healthz-bind-address',
        `0.0.0.0:${HEALTHZ_PORT}`,
        '--metrics-bind-address',
        METRICS_ADDRESS,
      ]);
      p.log.onLine((l) => log.push(l + '\n'));
      await waitFor(async () => (await curlIn(ns, `http://127.0.0.1:${HEALTHZ_PORT}/readyz`)).status === 200, { what: 'the dry run to sync', timeoutMs: 30_000 }).catch((err: Error) => {
        throw new Error(`${err.message}\n${log.tail(40)}`);
      });
      expect(log.tail(200)).toMatch(/simulated service health check \(--dry-run: nothing bound on the host\) service=shop\/ingress port=32100/);

      const listening = (await nsRun(ns, ['ss', '-Hltnu']))
        .split('\n')
        .filter(Boolean)
        .map((l) => l.trim().split(/\s+/)[4]);
      expect(listening.sort()).toEqual([`0.0.0.0:${HEALTHZ_PORT}`, METRICS_ADDRESS].sort());
      for (const save of ['iptables-nft-save', 'iptables-legacy-save', 'ip6tables-nft-save', 'ip6tables-legacy-save']) expect(await nsRun(ns, [save])).not.toMatch(/KUBE-/);
      expect((await nsRun(ns, ['nft', 'list', 'ruleset'])).trim()).not.toMatch(/KUBE-|kube-proxy/);
      expect((await nsRun(ns, ['cat', '/proc/sys/net/ipv4/conf/all/route_localnet'])).trim()).toBe(routeLocalnet);

      // The example cluster is dual-stack: the simulated listener stands for the one that would serve both families.
      const page = await curlIn(ns, `http://${METRICS_ADDRESS}/api/v1/services/shop/ingress`);
      expect(page.status).toBe(200);
      expect(JSON.parse(page.body).healthCheck).toEqual({ port: 32100, open: true, simulated: true, addresses: ['0.0.0.0', '::'], localEndpoints: 1, status: 200 });
    } finally {
      await processes.stopAll();
      await deleteNamespace(ns);
    }
  });
});

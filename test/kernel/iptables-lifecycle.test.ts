import { describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { waitFor } from '../wait.ts';
import { withTestCluster } from './harness/diagnostics.ts';
import { kproxyArgs } from './harness/kproxy.ts';
import { kubeProxyChain, kubeProxyRestore } from './harness/kube-proxy-rules.ts';
import { ready, tcpPort, type ServiceSpec } from './harness/manifests.ts';
import { nsExec, nsRun } from './harness/netns.ts';
import { CLUSTER_CIDR, LB_IP, PODS, POD_TCP_PORT } from './harness/plan.ts';

/**
 * kproxy's life on a node, with real packets (iptables nft flavour unless
 * said): a restart, taking over from kube-proxy, and --cleanup. Each test has
 * a cluster of its own because each changes the node itself.
 */
const { a0, a1, a2, b0 } = PODS;
const web: ServiceSpec = { name: 'web', clusterIP: '10.96.0.10', ports: tcpPort(80) };
const edge: ServiceSpec = {
  name: 'edge',
  type: 'LoadBalancer',
  clusterIP: '10.96.0.11',
  loadBalancerIP: LB_IP,
  loadBalancerSourceRanges: ['10.0.0.0/24'],
  externalTrafficPolicy: 'Local',
  healthCheckNodePort: 32001,
  sessionAffinity: 'ClientIP',
  ports: tcpPort(80, 30081),
};
const webTarget = { host: web.clusterIP, port: 80 };

/** BUILT_IN_JUMPS: kube-proxy's jump rules from built-in chains (filter INPUT 4, FORWARD 4, OUTPUT 3; nat PREROUTING, OUTPUT, POSTROUTING). */
const BUILT_IN_JUMPS = 14;

/** builtInJumps lists "table: rule" for every rule in a built-in chain that jumps to a KUBE- chain. */
function builtInJumps(save: string): string[] {
  let table = '';
  const jumps: string[] = [];
  for (const line of save.split('\n')) {
    if (line.startsWith('*')) table = line.slice(1);
    else if (/^-A (INPUT|FORWARD|OUTPUT|PREROUTING|POSTROUTING) .*-j KUBE-/.test(line)) jumps.push(`${table}: ${line}`);
  }
  return jumps;
}

const kubeLines = (save: string) => save.split('\n').filter((l) => l.includes('KUBE-'));

describe.skipIf(!tiers().kernel.ok)('kproxy on a node over time (iptables, real packets)', () => {
  it('restarting kproxy keeps an open TCP connection, and new connections work throughout', () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0, a1));
      await c.startKproxy('nft');
      const client = c.client();
      const { conn, hello } = await client.open(webTarget);
      expect(['a0', 'a1']).toContain(hello.name);
      expect(await client.send(conn, 'before')).toMatchObject({ outcome: 'ok', name: hello.name, echo: 'before' });

      const traffic = client.tcpFor(webTarget, 4000);
      expect(await c.kproxy.stop()).toBe(0);
      // kproxy leaves its rules in place when it stops, as kube-proxy does.
      expect(await client.send(conn, 'while stopped')).toMatchObject({ outcome: 'ok', name: hello.name, echo: 'while stopped' });
      c.manifests.writeService(web, ready(a0, a1, a2));
      await c.startKproxy('nft');

      const during = await traffic;
      console.info(`[measured] ${during.attempts.length} new connections during the restart, outcomes ${JSON.stringify(during.outcomes)}`);
      expect(during.outcomes).toEqual({ ok: during.attempts.length });
      expect(await client.send(conn, 'after restart')).toMatchObject({ outcome: 'ok', name: hello.name, echo: 'after restart' });
      // The restarted daemon programmed the endpoint added while it was down.
      const after = await client.tcp(webTarget, 40);
      expect(after.backends).toEqual(['a0', 'a1', 'a2']);
    }));

  it('taking over from kube-proxy updates its chains in place, keeping established and new connections', () =>
    withTestCluster(async (c) => {
      const kpWeb = { portName: 'kpt/web:tcp', clusterIP: web.clusterIP, port: 80, targetPort: POD_TCP_PORT, endpoints: [a0, a1] };
      const kpGone = { portName: 'kpt/gone:tcp', clusterIP: '10.96.0.99', port: 80, targetPort: POD_TCP_PORT, endpoints: [b0] };
      await nsRun(c.ns.nodeA, ['iptables-nft-restore'], { stdin: kubeProxyRestore([kpWeb, kpGone], CLUSTER_CIDR) });
      const client = c.client();
      // The node works on kube-proxy's rules before kproxy starts.
      const { conn, hello } = await client.open(webTarget);
      expect(['a0', 'a1']).toContain(hello.name);
      expect((await client.tcp({ host: kpGone.clusterIP, port: 80 })).backends).toEqual(['b0']);

      c.manifests.writeService(web, ready(a0, a1, a2));
      const traffic = client.tcpFor(webTarget, 3000);
      await c.startKproxy('nft');
      const during = await traffic;
      console.info(`[measured] ${during.attempts.length} new connections during the take-over, outcomes ${JSON.stringify(during.outcomes)}`);
      expect(during.outcomes).toEqual({ ok: during.attempts.length });
      expect(await client.send(conn, 'after take-over')).toMatchObject({ outcome: 'ok', name: hello.name, echo: 'after take-over' });
      expect((await client.tcp(webTarget, 40)).backends).toEqual(['a0', 'a1', 'a2']);

      const save = await c.iptablesSave('nft');
      // kube-proxy's service chain is the one kproxy now fills: same name, one more endpoint.
      const svc = kubeProxyChain('KUBE-SVC-', kpWeb.portName, 'tcp');
      expect(save.split('\n').filter((l) => l.startsWith(`-A ${svc} `) && l.includes('-j KUBE-SEP-'))).toHaveLength(3);
      // The chains of a service that no longer exists are deleted.
      expect(save).not.toContain(kubeProxyChain('KUBE-SVC-', kpGone.portName, 'tcp'));
      expect(save).not.toContain(kubeProxyChain('KUBE-SEP-', kpGone.portName, 'tcp', `${b0.ip}:${POD_TCP_PORT}`));
      // kube-proxy's jump rules were recognised, not doubled by kproxy's own.
      const jumps = builtInJumps(save);
      expect(new Set(jumps).size).toBe(jumps.length);
      expect(jumps).toHaveLength(BUILT_IN_JUMPS);
    }));

  it('a firewall reload that wipes the tables is repaired within about 2 s (the canary chain is gone)', () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0, a1));
      await c.startKproxy('nft');
      expect((await c.client().tcp(webTarget)).outcomes).toEqual({ ok: 1 });

      const wipedAt = performance.now();
      // What a firewall service does on reload: replace whole tables with its own (here: empty) rules.
      await nsRun(c.ns.nodeA, ['iptables-nft-restore'], { stdin: '*mangle\nCOMMIT\n*filter\nCOMMIT\n*nat\nCOMMIT\n' });
      expect(await c.iptablesSave('nft')).not.toContain('KUBE-');
      const repaired = await waitFor(async () => ((await c.client().tcp({ ...webTarget, timeoutMs: 300 })).outcomes.ok ? performance.now() - wipedAt : null), {
        timeoutMs: 10_000,
        intervalMs: 0,
        what: 'service traffic to work again after the tables were wiped',
      });
      console.info(`[measured] tables wiped -> service traffic works again after ${Math.round(repaired)} ms`);
      expect(repaired).toBeLessThan(3000);
      expect((await c.client().tcp(webTarget, 20)).backends).toEqual(['a0', 'a1']);
      expect(builtInJumps(await c.iptablesSave('nft'))).toHaveLength(BUILT_IN_JUMPS);
    }));

  it('--cleanup removes every KUBE- chain and rule in both iptables flavours, and kube-proxy nftables tables', () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0, a1));
      c.manifests.writeService(edge, ready(a0, b0));
      await c.startKproxy('nft');
      expect((await c.client().tcp(webTarget)).outcomes).toEqual({ ok: 1 });
      expect(await c.kproxy.stop()).toBe(0);
      // An earlier run in the other flavour, and kube-proxy's nftables mode, left their state too.
      const legacy = await c.kproxy.command(['--once', ...kproxyArgs(c.kproxyOptions('legacy'))]);
      expect(legacy.code).toBe(0);
      await nsRun(c.ns.nodeA, ['nft', 'add table ip kube-proxy; add chain ip kube-proxy services']);
      for (const flavor of ['nft', 'legacy'] as const) expect(kubeLines(await c.iptablesSave(flavor)).length).toBeGreaterThan(40);

      const cleanup = await c.kproxy.command(['--cleanup']);
      expect(cleanup.code).toBe(0);
      for (const flavor of ['nft', 'legacy'] as const) expect(kubeLines(await c.iptablesSave(flavor))).toEqual([]);
      const ruleset = await nsRun(c.ns.nodeA, ['nft', 'list', 'ruleset']);
      expect(ruleset).not.toMatch(/KUBE-|table ip kube-proxy/);
      // Nothing translates service traffic any more.
      expect((await c.client().tcp({ ...webTarget, timeoutMs: 900 })).outcomes).toEqual({ timeout: 1 });

      // A second cleanup finds nothing to do and still succeeds.
      expect((await c.kproxy.command(['--cleanup'])).code).toBe(0);
      expect((await nsExec(c.ns.nodeA, ['iptables-nft-save'])).stdout).not.toContain('KUBE-');
    }));
});

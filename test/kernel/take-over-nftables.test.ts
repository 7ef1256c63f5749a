import { describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { withTestCluster } from './harness/diagnostics.ts';
import { kubeProxyNftables } from './harness/kube-proxy-rules.ts';
import { ready, tcpPort, type ServiceSpec } from './harness/manifests.ts';
import { kproxyArgs } from './harness/kproxy.ts';
import { nsRun } from './harness/netns.ts';
import { PODS } from './harness/plan.ts';
import type { TestCluster } from './harness/topology.ts';

/**
 * A node where kube-proxy ran in nftables mode, taken over by kproxy in
 * iptables mode: as kube-proxy's start-up cleanup does for the iptables-based
 * modes, kproxy deletes kube-proxy's nftables tables (both families), but only
 * once its own rules are in, so traffic is served throughout. The IPVS mode
 * runs the same cleanup (unit tier: server/proxy/first-sync-housekeeping.test.ts).
 * The userspace mode does it too, and removes IPVS mode's leftovers (its
 * ipsets here: this kernel has no IPVS and no dummy links) and the other
 * modes' iptables chains, naming each.
 */
const { a0, a1, a2 } = PODS;
const web: ServiceSpec = { name: 'web', clusterIP: '10.96.0.10', ports: tcpPort(80) };
const webTarget = { host: web.clusterIP, port: 80 };

describe.skipIf(!tiers().kernel.ok)("iptables mode taking over from kube-proxy's nftables mode (real packets)", () => {
  it("removes kube-proxy's ip and ip6 tables after its first sync and says so, leaves other tables, and its own rules serve throughout", () =>
    withTestCluster(async (c) => {
      // kube-proxy's nftables mode serving web (a0, a1), with its IPv6 table beside it, and a table of someone else's.
      c.manifests.writeService(web, ready(a0, a1));
      const kubeProxy = await kubeProxyNftables(c);
      await nsRun(c.ns.nodeA, ['nft', '-f', '-'], { stdin: kubeProxy + 'add table ip6 kube-proxy\nadd chain ip6 kube-proxy services\nadd table inet firewall\n' });
      const client = c.client();
      expect((await client.tcp(webTarget, 20)).backends).toEqual(['a0', 'a1']);
      const { conn, hello } = await client.open(webTarget);

      // kube-proxy gone, an endpoint added meanwhile; kproxy starts in iptables mode.
      c.manifests.writeService(web, ready(a0, a1, a2));
      const traffic = client.tcpFor(webTarget, 4000);
      await c.startKproxy('nft');
      const during = await traffic;
      console.info(`[measured] nftables (kube-proxy) -> iptables (kproxy): ${during.attempts.length} new connections, outcomes ${JSON.stringify(during.outcomes)}`);
      expect(during.outcomes).toEqual({ ok: during.attempts.length });

      // The housekeeping runs right after the first sync: the tables are gone, each named in the log.
      const tables = (await nsRun(c.ns.nodeA, ['nft', 'list', 'tables'])).trim().split('\n').sort();
      expect(tables).not.toContain('table ip kube-proxy');
      expect(tables).not.toContain('table ip6 kube-proxy');
      expect(tables).toContain('table inet firewall');
      const log = c.kproxy.log.tail(300);
      expect(log).toMatch(/removed nftables table table="ip kube-proxy"/);
      expect(log).toMatch(/removed nftables table table="ip6 kube-proxy"/);
      expect(log).toMatch(/other modes' leftovers checked/);

      // What serves now is kproxy's iptables rules: web's service chain with its three endpoints.
      const nat = await nsRun(c.ns.nodeA, ['iptables-nft-save', '-t', 'nat']);
      const svcJump = /^-A KUBE-SERVICES .*"kpt\/web:tcp cluster IP".* -j (KUBE-SVC-\w+)$/m.exec(nat);
      expect(svcJump).not.toBeNull();
      expect(nat.split('\n').filter((l) => l.startsWith(`-A ${svcJump![1]} `) && l.includes('-j KUBE-SEP-'))).toHaveLength(3);
      expect((await client.tcp(webTarget, 40)).backends).toEqual(['a0', 'a1', 'a2']);
      // The connection kube-proxy's table set up lives on in conntrack.
      expect(await client.send(conn, 'after the take-over')).toMatchObject({ outcome: 'ok', name: hello.name, echo: 'after the take-over' });
    }));
});

describe.skipIf(!tiers().kernel.ok)('userspace mode taking over from the other modes (real packets)', () => {
  it("removes kube-proxy's nftables tables, IPVS mode's ipsets and the iptables mode's chains after its first sync, naming each, and leaves what is not theirs", () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0, a1));
      // The iptables mode's chains (kproxy --once), then kube-proxy's nftables tables, IPVS mode's set and someone else's.
      expect((await c.kproxy.command(['--once', ...kproxyArgs(c.kproxyOptions('nft'))])).code).toBe(0);
      await nsRun(c.ns.nodeA, ['nft', '-f', '-'], { stdin: (await kubeProxyNftables(c)) + 'add table ip6 kube-proxy\nadd table inet firewall\n' });
      await nsRun(c.ns.nodeA, ['ipset', 'restore'], {
        stdin: 'create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\ncreate cali40all-hosts hash:ip family inet hashsize 1024 maxelem 65536\n',
      });

      await c.startKproxy('nft', ['--proxy-mode', 'userspace']);
      await waitForLog(c, /other modes' leftovers checked/);

      const tables = (await nsRun(c.ns.nodeA, ['nft', 'list', 'tables'])).trim().split('\n').sort();
      expect(tables).not.toContain('table ip kube-proxy');
      expect(tables).not.toContain('table ip6 kube-proxy');
      expect(tables).toContain('table inet firewall');
      expect((await nsRun(c.ns.nodeA, ['ipset', 'list', '-n'])).trim().split('\n')).toEqual(['cali40all-hosts']);
      const nat = await nsRun(c.ns.nodeA, ['iptables-nft-save', '-t', 'nat']);
      expect(nat).not.toMatch(/KUBE-SERVICES|KUBE-SVC-|KUBE-SEP-/);
      expect(nat).toContain(':KUBE-PORTALS-CONTAINER');

      const log = c.kproxy.log.tail(300);
      expect(log).toMatch(/removing other modes' chains count=\d+ chains=".*nat\/KUBE-SERVICES.*nat\/KUBE-SVC-\w+/);
      expect(log).toMatch(/removed nftables table table="ip kube-proxy"/);
      expect(log).toMatch(/removed nftables table table="ip6 kube-proxy"/);
      expect(log).toMatch(/removed ipsets count=1/);
      expect(log).toMatch(/removed what the nftables and IPVS modes left on this node summary=/);
      // The relay serves web now.
      expect((await c.client().tcp(webTarget, 20)).backends).toEqual(['a0', 'a1']);
    }));
});

/**
 * waitForLog waits until the log of this cluster's running daemon matches (a line the daemon writes right after
 * its first sync). Only the current run's lines count: an earlier `kproxy --once` writes the same lines.
 */
async function waitForLog(c: TestCluster, line: RegExp): Promise<void> {
  const current = () => {
    const t = c.kproxy.log.tail(300);
    return t.slice(Math.max(0, t.lastIndexOf('----- daemon run ')));
  };
  for (let i = 0; i < 200 && !line.test(current()); i++) await new Promise((r) => setTimeout(r, 50));
  expect(current()).toMatch(line);
}

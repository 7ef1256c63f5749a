import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { waitFor } from '../wait.ts';
import { withTestCluster } from './harness/diagnostics.ts';
import { SERVICE_ACCOUNT_TOKEN } from '../../server/config/source-selection.ts';
import { daemonSetStart } from './harness/daemonset.ts';
import { CLI, HEALTHZ_PORT, kproxyArgs, METRICS_ADDRESS } from './harness/kproxy.ts';
import { nodeObject, ready, tcpPort, type ServiceSpec } from './harness/manifests.ts';
import { nsExec, nsRun } from './harness/netns.ts';
import { NODE_A, NODE_B, PODS } from './harness/plan.ts';
import type { TestCluster } from './harness/topology.ts';

/**
 * A node restarting kproxy with manifests it cannot read keeps the rules of
 * its last good run (real packets through them), whether kproxy runs as a
 * daemon or once, in iptables and in nftables mode; the daemon programs the
 * fixed files as soon as they parse, keeps them through a later bad edit, and
 * removes them when the file says it holds nothing. `--once` whose source
 * never syncs changes nothing at all in the node's namespace (every iptables
 * flavour and family, the nftables ruleset, the nfacct objects, the links).
 * A start with a bad config file, or with no usable source (the DaemonSet's
 * arguments in a pod without its token), exits 1 and leaves the rules as
 * they were.
 */
const { a0, a1, a2 } = PODS;
const web: ServiceSpec = { name: 'web', clusterIP: '10.96.0.10', ports: tcpPort(80) };
const webTarget = { host: web.clusterIP, port: 80 };
const NFT = ['--proxy-mode', 'nftables'];

/** kubeRules: the KUBE- lines of node-a's nat and filter tables, without counters. */
async function kubeRules(c: TestCluster): Promise<string[]> {
  const save = await nsRun(c.ns.nodeA, ['iptables-nft-save']);
  return save.split('\n').filter((l) => l.includes('KUBE-') && !l.startsWith('#'));
}

/**
 * hostState is everything a kproxy run can change in node-a's namespace, as
 * text to compare: the iptables rules of both families in both flavours, the
 * whole nftables ruleset, the nfacct objects, the links and the one sysctl a
 * mode's start writes there (route_localnet). Packet and byte counters, which
 * the test's own traffic moves, are zeroed; iptables-save's dated comments dropped.
 */
async function hostState(c: TestCluster): Promise<Record<string, string>> {
  const read = async (argv: string[]) => {
    const r = await nsExec(c.ns.nodeA, argv);
    return r.code === 0 ? r.stdout : `${argv[0]} exited ${r.code}: ${r.stderr.trim()}`;
  };
  const zeroed = (text: string) =>
    text
      .replace(/\[\d+:\d+\]/g, '[0:0]')
      .replace(/packets \d+ bytes \d+/g, 'packets 0 bytes 0')
      .replace(/pkts = \d+, bytes = \d+/g, 'pkts = 0, bytes = 0')
      .split('\n')
      .filter((l) => !/^# (Generated|Completed) /.test(l))
      .join('\n');
  const state: Record<string, string> = {};
  for (const save of ['iptables-nft-save', 'ip6tables-nft-save', 'iptables-legacy-save', 'ip6tables-legacy-save']) state[save] = zeroed(await read([save]));
  state['nft list ruleset'] = zeroed(await read(['nft', 'list', 'ruleset']));
  state['nfacct list'] = zeroed(await read(['nfacct', 'list']));
  state['ip -o link show'] = await read(['ip', '-o', 'link', 'show']);
  state['net.ipv4.conf.all.route_localnet'] = await read(['sysctl', '-n', 'net.ipv4.conf.all.route_localnet']);
  return state;
}

/**
 * BAD_CONTENTS: what a restart can find in a manifest file: text that does
 * not parse, a file clobbered with a word (valid YAML, no object), and a file
 * cut off while written (its Service has no name yet). Each is a parse error
 * of the file, with where and why.
 */
const BAD_CONTENTS = [
  { text: '{ broken\n', says: /svc-web\.json:2:1: invalid YAML: / },
  { text: 'oops\n', says: /svc-web\.json:1: document 1: not a Kubernetes object \(a string: "oops"\)/ },
  { text: '[{"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": "kpt"}}]\n', says: /svc-web\.json:1: document 1\[0\]: Service without metadata\.name/ },
];

/** breakManifests overwrites every manifest file with text that holds no object. */
function breakManifests(c: TestCluster, text = '{ broken\n'): string[] {
  const files = readdirSync(c.manifests.path).filter((f) => f.endsWith('.json'));
  for (const f of files) writeFileSync(join(c.manifests.path, f), text);
  return files;
}

const PARSE_ERRORS = 'kproxy_source_events_total\\{event="parse_errors",resource="",source="file"\\}';

async function metric(c: TestCluster, name: string): Promise<number | null> {
  const { status, body } = await c.kproxy.curl(`http://${METRICS_ADDRESS}/metrics`);
  if (status !== 200) return null;
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(body);
  return m ? Number(m[1]) : null;
}

describe.skipIf(!tiers().kernel.ok)('a start with unreadable manifests (iptables, real packets)', () => {
  it('--once on a fresh node whose source never syncs changes nothing in its namespace, in iptables and nftables mode', () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0, a1));
      const fresh = await hostState(c);
      breakManifests(c);
      for (const mode of [[], NFT]) {
        const r = await c.kproxy.command(['--once', ...kproxyArgs(c.kproxyOptions('nft', mode))]);
        expect(r.code, r.stderr).toBe(1);
        expect(r.stdout).toMatch(/^kproxy: nothing synced, the kernel was not touched: .*svc-web\.json:2:1: invalid YAML: /m);
        expect(await hostState(c)).toEqual(fresh);
      }
      // What the comparison sees: a run that syncs creates the nfacct objects and the rules.
      c.manifests.writeService(web, ready(a0, a1));
      c.manifests.write('nodes', [nodeObject(NODE_A.name, NODE_A.ip, NODE_A.podCIDR), nodeObject(NODE_B.name, NODE_B.ip, NODE_B.podCIDR)]);
      expect((await c.kproxy.command(['--once', ...kproxyArgs(c.kproxyOptions('nft'))])).code).toBe(0);
      const synced = await hostState(c);
      expect(synced['nfacct list']).toContain('ct_state_invalid_dropped_pkts');
      expect(synced['iptables-nft-save']).toContain('-A KUBE-SERVICES');
    }));

  it('--once exits 1 naming the file and the error (unparseable, clobbered, half written), and leaves the whole host as the last good run left it', () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0, a1));
      const good = await c.kproxy.command(['--once', ...kproxyArgs(c.kproxyOptions('nft'))]);
      expect(good.code, good.stderr).toBe(0);
      const rules = await kubeRules(c);
      expect(rules.filter((l) => /^-A KUBE-SERVICES .*kpt\/web:tcp cluster IP.* -j KUBE-SVC-/.test(l))).toHaveLength(1);
      expect((await c.client().tcp(webTarget, 20)).backends).toEqual(['a0', 'a1']);
      const before = await hostState(c);

      for (const { text, says } of BAD_CONTENTS) {
        breakManifests(c, text);
        const bad = await c.kproxy.command(['--once', ...kproxyArgs(c.kproxyOptions('nft'))]);
        expect(bad.code).toBe(1);
        expect(bad.stdout).toMatch(/^kproxy: nothing synced, the kernel was not touched: manifests from .* could not be read completely: /m);
        expect(bad.stdout).toMatch(says);
        expect(bad.stdout).not.toMatch(/synced iptables/);
        expect(await hostState(c)).toEqual(before);
        expect((await c.client().tcp(webTarget, 20)).backends).toEqual(['a0', 'a1']);
      }
    }));

  it('the daemon keeps the rules while the manifests cannot be read, counts the error, programs the fixed files, keeps them through a later bad edit and removes them on "# nothing"', () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0, a1));
      await c.startKproxy('nft');
      expect(await c.kproxy.stop()).toBe(0);
      const before = await hostState(c);

      breakManifests(c);
      c.kproxy.launch(c.kproxyOptions('nft'));
      // Started, read the files, counted the failure: and synced nothing.
      await waitFor(async () => (await metric(c, PARSE_ERRORS)) === 2, {
        what: 'the two parse errors to be counted',
        // The daemon's start (Node, imports, the first read) on a loaded 2-core machine: as long as a first sync may take.
        timeoutMs: 60_000,
      });
      expect(await metric(c, 'kproxy_source_synced')).toBe(0);
      expect(await c.kproxy.lastSyncTimestamp()).toBe(0);
      expect(c.kproxy.log.tail(40)).toMatch(/svc-web\.json:2:1: invalid YAML: .*nothing is synced until it can be read/);
      const notReady = await c.kproxy.curl(`http://127.0.0.1:${HEALTHZ_PORT}/readyz`);
      expect(notReady.status).toBe(503);
      // The file and line are in the log (above); the open health port says why in fixed words only.
      expect(JSON.parse(notReady.body).reason).toBe('nothing synced yet: the source has not listed everything (see the log)');
      expect(notReady.body).not.toMatch(/svc-web|manifests/);
      expect(await hostState(c)).toEqual(before);
      expect((await c.client().tcp(webTarget, 20)).backends).toEqual(['a0', 'a1']);

      // Fixed (with one more endpoint): the daemon syncs on its own and programs it.
      c.manifests.writeService(web, ready(a0, a1, a2));
      c.manifests.write('nodes', [nodeObject(NODE_A.name, NODE_A.ip, NODE_A.podCIDR), nodeObject(NODE_B.name, NODE_B.ip, NODE_B.podCIDR)]);
      await c.kproxy.waitForFirstSync();
      await waitFor(async () => (await c.client().tcp(webTarget, 30)).backends.length === 3, { what: 'the third endpoint to be programmed' });
      expect((await c.client().tcp(webTarget, 30)).backends).toEqual(['a0', 'a1', 'a2']);
      expect((await c.kproxy.curl(`http://127.0.0.1:${HEALTHZ_PORT}/readyz`)).status).toBe(200);

      // A later bad edit keeps the last good state (counted); an edit that says the file holds nothing removes it.
      const file = join(c.manifests.path, 'svc-web.json');
      writeFileSync(file, '{ broken\n');
      await waitFor(async () => (await metric(c, PARSE_ERRORS)) === 3, { what: 'the bad edit to be counted', timeoutMs: 15_000 });
      expect((await c.client().tcp(webTarget, 30)).backends).toEqual(['a0', 'a1', 'a2']);
      expect((await c.kproxy.curl(`http://127.0.0.1:${HEALTHZ_PORT}/readyz`)).status).toBe(200);
      // A file clobbered with a word is valid YAML without an object: an error too, never an empty file.
      writeFileSync(file, 'oops\n');
      await waitFor(async () => (await metric(c, PARSE_ERRORS)) === 4, { what: 'the clobbered file to be counted', timeoutMs: 15_000 });
      expect(c.kproxy.log.tail(20)).toMatch(/svc-web\.json:1: document 1: not a Kubernetes object \(a string: "oops"\).*keeping the last good state of svc-web\.json/);
      expect((await c.client().tcp(webTarget, 30)).backends).toEqual(['a0', 'a1', 'a2']);
      writeFileSync(file, '# nothing: web is gone from this node\n');
      await waitFor(async () => !(await kubeRules(c)).some((l) => l.includes('kpt/web')), { what: "web's rules to be removed", timeoutMs: 15_000 });
      expect(await metric(c, PARSE_ERRORS)).toBe(4);
      expect((await c.kproxy.curl(`http://127.0.0.1:${HEALTHZ_PORT}/readyz`)).status).toBe(200);
    }));
});

describe.skipIf(!tiers().kernel.ok)('a start with unreadable manifests (nftables mode, real packets)', () => {
  it('the rules of a good run survive a restart of the daemon and a --once with unreadable manifests: the nft ruleset is unchanged', () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0, a1));
      await c.startKproxy('nft', NFT);
      expect(await c.kproxy.stop()).toBe(0);
      expect(await c.nftTable()).toContain('chain service-');
      expect((await c.client().tcp(webTarget, 20)).backends).toEqual(['a0', 'a1']);
      const before = await hostState(c);

      breakManifests(c);
      c.kproxy.launch(c.kproxyOptions('nft', NFT));
      await waitFor(async () => (await metric(c, PARSE_ERRORS)) === 2, { what: 'the two parse errors to be counted', timeoutMs: 60_000 });
      expect(await metric(c, 'kproxy_source_synced')).toBe(0);
      expect((await c.kproxy.curl(`http://127.0.0.1:${HEALTHZ_PORT}/readyz`)).status).toBe(503);
      expect(await hostState(c)).toEqual(before);
      expect((await c.client().tcp(webTarget, 20)).backends).toEqual(['a0', 'a1']);
      expect(await c.kproxy.stop()).toBe(0);

      for (const { text, says } of BAD_CONTENTS) {
        breakManifests(c, text);
        const bad = await c.kproxy.command(['--once', ...kproxyArgs(c.kproxyOptions('nft', NFT))]);
        expect(bad.code).toBe(1);
        expect(bad.stdout).toMatch(says);
        expect(await hostState(c)).toEqual(before);
        expect((await c.client().tcp(webTarget, 20)).backends).toEqual(['a0', 'a1']);
      }
    }));
});

describe.skipIf(!tiers().kernel.ok)('a start with a bad config file (iptables, real packets)', () => {
  it('the daemon exits 1 naming the field and the value, before touching anything: the manifests changed since the last run, and the rules did not', () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0, a1));
      expect((await c.kproxy.command(['--once', ...kproxyArgs(c.kproxyOptions('nft'))])).code).toBe(0);
      const before = await kubeRules(c);
      // A run that synced would program the third endpoint.
      c.manifests.writeService(web, ready(a0, a1, a2));
      const dir = mkdtempSync(join(tmpdir(), `kpt-${process.pid}-config-`));
      try {
        const head = 'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\niptables:\n';
        const cases = [
          { text: head + '  syncPeriodd: 30s\n', says: /invalid --config .*config\.yaml: unknown field "iptables\.syncPeriodd" \(line 5\)/ },
          { text: head + '  masqueradeBit: 40\n', says: /iptables\.masqueradeBit: Invalid value: 40: must be within the range \[0, 31\]/ },
        ];
        for (const { text, says } of cases) {
          const config = join(dir, 'config.yaml');
          writeFileSync(config, text);
          const r = await c.kproxy.command([...kproxyArgs(c.kproxyOptions('nft')), '--config', config]);
          expect(r.code).toBe(1);
          expect(r.stderr).toMatch(says);
          expect(r.stdout).toBe('');
          expect(await kubeRules(c)).toEqual(before);
          expect((await c.client().tcp(webTarget, 20)).backends).toEqual(['a0', 'a1']);
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }));
});

describe.skipIf(!tiers().kernel.ok)('a start the host refuses (real node namespace)', () => {
  it('the daemon exits 1 naming what the host refused when a backend cannot prepare it (a read-only /proc/sys: route_localnet), and programs no rule', () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0, a1));
      // /proc/sys read-only in a mount namespace of the daemon's own, as in a container without privileges.
      const cli = [process.execPath, CLI, ...kproxyArgs(c.kproxyOptions('nft'))].map((a) => `'${a}'`).join(' ');
      const r = await nsExec(c.ns.nodeA, ['unshare', '--mount', 'sh', '-c', `mount -o bind,ro /proc/sys /proc/sys && exec ${cli}`], { timeoutMs: 60_000 });
      c.kproxy.log.push(`----- kproxy with /proc/sys read-only\n${r.stderr}${r.stdout}----- exited ${r.code}\n`);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/cannot start: cannot set sysctl net\/ipv4\/conf\/all\/route_localnet to 1 \[KPROXY_ERR_SYSCTL\]: EROFS/);
      expect(r.stderr).not.toMatch(/unexpected failure/);
      expect(await kubeRules(c)).toEqual([]);
    }));
});

describe.skipIf(!tiers().kernel.ok)('a start with no usable source (real node namespace)', () => {
  it.skipIf(existsSync(SERVICE_ACCOUNT_TOKEN))('a pod without its service account token exits 1 saying what it looked for, and leaves the rules as they were', () =>
    withTestCluster(async (c) => {
      c.manifests.writeService(web, ready(a0, a1));
      expect((await c.kproxy.command(['--once', ...kproxyArgs(c.kproxyOptions('nft'))])).code).toBe(0);
      const before = await kubeRules(c);
      const dir = mkdtempSync(join(tmpdir(), `kpt-${process.pid}-daemonset-`));
      try {
        const { args, env } = daemonSetStart(dir);
        expect(env.KUBERNETES_SERVICE_HOST).toBeTruthy();
        // nf_conntrack_max is global to the machine: the node's own setting must not be written from a test.
        const r = await nsExec(c.ns.nodeA, [process.execPath, CLI, ...args, '--iptables-flavor', 'nft', '--conntrack-max-per-core', '0'], {
          env: { ...process.env, ...env },
          timeoutMs: 20_000,
        });
        c.kproxy.log.push(`----- kproxy as the DaemonSet starts it, without a token\n${r.stderr}${r.stdout}----- exited ${r.code}\n`);
        expect(r.code).toBe(1);
        expect(r.stderr).toContain(
          `kproxy: nothing to read Services from: no --source, no --kubeconfig or clientConnection.kubeconfig, and no usable in-cluster config (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are set but the service account token ${SERVICE_ACCOUNT_TOKEN} is missing`,
        );
        expect(await kubeRules(c)).toEqual(before);
        expect((await c.client().tcp(webTarget, 20)).backends).toEqual(['a0', 'a1']);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }),
  );
});

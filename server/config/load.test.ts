import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ConfigFileError, ConfigInvalidError, FlagInvalidError, NoSourceError, SourceInvalidError } from '../errors.ts';
import { loadConfiguration, type ConfigEnv } from './load.ts';
import { packageRoot } from './package-root.ts';
import { SERVICE_ACCOUNT_TOKEN } from './source-selection.ts';

const ROOT = '/opt/kproxy';
const EXAMPLES = `${ROOT}/deploy/examples/`;
const header = 'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n';

interface FakeMachine {
  files?: Record<string, string>;
  /** paths that exist besides the files (folders, tokens) */
  paths?: string[];
  env?: Record<string, string>;
  hostname?: string;
}

function machine(m: FakeMachine = {}): ConfigEnv & { reads: string[] } {
  const files = m.files ?? {};
  const paths = new Set([EXAMPLES, ...(m.paths ?? [])]);
  const reads: string[] = [];
  return {
    reads,
    hostname: () => m.hostname ?? 'worker-1',
    env: m.env ?? {},
    packageRoot: ROOT,
    exists: async (p) => Object.hasOwn(files, p) || paths.has(p),
    readFile: async (p) => {
      reads.push(p);
      if (!Object.hasOwn(files, p)) throw Object.assign(new Error(`ENOENT: no such file or directory, open '${p}'`), { code: 'ENOENT' });
      return files[p]!;
    },
  };
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected loadConfiguration to throw');
}

describe('loadConfiguration: file, defaults, flags', () => {
  it('runs on the defaults with no flags and no file (in a pod, with its service account)', async () => {
    const r = await loadConfiguration([], machine({ env: { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' }, paths: [SERVICE_ACCOUNT_TOKEN] }));
    expect(r.config.mode).toBe('iptables');
    expect(r.config.iptables.syncPeriodMs).toBe(30_000);
    expect(r.config.healthzBindAddress).toBe('0.0.0.0:10256');
    expect(r.run).toMatchObject({ configFile: null, once: false, dryRun: false, iptablesFlavor: 'auto' });
  });

  it('applies flags over the file, and keeps file values no flag touches', async () => {
    const env = machine({
      files: {
        '/etc/kproxy.yaml': `${header}mode: ipvs
clusterCIDR: 10.244.0.0/16
iptables: {masqueradeBit: 10, syncPeriod: 1m}
conntrack: {min: 65536}
featureGates: {A: true}
`,
      },
    });
    const r = await loadConfiguration(['--config', '/etc/kproxy.yaml', '--proxy-mode=nftables', '--iptables-masquerade-bit=12', '--feature-gates=B=true', '--once', '--dry-run'], env);
    expect(r.config.mode).toBe('nftables');
    expect(r.config.iptables.masqueradeBit).toBe(12);
    expect(r.config.iptables.syncPeriodMs).toBe(60_000);
    expect(r.config.conntrack.min).toBe(65_536);
    expect(r.config.clusterCIDRs).toEqual(['10.244.0.0/16']);
    expect(r.config.featureGates).toEqual({ A: true, B: true });
    expect(r.run).toMatchObject({ configFile: '/etc/kproxy.yaml', once: true });
    expect(r.warnings).toContain('featureGates.A=true: kproxy implements no feature gates; it has no effect');
  });

  it("reads the userspace mode: kube-proxy 1.25's portRange and udpIdleTimeout from the file, kproxy's limits from flags", async () => {
    const env = machine({ files: { '/etc/kproxy.yaml': `${header}mode: userspace\nportRange: 40000-40999\nudpIdleTimeout: 2s\n` } });
    const r = await loadConfiguration(
      ['--config', '/etc/kproxy.yaml', '--dry-run', '--userspace-max-connections=100', '--userspace-max-connections-per-service=10', '--userspace-max-udp-sessions=7', '--userspace-drain-timeout=90s'],
      env,
    );
    expect(r.config.mode).toBe('userspace');
    expect(r.config.userspace).toEqual({
      udpIdleTimeoutMs: 2000,
      portRange: { base: 40000, size: 1000 },
      maxConnections: 100,
      maxConnectionsPerService: 10,
      maxUDPSessions: 7,
      drainTimeoutMs: 90_000,
    });
    const flags = await loadConfiguration(['--dry-run', '--proxy-mode=userspace', '--proxy-port-range=50000+9', '--udp-timeout=1s'], machine());
    expect(flags.config.userspace).toMatchObject({
      udpIdleTimeoutMs: 1000,
      portRange: { base: 50000, size: 10 },
      maxConnections: 16_384,
      maxConnectionsPerService: 4096,
      maxUDPSessions: 4096,
      drainTimeoutMs: 0,
    });
    const dflt = await loadConfiguration(['--dry-run', '--proxy-mode=userspace'], machine());
    expect(dflt.config.userspace).toMatchObject({ udpIdleTimeoutMs: 250, portRange: null });
    expect(dflt.warnings.filter((w) => /portRange|udpIdleTimeout/.test(w))).toEqual([]);
    // The other modes say they ignore them.
    const other = await loadConfiguration(['--dry-run', '--proxy-port-range=50000-50010'], machine());
    expect(other.warnings).toContain('portRange: only the userspace mode uses it; ignored in iptables mode');
  });

  it('rejects unknown and duplicate fields in the file, naming them', async () => {
    const env = machine({ files: { '/c.yaml': `${header}iptables:\n  masqueradeBits: 14\nmode: ipvs\nmode: iptables\n` } });
    const err = await rejection(loadConfiguration(['--config=/c.yaml'], env));
    expect(err).toBeInstanceOf(ConfigFileError);
    expect(err.message).toBe('invalid --config /c.yaml: 2 problems:\n  unknown field "iptables.masqueradeBits" (line 4)\n  duplicate field "mode" (line 6)');
  });

  it('says which file cannot be read', async () => {
    const err = await rejection(loadConfiguration(['--config=/missing.yaml'], machine()));
    expect(err).toBeInstanceOf(ConfigFileError);
    expect(err.message).toBe("reading --config /missing.yaml: ENOENT: no such file or directory, open '/missing.yaml'");
    expect((err as Error & { cause: unknown }).cause).toBeInstanceOf(Error);
  });

  it('rejects an invalid value in the file with ConfigInvalidError naming field and value', async () => {
    const env = machine({ files: { '/c.yaml': `${header}iptables: {masqueradeBit: 40}\n` } });
    const err = await rejection(loadConfiguration(['--config=/c.yaml'], env));
    expect(err).toBeInstanceOf(ConfigInvalidError);
    expect(err.message).toBe('invalid configuration (--config /c.yaml with flags): iptables.masqueradeBit: Invalid value: 40: must be within the range [0, 31]');
  });

  it('blames the flag when a flag set the bad value', async () => {
    const err = await rejection(loadConfiguration(['--iptables-masquerade-bit=40'], machine()));
    expect(err).toBeInstanceOf(FlagInvalidError);
    expect(err.message).toBe('invalid configuration (flags): iptables.masqueradeBit: Invalid value: 40: must be within the range [0, 31] (set by --iptables-masquerade-bit)');
  });

  it('lists every problem, from file and flags, one per line', async () => {
    const env = machine({ files: { '/c.yaml': `${header}oomScoreAdj: 5000\nnodePortAddresses: [bogus]\n` } });
    const err = await rejection(loadConfiguration(['--config=/c.yaml', '--iptables-min-sync-period=1m'], env));
    expect(err).toBeInstanceOf(ConfigInvalidError);
    expect(err.message.split('\n')).toEqual([
      'invalid configuration (--config /c.yaml with flags): 3 problems:',
      '  iptables.syncPeriod: Invalid value: "30s": must be greater than or equal to iptables.minSyncPeriod (set by --iptables-min-sync-period)',
      '  oomScoreAdj: Invalid value: 5000: must be within the range [-1000, 1000]',
      '  nodePortAddresses[0]: Invalid value: "bogus": must be a valid CIDR',
    ]);
  });

  it('reads no file for --help or --version', async () => {
    const env = machine();
    const r = await loadConfiguration(['--help', '--config=/nowhere.yaml'], env);
    expect(r.run.help).toBe(true);
    expect(env.reads).toEqual([]);
    expect((await loadConfiguration(['--version'], env)).run.version).toBe(true);
  });

  it('checks that --dashboard-token-file exists', async () => {
    const err = await rejection(loadConfiguration(['--dry-run', '--dashboard-token-file=/etc/kproxy/token'], machine()));
    expect(err).toBeInstanceOf(FlagInvalidError);
    expect(err.message).toBe('invalid dashboard flags: --dashboard-token-file /etc/kproxy/token: file does not exist');
    const ok = await loadConfiguration(['--dry-run', '--dashboard-token-file=/t'], machine({ paths: ['/t'] }));
    expect(ok.run.dashboardTokenFile).toBe('/t');
  });

  it('takes the dashboard listener, TLS files and token audience, and lists every problem with them', async () => {
    const ok = await loadConfiguration(
      ['--dry-run', '--dashboard-bind-address=0.0.0.0:10263', '--dashboard-tls-cert-file=/c.pem', '--dashboard-tls-private-key-file=/k.pem', '--dashboard-token-audience=kproxy.example'],
      machine({ paths: ['/c.pem', '/k.pem'] }),
    );
    expect(ok.run).toMatchObject({ dashboardBindAddress: '0.0.0.0:10263', dashboardTlsCertFile: '/c.pem', dashboardTlsKeyFile: '/k.pem', dashboardTokenAudience: 'kproxy.example' });
    expect((await loadConfiguration(['--dry-run'], machine())).run).toMatchObject({ dashboardBindAddress: null, dashboardTlsCertFile: null, dashboardTokenAudience: 'kproxy-dashboard' });

    const err = await rejection(loadConfiguration(['--dry-run', '--dashboard-bind-address=10263', '--dashboard-tls-cert-file=/c.pem', '--dashboard-token-audience='], machine()));
    expect(err).toBeInstanceOf(FlagInvalidError);
    expect(err.message.split('\n')).toEqual([
      'invalid dashboard flags: 4 problems:',
      '  --dashboard-tls-cert-file /c.pem: file does not exist',
      '  --dashboard-tls-cert-file and --dashboard-tls-private-key-file go together: give both or neither',
      '  --dashboard-bind-address "10263" is not HOST:PORT',
      '  --dashboard-token-audience is empty',
    ]);
  });
});

describe('loadConfiguration: source selection', () => {
  const inCluster = { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' };

  it('uses an explicit --source, over a kubeconfig, and says so', async () => {
    const r = await loadConfiguration(['--source=file:/srv/cluster.yaml', '--kubeconfig=/k'], machine({ paths: ['/srv/cluster.yaml', '/k'] }));
    expect(r.run).toMatchObject({ source: 'file:/srv/cluster.yaml', sourceIsDefault: false, kubeconfig: null });
    expect(r.warnings).toContain('--source file:/srv/cluster.yaml is used; the kubeconfig /k is ignored');
  });

  it('rejects a --source that is not file: or has no path', async () => {
    const notFile = await rejection(loadConfiguration(['--source=https://10.0.0.1'], machine()));
    expect(notFile).toBeInstanceOf(SourceInvalidError);
    expect(notFile.message).toBe('--source "https://10.0.0.1": must be file:PATH (a manifest file or folder)');
    expect(await rejection(loadConfiguration(['--source=file:'], machine()))).toBeInstanceOf(SourceInvalidError);
  });

  it('takes a --source path that does not exist yet: the file source waits for it (as for a file that does not parse)', async () => {
    const r = await loadConfiguration(['--source=file:/srv/none'], machine());
    expect(r.run).toMatchObject({ source: 'file:/srv/none', sourceIsDefault: false });
  });

  it('uses the Kubernetes API with --kubeconfig or clientConnection.kubeconfig', async () => {
    const flag = await loadConfiguration(['--kubeconfig=/etc/kubeconfig'], machine({ paths: ['/etc/kubeconfig'] }));
    expect(flag.run).toMatchObject({ source: null, sourceIsDefault: false, kubeconfig: '/etc/kubeconfig' });
    const env = machine({ files: { '/c.yaml': `${header}clientConnection: {kubeconfig: /var/lib/kube-proxy/kubeconfig.conf}\n` }, paths: ['/var/lib/kube-proxy/kubeconfig.conf'] });
    const file = await loadConfiguration(['--config=/c.yaml'], env);
    expect(file.run).toMatchObject({ source: null, kubeconfig: '/var/lib/kube-proxy/kubeconfig.conf' });
    expect(file.config.clientConnection.kubeconfig).toBe('/var/lib/kube-proxy/kubeconfig.conf');
  });

  it('rejects a kubeconfig that does not exist', async () => {
    const err = await rejection(loadConfiguration(['--kubeconfig=/nope'], machine()));
    expect(err).toBeInstanceOf(SourceInvalidError);
    expect(err.message).toBe('kubeconfig /nope does not exist');
  });

  it('uses the in-cluster config when the service env and the token are present', async () => {
    const r = await loadConfiguration([], machine({ env: inCluster, paths: [SERVICE_ACCOUNT_TOKEN], hostname: 'node-7' }));
    expect(r.run).toMatchObject({ source: null, sourceIsDefault: false, kubeconfig: null });
    expect(r.nodeName).toBe('node-7');
  });

  it('uses the embedded example cluster only with --dry-run, saying what it looked for', async () => {
    for (const m of [{ env: inCluster }, { paths: [SERVICE_ACCOUNT_TOKEN] }, {}]) {
      const r = await loadConfiguration(['--dry-run'], machine(m));
      expect(r.run).toMatchObject({ source: `file:${EXAMPLES}`, sourceIsDefault: true, kubeconfig: null });
      expect(r.warnings.join('\n')).toMatch(/no usable in-cluster config .*--dry-run serves the example cluster/);
      expect(r.nodeName).toBe('node-a');
    }
  });

  it('exits 1 on a real start without a source, naming what it looked for, never serving the example cluster', async () => {
    const none = await rejection(loadConfiguration([], machine()));
    expect(none).toBeInstanceOf(NoSourceError);
    expect(none.message).toBe(
      'nothing to read Services from: no --source, no --kubeconfig or clientConnection.kubeconfig, and no usable in-cluster config ' +
        '(KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set). kproxy never programs its example cluster onto a host: ' +
        'pass --kubeconfig FILE or --source file:PATH (or --dry-run to try kproxy on the example cluster)',
    );
    expect(await rejection(loadConfiguration(['--once'], machine()))).toBeInstanceOf(NoSourceError);
  });

  it('exits 1 in a pod whose service account token is not mounted (automountServiceAccountToken: false)', async () => {
    // The DaemonSet's arguments: a config file without a kubeconfig, the node name, the API's address in the env.
    const config = machine({ env: inCluster, files: { '/var/lib/kproxy/config.conf': `${header}clientConnection: {kubeconfig: ""}\n` } });
    const err = await rejection(loadConfiguration(['--config', '/var/lib/kproxy/config.conf', '--hostname-override', 'node-7'], config));
    expect(err).toBeInstanceOf(NoSourceError);
    expect(err.message).toContain(
      `KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are set but the service account token ${SERVICE_ACCOUNT_TOKEN} is missing (automountServiceAccountToken: false?)`,
    );
  });

  it('--cleanup needs no source', async () => {
    const r = await loadConfiguration(['--cleanup'], machine());
    expect(r.run).toMatchObject({ cleanup: true, source: null, kubeconfig: null });
  });

  it('a command that reads no Services (kproxy trace on a node) needs no source, and still validates the flags', async () => {
    const r = await loadConfiguration(['--proxy-mode', 'nftables'], machine(), { readsNoServices: true });
    expect(r.run).toMatchObject({ source: null, kubeconfig: null });
    expect(r.config.mode).toBe('nftables');
    expect(await rejection(loadConfiguration(['--proxy-mode', 'carrier-pigeon'], machine(), { readsNoServices: true }))).toBeInstanceOf(FlagInvalidError);
  });

  it('rejects --dry-run without a source when the package has no examples (as in the image)', async () => {
    const env = { ...machine(), exists: async () => false };
    const err = await rejection(loadConfiguration(['--dry-run'], env));
    expect(err).toBeInstanceOf(SourceInvalidError);
    expect(err.message).toContain(`${EXAMPLES} is not installed (kproxy's image does not ship it)`);
  });

  it("finds the real package's examples from any working directory", async () => {
    const root = packageRoot();
    expect(root).toBe(fileURLToPath(new URL('../../', import.meta.url)).replace(/\/$/, ''));
    // the compiled module lives one level deeper (dist/server/config/) and must find the same root
    expect(packageRoot(new URL('../../dist/server/config/load.js', import.meta.url).href)).toBe(root);
    const r = await loadConfiguration(['--dry-run'], { env: {}, hostname: () => 'h' });
    expect(r.run.source).toBe(`file:${root}/deploy/examples/`);
  });
});

describe('loadConfiguration: node name', () => {
  const source = ['--source=file:/srv/c.yaml'];
  const paths = ['/srv/c.yaml'];

  it('prefers --hostname-override over the file, over the host name', async () => {
    const env = machine({ files: { '/c.yaml': `${header}hostnameOverride: from-file\n` }, paths, hostname: 'host' });
    expect((await loadConfiguration([...source, '--config=/c.yaml', '--hostname-override=From-Flag'], env)).nodeName).toBe('from-flag');
    expect((await loadConfiguration([...source, '--config=/c.yaml'], env)).nodeName).toBe('from-file');
    expect((await loadConfiguration(source, env)).nodeName).toBe('host');
  });

  it('trims and lowercases like kube-proxy', async () => {
    const env = machine({ files: { '/c.yaml': `${header}hostnameOverride: "  Node-B.Example.COM "\n` }, paths });
    const r = await loadConfiguration([...source, '--config=/c.yaml'], env);
    expect(r.nodeName).toBe('node-b.example.com');
    expect(r.config.hostnameOverride).toBe('node-b.example.com');
    expect((await loadConfiguration(source, machine({ paths, hostname: 'Worker-1 ' }))).nodeName).toBe('worker-1');
  });

  it("is the example cluster's node-a on the embedded default (--dry-run), with a warning", async () => {
    const r = await loadConfiguration(['--dry-run'], machine({ hostname: 'laptop' }));
    expect(r.nodeName).toBe('node-a');
    expect(r.warnings).toContain("node name node-a: the example cluster's node (pass --hostname-override to be another node)");
    expect((await loadConfiguration(['--dry-run', '--hostname-override=node-b'], machine())).nodeName).toBe('node-b');
  });

  it('must be a DNS subdomain', async () => {
    const flag = await rejection(loadConfiguration([...source, '--hostname-override=node_a'], machine({ paths })));
    expect(flag).toBeInstanceOf(FlagInvalidError);
    expect(flag.message).toMatch(/^invalid configuration \(flags\): hostnameOverride: Invalid value: "node_a": a lowercase RFC 1123 subdomain .*\(set by --hostname-override\)$/);
    const host = await rejection(loadConfiguration(source, machine({ paths, hostname: 'my_laptop' })));
    expect(host).toBeInstanceOf(ConfigInvalidError);
    expect(host.message).toContain('the host name "my_laptop" is not a valid node name');
    expect(host.message).toContain('set --hostname-override');
    const blankFile = machine({ paths, files: { '/c.yaml': `${header}hostnameOverride: "  "\n` } });
    const blank = await rejection(loadConfiguration([...source, '--config=/c.yaml'], blankFile));
    expect(blank).toBeInstanceOf(ConfigInvalidError);
    expect(blank.message).toContain('hostnameOverride: Invalid value: "  ": must not be empty');
  });

  it('only warns about a bad host name for --cleanup, which needs no node', async () => {
    const r = await loadConfiguration([...source, '--cleanup'], machine({ paths, hostname: 'my_laptop' }));
    expect(r.run.cleanup).toBe(true);
    expect(r.warnings.some((w) => w.startsWith('node name: hostnameOverride: Required value: the host name "my_laptop"'))).toBe(true);
  });
});

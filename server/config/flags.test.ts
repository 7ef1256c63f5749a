import { describe, expect, it } from 'vitest';
import { FlagInvalidError } from '../errors.ts';
import { setDefaults } from './defaults.ts';
import { applyConfigFlags, FLAG_SPECS, parseFlags, runFlags, usage } from './flags.ts';

function flagError(argv: string[]): string {
  try {
    parseFlags(argv);
  } catch (err) {
    expect(err).toBeInstanceOf(FlagInvalidError);
    return (err as Error).message;
  }
  throw new Error(`expected ${argv.join(' ')} to be rejected`);
}

describe('parseFlags', () => {
  it('accepts --flag=value and --flag value', () => {
    const f = parseFlags(['--proxy-mode=ipvs', '--iptables-masquerade-bit', '12', '--config', '/etc/kproxy.yaml']);
    expect(Object.fromEntries(f)).toEqual({ 'proxy-mode': 'ipvs', 'iptables-masquerade-bit': 12, config: '/etc/kproxy.yaml' });
  });

  it('takes the next argument as the value even when it starts with a dash', () => {
    expect(parseFlags(['--oom-score-adj', '-500']).get('oom-score-adj')).toBe(-500);
  });

  it('reads booleans as --flag, --flag=true|false, and never eats the next argument', () => {
    expect(Object.fromEntries(parseFlags(['--once', '--masquerade-all=false', '--dry-run=1', '--cleanup=F']))).toEqual({
      once: true,
      'masquerade-all': false,
      'dry-run': true,
      cleanup: false,
    });
    expect(flagError(['--once', 'false'])).toBe('unexpected argument "false": kproxy takes flags only');
    expect(flagError(['--once=maybe'])).toBe('invalid value "maybe" for --once: must be true or false');
  });

  it('parses durations the Go way', () => {
    const f = parseFlags(['--iptables-sync-period=1m30s', '--ipvs-min-sync-period', '500ms', '--config-sync-period=0s']);
    expect(Object.fromEntries(f)).toEqual({ 'iptables-sync-period': 90_000, 'ipvs-min-sync-period': 500, 'config-sync-period': 0 });
    expect(flagError(['--iptables-sync-period=30'])).toBe('invalid value "30" for --iptables-sync-period: invalid duration "30": missing unit (ns, us, ms, s, m, h); write e.g. 30s, 1m30s, 500ms');
  });

  it('reads lists, appending on repetition, and merges feature gates', () => {
    const f = parseFlags(['--nodeport-addresses=10.0.0.0/8, 192.168.0.0/16', '--nodeport-addresses', 'fd00::/8', '--feature-gates=A=true,B=false', '--feature-gates', 'B=true']);
    expect(f.get('nodeport-addresses')).toEqual(['10.0.0.0/8', '192.168.0.0/16', 'fd00::/8']);
    expect(f.get('feature-gates')).toEqual({ A: true, B: true });
    expect(parseFlags(['--ipvs-exclude-cidrs=']).get('ipvs-exclude-cidrs')).toEqual([]);
    expect(flagError(['--feature-gates=A'])).toBe('invalid value "A" for --feature-gates: "A" is not NAME=true|false');
  });

  it('lets a repeated scalar flag replace the earlier value', () => {
    expect(parseFlags(['--proxy-mode=ipvs', '--proxy-mode=nftables']).get('proxy-mode')).toBe('nftables');
  });

  it('knows -v and -h, with attached or separate values', () => {
    expect(parseFlags(['-v', '4']).get('v')).toBe(4);
    expect(parseFlags(['-v=5']).get('v')).toBe(5);
    expect(parseFlags(['-v6']).get('v')).toBe(6);
    expect(parseFlags(['--v=2']).get('v')).toBe(2);
    expect(parseFlags(['-h']).get('help')).toBe(true);
    expect(flagError(['-v=-1'])).toBe('invalid value "-1" for -v: must be within [0, 4294967295]');
  });

  it('checks enumerations and numbers at parse time', () => {
    expect(flagError(['--proxy-mode=winkernel'])).toBe('invalid value "winkernel" for --proxy-mode: must be one of iptables, ipvs, nftables, userspace');
    expect(parseFlags(['--proxy-mode=userspace']).get('proxy-mode')).toBe('userspace');
    expect(flagError(['--iptables-flavor=both'])).toBe('invalid value "both" for --iptables-flavor: must be one of auto, legacy, nft');
    expect(flagError(['--detect-local-mode', 'Pods'])).toMatch(/^invalid value "Pods" for --detect-local-mode: must be one of ClusterCIDR, NodeCIDR/);
    expect(flagError(['--conntrack-min=lots'])).toBe('invalid value "lots" for --conntrack-min: must be a whole number');
    expect(flagError(['--conntrack-min=4294967296'])).toBe('invalid value "4294967296" for --conntrack-min: must be within [-2147483648, 2147483647]');
    expect(flagError(['--kube-api-qps=fast'])).toBe('invalid value "fast" for --kube-api-qps: must be a number');
  });

  it('trims and lowercases --hostname-override, and rejects a blank one', () => {
    expect(parseFlags(['--hostname-override', ' Node-A ']).get('hostname-override')).toBe('node-a');
    expect(flagError(['--hostname-override=  '])).toBe('invalid value "  " for --hostname-override: empty hostname-override is invalid');
  });

  it('names unknown flags, with a hint for near misses and kube-proxy flags kproxy lacks', () => {
    expect(flagError(['--nope'])).toBe('unknown flag: --nope (see --help)');
    expect(flagError(['-config', 'x.yaml'])).toMatch(/^2 problems with the flags:\n {2}unknown flag: -config \(long flags take two dashes: --config\)\n/);
    expect(flagError(['--master=https://x'])).toBe('unknown flag: --master (a kube-proxy flag kproxy does not implement)');
    expect(flagError(['--config'])).toBe('flag needs an argument: --config FILE');
    expect(flagError(['--', '--once'])).toBe('unexpected argument "--once": kproxy takes flags only');
  });

  it('reports every problem at once, one per line', () => {
    const message = flagError(['--a', '--iptables-masquerade-bit=x', 'stray']);
    expect(message.split('\n')).toEqual([
      '3 problems with the flags:',
      '  unknown flag: --a (see --help)',
      '  invalid value "x" for --iptables-masquerade-bit: must be a whole number',
      '  unexpected argument "stray": kproxy takes flags only',
    ]);
  });
});

describe('applyConfigFlags and runFlags', () => {
  it("writes flags into kube-proxy's fields and records which flag set each", () => {
    const c = setDefaults({ featureGates: { A: true }, iptables: { masqueradeBit: 10 } });
    const setBy = applyConfigFlags(c, parseFlags(['--masquerade-all', '--iptables-sync-period=10s', '--cluster-cidr=10.0.0.0/8', '--feature-gates=B=false', '-v', '3', '--kubeconfig=/k']));
    expect(c.iptables).toMatchObject({ masqueradeAll: true, syncPeriod: 10_000, masqueradeBit: 10 });
    // like kube-proxy, the iptables sync flags also drive nftables mode and --masquerade-all both backends
    expect(c.nftables).toMatchObject({ masqueradeAll: true, syncPeriod: 10_000 });
    expect(c.clusterCIDR).toBe('10.0.0.0/8');
    expect(c.featureGates).toEqual({ A: true, B: false });
    expect(c.logging.verbosity).toBe(3);
    expect(c.clientConnection.kubeconfig).toBe('/k');
    expect(setBy.get('iptables.syncPeriod')).toBe('--iptables-sync-period');
    expect(setBy.get('nftables.masqueradeAll')).toBe('--masquerade-all');
    expect(setBy.has('iptables.masqueradeBit')).toBe(false);
  });

  it("returns kproxy's own options apart", () => {
    expect(runFlags(parseFlags(['--once', '--dry-run', '--source=file:x', '--iptables-flavor=nft', '--dashboard-token-file', '/t', '--config=/c']))).toEqual({
      once: true,
      dryRun: true,
      source: 'file:x',
      iptablesFlavor: 'nft',
      dashboardTokenFile: '/t',
      configFile: '/c',
    });
  });
});

describe('usage', () => {
  const text = usage();

  it('lists every flag', () => {
    for (const spec of FLAG_SPECS) expect(text).toContain(`--${spec.name}`);
    for (const name of [
      '--config',
      '--proxy-mode',
      '--source',
      '--once',
      '--cleanup',
      '--dry-run',
      '--dashboard-token-file',
      '--dashboard-tls-cert-file',
      '--iptables-flavor',
      '--version',
      '--help',
      '-v, --v',
      '-h, --help',
    ]) {
      expect(text).toContain(name);
    }
  });

  it("shows kube-proxy's defaults", () => {
    const line = (flag: string) => text.split('\n').find((l) => l.trimStart().startsWith(flag))!;
    expect(line('--iptables-sync-period')).toContain('(default 30s)');
    expect(line('--iptables-min-sync-period')).toContain('(default 1s)');
    expect(line('--iptables-masquerade-bit')).toContain('(default 14)');
    expect(line('--config-sync-period')).toContain('(default 15m0s)');
    expect(line('--healthz-bind-address')).toContain('(default 0.0.0.0:10256)');
    expect(line('--metrics-bind-address')).toContain('(default 127.0.0.1:10249)');
    expect(line('--oom-score-adj')).toContain('(default -999)');
    expect(line('--conntrack-max-per-core')).toContain('(default 32768)');
    expect(line('--proxy-mode')).toContain('(default iptables)');
    expect(text).toContain('(default 24h0m0s)');
  });

  it('groups flags under headings', () => {
    for (const heading of ['Sources and node:', 'Proxy:', 'iptables and nftables:', 'IPVS:', 'Conntrack:', 'Servers:', 'Process and logging:', 'Run modes:']) {
      expect(text).toContain(`\n${heading}\n`);
    }
  });
});

import { describe, expect, it } from 'vitest';
import { CommandNotFoundError, KernelModuleMissingError } from '../errors.ts';
import type { ExecFn, ExecResult } from './exec.ts';
import { IpvsBatch, IpvsSyntaxError, parseIpvsCommand, virtualServerKey, type IpvsVirtualServer } from './ipvs-batch.ts';
import { parseIpvsList, parseIpvsSave, parseIpvsStats, renderIpvsList, renderIpvsSave } from './ipvs-listing.ts';
import { checkIpvsSupport, createIpvsRunner, IpvsRestoreError } from './ipvs.ts';

const vs = (over: Partial<IpvsVirtualServer> = {}): IpvsVirtualServer => ({
  protocol: 'TCP',
  address: '10.96.0.1',
  port: 443,
  scheduler: 'rr',
  persistence: 0,
  schedFlags: [],
  ...over,
});

function fakeExec(reply: (file: string, args: readonly string[], stdin?: string) => ExecResult | Error) {
  const calls: { file: string; args: readonly string[]; stdin?: string }[] = [];
  const exec: ExecFn = async (file, args, opts) => {
    const stdin = opts?.stdin?.toString();
    calls.push({ file, args, stdin });
    const r = reply(file, args, stdin);
    if (r instanceof Error) throw r;
    return r;
  };
  return { exec, calls };
}

describe('ipvsadm batches', () => {
  it('writes the command lines ipvsadm -S prints: scheduler, persistence, scheduler flags, masquerade, weight', () => {
    const b = new IpvsBatch();
    b.addService(vs({ persistence: 10800 }));
    b.addService(vs({ protocol: 'UDP', address: '10.96.0.10', port: 53, scheduler: 'mh', schedFlags: ['mh-port'] }));
    b.addService(vs({ protocol: 'SCTP', address: 'fd00::1', port: 7777 }));
    b.addReal(vs(), { address: '10.244.0.5', port: 8443, weight: 1, forward: 'masq' });
    b.editReal(vs(), { address: '10.244.0.5', port: 8443, weight: 0, forward: 'masq' });
    b.deleteReal(vs(), { address: '10.244.0.5', port: 8443 });
    b.editService(vs({ scheduler: 'lc' }));
    b.deleteService(vs());
    b.setTimeouts(900, 0, 300);
    expect(b.text()).toBe(
      [
        '-A -t 10.96.0.1:443 -s rr -p 10800',
        '-A -u 10.96.0.10:53 -s mh -b mh-port',
        '-A --sctp-service [fd00::1]:7777 -s rr',
        '-a -t 10.96.0.1:443 -r 10.244.0.5:8443 -m -w 1',
        '-e -t 10.96.0.1:443 -r 10.244.0.5:8443 -m -w 0',
        '-d -t 10.96.0.1:443 -r 10.244.0.5:8443',
        '-E -t 10.96.0.1:443 -s lc',
        '-D -t 10.96.0.1:443',
        '--set 900 0 300',
        '',
      ].join('\n'),
    );
    expect(b.lines).toBe(9);
    expect(new IpvsBatch().text()).toBe('');
  });

  it('parses every line it writes back into the same command', () => {
    const b = new IpvsBatch();
    const svc = vs({ scheduler: 'mh', schedFlags: ['mh-port'], persistence: 600 });
    b.addService(svc);
    b.addReal(svc, { address: '10.244.0.5', port: 8443, weight: 1, forward: 'masq' });
    const [add, real] = b.text().trim().split('\n').map(parseIpvsCommand);
    expect(add).toEqual({ op: 'add-service', service: svc });
    expect(real).toEqual({ op: 'add-real', service: { protocol: 'TCP', address: '10.96.0.1', port: 443 }, real: { address: '10.244.0.5', port: 8443, weight: 1, forward: 'masq' } });
  });

  it("applies ipvsadm's defaults: scheduler wlc, weight 1, direct routing on the service port", () => {
    expect(parseIpvsCommand('-A -t 10.0.0.1:80')).toMatchObject({ service: { scheduler: 'wlc', persistence: 0 } });
    expect(parseIpvsCommand('-a -t 10.0.0.1:80 -r 10.1.1.1:8080')).toMatchObject({ real: { port: 80, weight: 1, forward: 'route' } });
    expect(parseIpvsCommand('-A -t 10.0.0.1:80 -s rr -p')).toMatchObject({ service: { persistence: 300 } });
    // Scheduler flags are checked against the final scheduler; weights go up to 2^31-1; the kernel judges scheduler names.
    expect(parseIpvsCommand('-A -t 10.0.0.1:80 -b mh-port -s mh')).toMatchObject({ service: { scheduler: 'mh', schedFlags: ['mh-port'] } });
    expect(parseIpvsCommand('-a -t 10.0.0.1:80 -r 10.1.1.1:80 -m -w 70000')).toMatchObject({ real: { weight: 70000 } });
    expect(parseIpvsCommand('-A -t 10.0.0.1:80 -s nosuch')).toMatchObject({ service: { scheduler: 'nosuch' } });
  });

  it('refuses what ipvsadm refuses before it reaches the kernel', () => {
    const bad = [
      '-A -t 10.0.0.1:80 -s rr -b mh-port',
      '-A -t 10.0.0.1:80 -s rr -b bogus',
      '-A -t 10.0.0.300:80 -s rr',
      '-A -t 10.0.0.1 -s rr',
      '-A -t 10.0.0.1:0 -s rr',
      '-a -t 10.0.0.1:80 -r 10.1.1.1:80 -m -w 2147483648',
      '-A -D -t 10.0.0.1:80',
      '-t 10.0.0.1:80 -A',
      '-a -t 10.0.0.1:80',
      '-X',
      '',
    ];
    for (const line of bad) expect(() => parseIpvsCommand(line), line).toThrow(IpvsSyntaxError);
  });

  it('names virtual and real servers like kube-proxy', () => {
    expect(virtualServerKey(vs())).toBe('10.96.0.1:443/TCP');
    expect(virtualServerKey(vs({ address: 'fd00::1', protocol: 'UDP' }))).toBe('[fd00::1]:443/UDP');
  });
});

const SAVE = `-A -t 10.96.0.1:443 -s rr -p 10800
-a -t 10.96.0.1:443 -r 10.0.0.10:6443 -m -w 1
-a -t 10.96.0.1:443 -r 10.0.0.11:6443 -m -w 0
-A -u 10.96.0.10:53 -s mh -b mh-port
-a -u 10.96.0.10:53 -r 10.244.0.2:53 -m -w 1
`;

// ipvsadm prints destinations with printf("  -> %-28s %-7s %-6d %-10u %-10u\n"): trailing blanks included.
const LIST = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.96.0.1:443 rr persistent 10800
  -> 10.0.0.10:6443               Masq    1      3          12${' '.repeat(8)}
  -> 10.0.0.11:6443               Masq    0      0          1${' '.repeat(9)}
UDP  10.96.0.10:53 mh (mh-port)
  -> 10.244.0.2:53                Masq    1      0          4${' '.repeat(9)}
`;

describe('ipvsadm listings', () => {
  it('reads -Sn output and prints it back identically', () => {
    const services = parseIpvsSave(SAVE);
    expect(services.map((s) => [virtualServerKey(s), s.scheduler, s.persistence, s.schedFlags, s.reals.length])).toEqual([
      ['10.96.0.1:443/TCP', 'rr', 10800, [], 2],
      ['10.96.0.10:53/UDP', 'mh', 0, ['mh-port'], 1],
    ]);
    expect(services[0].reals[1]).toEqual({ address: '10.0.0.11', port: 6443, weight: 0, forward: 'masq' });
    expect(renderIpvsSave(services)).toBe(SAVE);
  });

  it('reads -Ln --exact with connection counts, and prints the same layout', () => {
    const services = parseIpvsList(LIST);
    expect(services[0]).toMatchObject({ scheduler: 'rr', persistence: 10800, schedFlags: [] });
    expect(services[0].reals.map((r) => [r.address, r.weight, r.activeConns, r.inactiveConns])).toEqual([
      ['10.0.0.10', 1, 3, 12],
      ['10.0.0.11', 0, 0, 1],
    ]);
    expect(services[1].schedFlags).toEqual(['mh-port']);
    expect(renderIpvsList(services)).toBe(LIST);
  });

  it('reads --stats --exact counters wider than the columns', () => {
    const text = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes
  -> RemoteAddress:Port
TCP  10.96.0.1:443                      12      340      310    40960 12345678901
  -> 10.0.0.10:6443                     12      340      310    40960 12345678901
`;
    const stats = parseIpvsStats(text);
    const s = stats.get('10.96.0.1:443/TCP')!;
    expect(s.counters).toEqual({ conns: 12, inPackets: 340, outPackets: 310, inBytes: 40960, outBytes: 12345678901 });
    expect(s.reals.get('10.0.0.10:6443')?.outBytes).toBe(12345678901);
  });
});

describe('real ipvsadm runner', () => {
  it('lists with -S -n and restores with -R, one process each', async () => {
    const { exec, calls } = fakeExec((_f, args) => ({ code: 0, stdout: args[0] === '-S' ? SAVE : '', stderr: '' }));
    const r = createIpvsRunner({ exec });
    expect((await r.save()).length).toBe(2);
    await r.restore('-D -t 10.96.0.1:443\n');
    expect(calls.map((c) => [c.file, ...c.args])).toEqual([
      ['ipvsadm', '-S', '-n'],
      ['ipvsadm', '-R'],
    ]);
    expect(calls[1].stdin).toBe('-D -t 10.96.0.1:443\n');
  });

  it('treats any complaint as a failure, even with exit 0 (ipvsadm -R exits with its last line only)', async () => {
    const { exec } = fakeExec(() => ({ code: 0, stdout: '', stderr: 'Service already exists\n' }));
    const err = await createIpvsRunner({ exec })
      .restore('-A -t 10.0.0.1:80 -s rr\n-A -t 10.0.0.2:80 -s rr\n')
      .catch((e) => e);
    expect(err).toBeInstanceOf(IpvsRestoreError);
    expect(err.messages).toEqual(['Service already exists']);
    expect(err.syntax).toBe(false);
    expect(err.code).toBe('KPROXY_ERR_IPVS');
  });

  it('says when ipvsadm stopped at a line it could not parse (exit 2)', async () => {
    const { exec } = fakeExec(() => ({ code: 2, stdout: '', stderr: "invalid option `-X'\n" }));
    const err = await createIpvsRunner({ exec })
      .restore('-X\n')
      .catch((e) => e);
    expect(err.syntax).toBe(true);
    expect(err.message).toContain("invalid option `-X'");
  });
});

describe('IPVS support check', () => {
  const noModule = () => ({ code: 2, stdout: '', stderr: "Can't initialize ipvs: Protocol not available\nAre you sure that IP Virtual Server is built in the kernel or as module?\n" });

  it('names ip_vs, the scheduler module, nf_conntrack and dummy, and how to load them', async () => {
    const { exec } = fakeExec(noModule);
    const err = await checkIpvsSupport({ exec, exists: () => false, scheduler: 'lc' }).catch((e) => e);
    expect(err).toBeInstanceOf(KernelModuleMissingError);
    expect(err.code).toBe('KPROXY_ERR_KERNEL_MODULE_MISSING');
    expect(err.message).toContain('needs the ip_vs kernel module');
    expect(err.message).toContain('Protocol not available');
    expect(err.message).toContain('modprobe -a ip_vs ip_vs_lc nf_conntrack dummy');
  });

  it('fails when ipvsadm works but /proc/net/ip_vs is missing', async () => {
    const { exec } = fakeExec(() => ({ code: 0, stdout: '', stderr: '' }));
    const err = await checkIpvsSupport({ exec, exists: () => false, scheduler: 'rr' }).catch((e) => e);
    expect(err).toBeInstanceOf(KernelModuleMissingError);
    expect(err.message).toContain('/proc/net/ip_vs is missing');
  });

  it('passes when ipvsadm lists and /proc/net/ip_vs exists', async () => {
    const { exec, calls } = fakeExec(() => ({ code: 0, stdout: 'IP Virtual Server version 1.2.1 (size=4096)\n', stderr: '' }));
    await expect(checkIpvsSupport({ exec, exists: (p) => p === '/proc/net/ip_vs', scheduler: 'rr' })).resolves.toBeUndefined();
    expect(calls.map((c) => c.args)).toEqual([['-L', '-n']]);
  });

  it('says to install ipvsadm when it is missing', async () => {
    const { exec } = fakeExec(() => new CommandNotFoundError('ipvsadm is not installed or not on PATH'));
    const err = await checkIpvsSupport({ exec, exists: () => true, scheduler: 'rr' }).catch((e) => e);
    expect(err).toBeInstanceOf(CommandNotFoundError);
    expect(err.message).toContain('apt-get install ipvsadm');
  });
});

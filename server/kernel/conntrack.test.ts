import { chmod, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SimulatedConntrack, formatFlow, natFlow, plainFlow } from './conntrack-simulated.ts';
import { Conntrack, execConntrack, filterArgs, parseFlowLine, parseSummary } from './conntrack.ts';

describe('conntrack filters', () => {
  it('renders protocol, original destination and port, and reply source as conntrack options', () => {
    expect(filterArgs({ family: 'IPv4', protocol: 'udp', origDst: '10.96.0.10', origDstPort: 53, replySrc: '10.244.1.5' })).toEqual([
      '-f',
      'ipv4',
      '-p',
      'udp',
      '--orig-dst',
      '10.96.0.10',
      '--orig-port-dst',
      '53',
      '--reply-src',
      '10.244.1.5',
    ]);
    expect(filterArgs({ family: 'IPv6', protocol: 'sctp', origDst: 'fd00:0::a' })).toEqual(['-f', 'ipv6', '-p', 'sctp', '--orig-dst', 'fd00::a']);
    expect(filterArgs({ family: 'IPv4', protocol: 'udp', origDstPort: 30053, replySrc: '010.0.0.1' })).toEqual(['-f', 'ipv4', '-p', 'udp', '--orig-port-dst', '30053', '--reply-src', '10.0.0.1']);
  });

  it('refuses values that are not addresses of the family, ports out of range and unknown protocols', () => {
    const bad = [
      { family: 'IPv4', protocol: 'udp', origDst: '10.0.0.1 --flush' },
      { family: 'IPv4', protocol: 'udp', origDst: 'fd00::1' },
      { family: 'IPv6', protocol: 'udp', replySrc: '10.0.0.1' },
      { family: 'IPv4', protocol: 'udp', origDstPort: 0 },
      { family: 'IPv4', protocol: 'udp', origDstPort: 65536 },
      { family: 'IPv4', protocol: 'icmp' },
    ];
    for (const f of bad) expect(() => filterArgs(f as never), JSON.stringify(f)).toThrow(expect.objectContaining({ code: 'KPROXY_ERR_CONNTRACK' }));
  });
});

describe('conntrack output', () => {
  it('parses plain and extended flow lines, with the reply tuple second', () => {
    const udp = 'udp      17 99 src=10.0.0.2 dst=10.96.0.10 sport=4000 dport=53 [UNREPLIED] src=10.1.0.5 dst=10.0.0.2 sport=53 dport=4000 mark=0 use=1';
    expect(parseFlowLine(udp)).toEqual({
      family: 'IPv4',
      protocol: 'udp',
      orig: { src: '10.0.0.2', dst: '10.96.0.10', sport: 4000, dport: 53 },
      reply: { src: '10.1.0.5', dst: '10.0.0.2', sport: 53, dport: 4000 },
    });
    const tcp = 'ipv4     2 tcp      6 99 ESTABLISHED src=10.0.0.2 dst=10.96.0.10 sport=4000 dport=80 src=10.1.0.5 dst=10.0.0.2 sport=8080 dport=4000 [ASSURED] mark=0 use=1';
    expect(parseFlowLine(tcp)).toMatchObject({ protocol: 'tcp', orig: { dport: 80 }, reply: { src: '10.1.0.5', sport: 8080 } });
    const v6 = 'ipv6     10 udp      17 20 src=fd00::2 dst=fd00::10 sport=1 dport=53 src=fd00::5 dst=fd00::2 sport=53 dport=1 mark=0 use=1';
    expect(parseFlowLine(v6)).toMatchObject({ family: 'IPv6', reply: { src: 'fd00::5' } });
    const icmp = 'icmp     1 29 src=10.0.0.2 dst=10.0.0.1 type=8 code=0 id=7 src=10.0.0.1 dst=10.0.0.2 type=0 code=0 id=7 mark=0 use=1';
    expect(parseFlowLine(icmp)).toMatchObject({ protocol: 'icmp', orig: { dst: '10.0.0.1', sport: 0, dport: 0 }, reply: { src: '10.0.0.1' } });
    for (const junk of [
      '',
      'udp 17 29 src=10.0.0.2 dst=10.96.0.10 sport=1 dport=53 mark=0',
      'conntrack v1.4.7 (conntrack-tools): 2 flow entries have been shown.',
      'udp 17 99 src=10.0.0.2 dst=nonsense',
    ]) {
      expect(parseFlowLine(junk)).toBeNull();
    }
  });

  it('reads the summary line conntrack writes to stderr', () => {
    expect(parseSummary('conntrack v1.4.7 (conntrack-tools): 12 flow entries have been deleted.\n')).toBe(12);
    expect(parseSummary('conntrack v1.4.7 (conntrack-tools): 0 flow entries have been shown.\n')).toBe(0);
    expect(parseSummary('Operation not permitted')).toBeNull();
  });

  it('the fake prints flows as conntrack -L does', () => {
    const f = natFlow({ client: '10.0.0.2', clientPort: 4000, vip: '10.96.0.10', port: 53, endpoint: '10.1.0.5' });
    expect(parseFlowLine(formatFlow(f, true))).toEqual({ family: 'IPv4', protocol: 'udp', orig: f.orig, reply: f.reply });
    expect(parseFlowLine(formatFlow(f, false))).toEqual({ family: 'IPv4', protocol: 'udp', orig: f.orig, reply: f.reply });
  });
});

describe('Conntrack over the fake table', () => {
  const flows = () => [
    natFlow({ client: '10.0.0.2', clientPort: 4000, vip: '10.96.0.10', port: 53, endpoint: '10.1.0.5' }),
    natFlow({ client: '10.0.0.3', clientPort: 4001, vip: '10.96.0.10', port: 53, endpoint: '10.1.0.6' }),
    natFlow({ client: '10.0.0.2', clientPort: 4002, vip: '10.96.0.10', port: 54, endpoint: '10.1.0.5' }),
    natFlow({ protocol: 'tcp', client: '10.0.0.2', clientPort: 4003, vip: '10.96.0.10', port: 53, endpoint: '10.1.0.5' }),
    plainFlow({ client: '10.0.0.2', clientPort: 4004, dst: '192.0.2.1', port: 53 }),
  ];

  it('deletes exactly the flows every given field matches and says how many', async () => {
    const fake = new SimulatedConntrack(flows());
    const ct = new Conntrack(fake);
    expect(await ct.delete({ family: 'IPv4', protocol: 'udp', origDst: '10.96.0.10', origDstPort: 53, replySrc: '10.1.0.5' })).toBe(1);
    expect(fake.flows().map((f) => `${f.protocol} ${f.orig.sport}`)).toEqual(['udp 4001', 'udp 4002', 'tcp 4003', 'udp 4004']);
    // conntrack -D exits 1 when nothing matched: that is zero deletions, not a failure.
    expect(await ct.delete({ family: 'IPv4', protocol: 'udp', origDst: '10.96.0.10', origDstPort: 53, replySrc: '10.1.0.5' })).toBe(0);
    expect(fake.deletions[1]).toEqual(['-D', '-f', 'ipv4', '-p', 'udp', '--orig-dst', '10.96.0.10', '--orig-port-dst', '53', '--reply-src', '10.1.0.5']);
  });

  it('counts and lists by filter; the family defaults to IPv4 as in conntrack', async () => {
    const fake = new SimulatedConntrack(flows());
    const ct = new Conntrack(fake);
    expect(await ct.count({ family: 'IPv4', protocol: 'udp', origDst: '10.96.0.10' })).toBe(3);
    expect(await ct.count({ family: 'IPv6', protocol: 'udp' })).toBe(0);
    const seen: number[] = [];
    const res = await ct.list({ family: 'IPv4', protocol: 'udp' }, (f) => {
      seen.push(f.orig.sport);
      return seen.length < 2;
    });
    expect(seen).toEqual([4000, 4001]);
    expect(res.stopped).toBe(true);
  });

  it('answers refused options like conntrack 1.4.7, which Conntrack reports as errors', async () => {
    const fake = new SimulatedConntrack(flows());
    expect((await fake.run(['-C', '-p', 'udp'])).code).toBe(2);
    expect((await fake.run(['-C'])).stdout).toBe('5\n');
    expect((await fake.run(['-L', '--orig-port-dst', '53'])).stderr).toContain("unknown option `--orig-port-dst'");
    fake.onCall = () => {
      throw new Error('boom');
    };
    await expect(new Conntrack(fake).delete({ family: 'IPv4', protocol: 'udp' })).rejects.toThrow('boom');
    fake.onCall = null;
    fake.missing = true;
    await expect(new Conntrack(fake).delete({ family: 'IPv4', protocol: 'udp' })).rejects.toMatchObject({ code: 'KPROXY_ERR_COMMAND_NOT_FOUND' });
  });
});

describe('execConntrack (a stand-in binary)', () => {
  async function script(body: string): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), 'kproxy-ct-'));
    const file = join(dir, 'conntrack');
    await writeFile(file, `#!/bin/sh\n${body}\n`);
    await chmod(file, 0o755);
    return file;
  }

  it('streams stdout line by line, skips oversized lines, and keeps the summary from stderr', async () => {
    const bin = await script(
      [
        'echo "args: $*"',
        'i=0; while [ $i -lt 3000 ]; do echo "udp 17 29 src=10.0.0.2 dst=10.96.0.10 sport=$i dport=53 src=10.1.0.5 dst=10.0.0.2 sport=53 dport=$i"; i=$((i+1)); done',
        `head -c 10000 /dev/zero | tr '\\0' x; echo`,
        'printf "last-line-without-newline"',
        'echo "conntrack v1.4.7 (conntrack-tools): 3000 flow entries have been shown." >&2',
      ].join('\n'),
    );
    const lines: string[] = [];
    const res = await execConntrack({ binary: bin }).stream(
      ['-L', '-p', 'udp'],
      (l) => {
        lines.push(l);
      },
      { maxLineBytes: 4096 },
    );
    expect(lines[0]).toBe('args: -L -p udp');
    expect(lines.filter((l) => parseFlowLine(l)).length).toBe(3000);
    expect(lines.at(-1)).toBe('last-line-without-newline');
    expect(res).toMatchObject({ code: 0, lines: 3002, oversized: 1, stopped: false });
    expect(parseSummary(res.stderr)).toBe(3000);
  });

  it('a deletion that prints megabytes of deleted flows is counted, not buffered', async () => {
    const bin = await script(
      [
        'i=0; while [ $i -lt 40000 ]; do echo "udp      17 29 src=10.0.0.2 dst=10.96.0.10 sport=$i dport=53 src=10.1.0.5 dst=10.0.0.2 sport=53 dport=$i mark=0 use=1 padding-padding-padding-padding"; i=$((i+1)); done',
        'echo "conntrack v1.4.7 (conntrack-tools): 40000 flow entries have been deleted." >&2',
      ].join('\n'),
    );
    const n = await new Conntrack(execConntrack({ binary: bin })).delete({ family: 'IPv4', protocol: 'udp', origDst: '10.96.0.10' });
    expect(n).toBe(40000);
  });

  it('ends the process when the consumer has seen enough', async () => {
    const bin = await script('while true; do echo "udp 17 29 src=10.0.0.2 dst=10.96.0.10 sport=1 dport=53 src=10.1.0.5 dst=10.0.0.2 sport=53 dport=1"; done');
    let n = 0;
    const res = await execConntrack({ binary: bin }).stream(['-L'], () => ++n < 100, { timeoutMs: 10_000 });
    expect(res.stopped).toBe(true);
    expect(n).toBe(100);
  });

  it('reports a missing binary and a hung one', async () => {
    const missing = execConntrack({ binary: '/nonexistent/conntrack' });
    await expect(missing.stream(['-L'], () => {})).rejects.toMatchObject({ code: 'KPROXY_ERR_COMMAND_NOT_FOUND' });
    await expect(missing.run(['-D'])).rejects.toMatchObject({ code: 'KPROXY_ERR_COMMAND_NOT_FOUND' });
    const hung = await script('sleep 10');
    await expect(execConntrack({ binary: hung }).stream(['-L'], () => {}, { timeoutMs: 200 })).rejects.toMatchObject({ code: 'KPROXY_ERR_COMMAND_TIMEOUT' });
  });
});

import { afterEach, describe, expect, it } from 'vitest';
import { Conntrack, execConntrack, type ConntrackFilter, type ConntrackFlow, type ConntrackRunner } from '../../server/kernel/conntrack.ts';
import { SimulatedConntrack, natFlow, plainFlow, type SimulatedFlow } from '../../server/kernel/conntrack-simulated.ts';
import { execFile } from '../../server/kernel/exec.ts';
import { tiers } from '../tiers.ts';
import { sh } from './conntrack-net.ts';

/**
 * The fake table is only worth its unit tests if it answers like the real
 * conntrack 1.4.7: the same argument arrays go to both, over the same flows,
 * and the deletions, counts, listings and refusals must agree.
 */

const ns = `kpt-ct-${process.pid}-runner`;
afterEach(async () => {
  await execFile('ip', ['netns', 'del', ns], { timeoutMs: 30_000 });
});

/** inNamespace runs conntrack inside the test's namespace. */
function inNamespace(): ConntrackRunner {
  const ip = execConntrack({ binary: 'ip' });
  const prefix = ['netns', 'exec', ns, 'conntrack'];
  return { run: (a, o) => ip.run([...prefix, ...a], o), stream: (a, f, o) => ip.stream([...prefix, ...a], f, o) };
}

/** insert creates the flow in the kernel table with conntrack -I. */
async function insert(f: SimulatedFlow): Promise<void> {
  const args = ['-I', '-p', f.protocol, '-s', f.orig.src, '-d', f.orig.dst, '--sport', String(f.orig.sport), '--dport', String(f.orig.dport)];
  args.push('-r', f.reply.src, '-q', f.reply.dst, '--reply-port-src', String(f.reply.sport), '--reply-port-dst', String(f.reply.dport), '-t', '600');
  if (f.protocol === 'tcp') args.push('--state', 'ESTABLISHED');
  await sh('ip', ['netns', 'exec', ns, 'conntrack', ...args]);
}

const key = (f: ConntrackFlow) => `${f.protocol} ${f.orig.src}:${f.orig.sport}>${f.orig.dst}:${f.orig.dport} / ${f.reply.src}:${f.reply.sport}>${f.reply.dst}:${f.reply.dport}`;

async function table(ct: Conntrack): Promise<string[]> {
  const out: string[] = [];
  for (const protocol of ['udp', 'tcp'] as const) await ct.list({ family: 'IPv4', protocol }, (f) => void out.push(key(f)));
  return out.sort();
}

describe.skipIf(!tiers().kernel.ok)('SimulatedConntrack against conntrack 1.4.7', () => {
  it('deletes, counts and lists the same flows for the same argument arrays', async () => {
    await sh('ip', ['netns', 'add', ns]);
    const flows: SimulatedFlow[] = [
      natFlow({ client: '10.0.0.2', clientPort: 40000, vip: '10.96.0.10', port: 53, endpoint: '10.244.1.5', targetPort: 5353 }),
      natFlow({ client: '10.0.0.3', clientPort: 40001, vip: '10.96.0.10', port: 53, endpoint: '10.244.2.6', targetPort: 5353 }),
      natFlow({ client: '10.0.0.2', clientPort: 40002, vip: '10.96.0.10', port: 54, endpoint: '10.244.1.5' }),
      natFlow({ client: '10.0.0.2', clientPort: 40003, vip: '172.18.0.2', port: 30053, endpoint: '10.244.1.5', targetPort: 5353 }),
      natFlow({ client: '10.0.0.2', clientPort: 40004, vip: '10.96.0.20', port: 514, endpoint: '10.244.1.5' }),
      plainFlow({ client: '10.0.0.2', clientPort: 40005, dst: '10.96.0.10', port: 53 }),
      plainFlow({ client: '10.0.0.2', clientPort: 40006, dst: '198.51.100.7', port: 30053 }),
      natFlow({ protocol: 'tcp', client: '10.0.0.2', clientPort: 40007, vip: '10.96.0.10', port: 53, endpoint: '10.244.1.5' }),
    ];
    for (const f of flows) await insert(f);
    const real = new Conntrack(inNamespace());
    const fake = new Conntrack(new SimulatedConntrack(flows));
    expect(await table(real)).toEqual(await table(fake));

    const counts: ConntrackFilter[] = [
      { family: 'IPv4', protocol: 'udp', origDst: '10.96.0.10', origDstPort: 53 },
      { family: 'IPv4', protocol: 'udp', origDst: '10.96.0.10' },
      { family: 'IPv4', protocol: 'tcp', origDst: '10.96.0.10', origDstPort: 53 },
      { family: 'IPv4', protocol: 'udp', origDstPort: 30053 },
      { family: 'IPv4', protocol: 'udp', replySrc: '10.244.1.5' },
      { family: 'IPv6', protocol: 'udp' },
    ];
    for (const f of counts) expect(await real.count(f), JSON.stringify(f)).toBe(await fake.count(f));

    const deletions: ConntrackFilter[] = [
      { family: 'IPv4', protocol: 'udp', origDst: '10.96.0.10', origDstPort: 53, replySrc: '10.244.1.5' },
      { family: 'IPv4', protocol: 'udp', origDst: '10.96.0.10', origDstPort: 53, replySrc: '10.244.1.5' },
      { family: 'IPv4', protocol: 'udp', origDstPort: 30053, replySrc: '10.244.1.5' },
      { family: 'IPv4', protocol: 'udp', origDst: '10.96.0.10', origDstPort: 53, replySrc: '10.96.0.10' },
      { family: 'IPv4', protocol: 'udp', origDst: '10.96.0.10' },
    ];
    for (const f of deletions) {
      expect(await real.delete(f), JSON.stringify(f)).toBe(await fake.delete(f));
      expect(await table(real)).toEqual(await table(fake));
    }
    expect(await table(real)).toEqual([
      'tcp 10.0.0.2:40007>10.96.0.10:53 / 10.244.1.5:53>10.0.0.2:40007',
      'udp 10.0.0.2:40004>10.96.0.20:514 / 10.244.1.5:514>10.0.0.2:40004',
      'udp 10.0.0.2:40006>198.51.100.7:30053 / 198.51.100.7:30053>10.0.0.2:40006',
    ]);

    // What conntrack refuses, the fake refuses with the same exit code.
    const realRunner = inNamespace();
    const fakeRunner = new SimulatedConntrack();
    for (const args of [
      ['-C', '-p', 'udp'],
      ['-L', '--orig-port-dst', '53'],
      ['-D', '-p', 'udp', '--orig-dst', '10.96.0.99'],
    ]) {
      expect((await realRunner.run(args)).code, args.join(' ')).toBe((await fakeRunner.run(args)).code);
    }
  });
});

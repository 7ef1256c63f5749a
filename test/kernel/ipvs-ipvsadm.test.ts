import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { SimulatedIpvs } from '../../server/kernel/ipvs-simulated.ts';
import { parseIpvsSave, renderIpvsSave } from '../../server/kernel/ipvs-listing.ts';
import { IpvsRestoreError } from '../../server/kernel/ipvs.ts';
import { tiers } from '../tiers.ts';

/**
 * The real ipvsadm against what kproxy writes. This kernel may have no ip_vs,
 * and ipvsadm then refuses every batch the same way before reading it (checked
 * below). So ipvsadm runs with a small LD_PRELOAD shim standing in for the
 * kernel's IPVS socket options (ipvs-shim/ipvs-sockopt-shim.c): ipvsadm's own
 * parser reads kproxy's batches and listings come from the real binary.
 *
 * Verified: every line kproxy writes is accepted by ipvsadm 1.31's parser and
 * turned into the kernel request kproxy means (the shim logs the decoded
 * structures: scheduler, persistence flag and timeout, mh-port flag, masquerade
 * forwarding, weights); `ipvsadm -Sn`, `-Ln --exact` and `-Ln --stats --exact`
 * as the binary prints them parse back to the same table as the simulated
 * kernel's, through full, partial, draining and deleting syncs; ipvsadm and
 * SimulatedIpvs agree on refused lines (which stop a batch, which are skipped, with
 * the same messages). Not verified here: the kernel's own checks beyond the
 * shim's (duplicates, missing services, unknown schedulers are modelled;
 * scheduler modules, memory limits and real packet forwarding are not).
 */
const CHILD = join(import.meta.dirname, 'ipvs-ipvsadm.child.ts');
const SHIM_SRC = join(import.meta.dirname, 'ipvs-shim/ipvs-sockopt-shim.c');

function has(cmd: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;
}
const gcc = has('gcc');
const required = process.env.KPROXY_REQUIRE_ALL_TIERS === '1';

let dir = '';
let shim = '';
const namespaces: string[] = [];
let seq = 0;

function netns(): string {
  const ns = `kpt-ipvsadm-${process.pid}-${seq++}`;
  execFileSync('ip', ['netns', 'add', ns]);
  namespaces.push(ns);
  return ns;
}
afterEach(() => {
  for (const ns of namespaces.splice(0)) {
    try {
      execFileSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
    } catch {
      // Already gone: nothing left to remove.
    }
  }
});

/** ipvsadm runs the real binary in a namespace, with the shim and a fresh (or given) table file. */
function ipvsadm(ns: string, args: string[], input: string | undefined, state: string, withShim = true) {
  const env = withShim ? ['env', `LD_PRELOAD=${shim}`, `KPT_IPVS_SHIM_STATE=${state}`, `KPT_IPVS_SHIM_LOG=${state}.log`] : ['env'];
  return spawnSync('ip', ['netns', 'exec', ns, ...env, 'ipvsadm', ...args], { encoding: 'utf8', input, timeout: 30_000 });
}

describe.skipIf(!tiers().kernel.ok || (!gcc && !required))('real ipvsadm accepts what kproxy writes (IPVS shim)', () => {
  beforeAll(() => {
    expect(gcc, 'gcc is needed to build the IPVS shim (bash .ci/run installs it)').toBe(true);
    dir = mkdtempSync(join(tmpdir(), 'kpt-ipvsadm-'));
    shim = join(dir, 'ipvs-sockopt-shim.so');
    execFileSync('gcc', ['-shared', '-fPIC', '-O1', '-Wall', '-Wextra', '-Werror', '-o', shim, SHIM_SRC, '-ldl']);
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('without ip_vs, ipvsadm refuses a valid and a broken batch alike: it checks nothing (why the shim exists)', () => {
    const ns = netns();
    if (spawnSync('ip', ['netns', 'exec', ns, 'test', '-e', '/proc/net/ip_vs']).status === 0) return;
    const valid = ipvsadm(ns, ['-R'], '-A -t 10.96.0.1:80 -s rr\n', '', false);
    const broken = ipvsadm(ns, ['-R'], '-A -t 10.96.0.300:80 -s rr --frobnicate\n', '', false);
    for (const r of [valid, broken]) {
      expect(r.status).toBe(2);
      expect(r.stderr).toContain("Can't initialize ipvs: Protocol not available");
    }
  });

  for (const scheduler of ['rr', 'mh']) {
    it(`programs deploy/examples/ through the real ipvsadm (${scheduler}) exactly as on the simulated kernel, sync after sync`, () => {
      const ns = netns();
      const state = join(dir, `table-${scheduler}`);
      const res = spawnSync('ip', ['netns', 'exec', ns, 'env', `KPT_SCHEDULER=${scheduler}`, process.execPath, CHILD, shim, state, `${state}.log`], {
        encoding: 'utf8',
        timeout: 90_000,
        maxBuffer: 64 * 1024 * 1024,
      });
      expect(res.status, res.stderr).toBe(0);
      const r = JSON.parse(res.stdout) as {
        steps: {
          name: string;
          full: boolean;
          error: string | null;
          twinError: string | null;
          batch: string;
          save: string;
          rawSave: string;
          twinSave: string;
          draining: string[];
          twinDraining: string[];
        }[];
        stats: Record<string, { counters: Record<string, number>; reals: Record<string, Record<string, number>> }>;
        list: { key: string; reals: { key: string; weight: number; active: number; inactive: number }[] }[];
        shimLog: string;
      };
      expect(r.steps.map((s) => s.name)).toEqual(['full', 'drain', 'sweep', 'affinity', 'delete', 'full-again']);
      for (const s of r.steps) {
        expect(s.error, s.name).toBeNull();
        expect(s.twinError, s.name).toBeNull();
        expect(s.save, `${s.name}: ipvsadm -Sn of the real binary vs the simulated kernel`).toBe(s.twinSave);
        expect(s.draining, s.name).toEqual(s.twinDraining);
      }
      // The kernel (shim) never refused a request, and got the ones kproxy meant.
      const log = r.shimLog;
      expect(log).not.toContain('-> error');
      const flags = scheduler === 'mh' ? 0x10 : 0;
      expect(log).toContain(`TIMEOUT tcp=900 tcpfin=0 udp=300`);
      expect(log).toContain(`ADD tcp 10.96.10.70:80 sched=${scheduler} flags=0x${(flags | 1).toString(16)} timeout=600 netmask=ffffffff`);
      expect(log).toContain(`ADD udp 10.96.0.10:53 sched=${scheduler} flags=0x${flags.toString(16)} timeout=0 netmask=ffffffff`);
      expect(log).toContain('ADDDEST tcp 10.96.10.10:80 -> 10.244.0.11:8080 fwd=masq weight=1');
      expect(log).toContain('EDITDEST tcp 10.96.10.20:80 -> 10.244.1.22:8080 fwd=masq weight=0');
      expect(log).toContain('DELDEST tcp 10.96.10.20:9090 -> 10.244.1.22:9090');
      expect(log).not.toContain('DELDEST tcp 10.96.10.20:80 -> 10.244.1.22:8080');
      expect(log).toContain(`EDIT tcp 10.96.10.10:80 sched=${scheduler} flags=0x${(flags | 1).toString(16)} timeout=900 netmask=ffffffff`);
      expect(log).toContain('DEL udp 10.96.0.10:53');
      if (scheduler === 'mh') expect(r.steps[0].rawSave).toContain(' -s mh -b mh-port');
      // The one draining real server with connections stays, as the real listing shows.
      expect(r.steps[2].draining).toEqual(['10.244.1.22:8080']);
      expect(r.list.find((s) => s.key === '10.96.10.20:80/TCP')?.reals).toEqual([
        { key: '10.244.0.21:8080', weight: 1, active: 0, inactive: 0 },
        { key: '10.244.1.22:8080', weight: 0, active: 2, inactive: 3 },
      ]);
      expect(r.steps[5].batch).not.toContain('# ipvsadm -R');
      expect(r.stats['10.96.10.10:80/TCP'].reals['10.244.0.11:8080']).toEqual({ conns: 1234, inPackets: 56789, outPackets: 45678, inBytes: 98765432, outBytes: 123456789012 });
      expect(r.stats['10.96.10.10:80/TCP'].counters.outBytes).toBe(123456789012);
    });
  }

  /** Batches both the real ipvsadm and SimulatedIpvs read; they must end in the same table with the same complaints. */
  const BATCHES: Record<string, string> = {
    'kube-proxy shaped lines': [
      '-A -t 10.96.0.1:443 -s rr -p 10800',
      '-a -t 10.96.0.1:443 -r 10.0.0.10:6443 -m -w 1',
      '-a -t 10.96.0.1:443 -r 10.0.0.11:6443 -m -w 1',
      '-e -t 10.96.0.1:443 -r 10.0.0.11:6443 -m -w 0',
      '-A -u 10.96.0.10:53 -s mh -b mh-port',
      '-a -u 10.96.0.10:53 -r 10.244.0.2:53 -m -w 1',
      '-A --sctp-service 10.96.0.11:7777 -s sh -b sh-port,sh-fallback',
      '-E -t 10.96.0.1:443 -s lc',
      '-d -t 10.96.0.1:443 -r 10.0.0.10:6443',
      '-D --sctp-service 10.96.0.11:7777',
      '--set 900 0 300',
    ].join('\n'),
    'lines the kernel refuses, each reported, the batch going on': [
      '-A -t 10.96.0.1:80 -s rr',
      '-A -t 10.96.0.1:80 -s rr',
      '-a -t 10.96.0.9:80 -r 10.244.0.1:80 -m',
      '-d -t 10.96.0.1:80 -r 10.244.0.1:80',
      '-e -t 10.96.0.1:80 -r 10.244.0.1:80 -m -w 3',
      '-E -t 10.96.0.2:80 -s rr',
      '-A -t 10.96.0.3:80 -s nosuch',
      '-D -t 10.96.0.4:80',
      '-A -t 10.96.0.5:80 -s wlc',
    ].join('\n'),
    'an unknown option skips its line only': ['-A -t 10.96.0.1:80 -s rr', '-A -t 10.96.0.2:80 --frobnicate', '-A -t 10.96.0.3:80 -s rr'].join('\n'),
    'a bad address stops the batch': ['-A -t 10.96.0.1:80 -s rr', '-A -t 10.96.0.300:80 -s rr', '-A -t 10.96.0.3:80 -s rr'].join('\n'),
    'weights up to 2^31-1, a larger one stops the batch': [
      '-A -t 10.96.0.1:80 -s rr',
      '-a -t 10.96.0.1:80 -r 10.244.0.1:80 -m -w 70000',
      '-a -t 10.96.0.1:80 -r 10.244.0.2:80 -m -w 2147483648',
      '-A -t 10.96.0.3:80 -s rr',
    ].join('\n'),
    'a scheduler flag for another scheduler stops the batch': ['-A -t 10.96.0.1:80 -s rr -b mh-port', '-A -t 10.96.0.2:80 -s rr'].join('\n'),
    'scheduler flags are checked against the final scheduler': ['-A -t 10.96.0.1:80 -b mh-port -s mh', '-A -t 10.96.0.2:80 -b bogus -s mh'].join('\n'),
    'a second command on a line stops the batch': ['-A -t 10.96.0.1:80 -s rr', '-A -D -t 10.96.0.2:80'].join('\n'),
    'a line not starting with a command stops the batch': ['-t 10.96.0.1:80 -A -s rr'].join('\n'),
    'a weight on a service stops the batch': ['-A -t 10.96.0.1:80 -s rr -w 1'].join('\n'),
    'a real server without -r stops the batch': ['-A -t 10.96.0.1:80 -s rr', '-a -t 10.96.0.1:80 -m -w 1'].join('\n'),
    'a zero port without persistence stops the batch': ['-A -t 10.96.0.1 -s rr'].join('\n'),
  };

  for (const [name, batch] of Object.entries(BATCHES)) {
    it(`agrees with SimulatedIpvs: ${name}`, async () => {
      const ns = netns();
      const state = join(dir, `diff-${seq}`);
      const real = ipvsadm(ns, ['-R'], batch + '\n', state);
      const realMessages = real.stderr
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => l !== '');
      const realTable = renderIpvsSave(parseIpvsSave(ipvsadm(ns, ['-S', '-n'], undefined, state).stdout));

      const fake = new SimulatedIpvs();
      const err = await fake.restore(batch + '\n').catch((e: unknown) => e);
      const fakeMessages = err instanceof IpvsRestoreError ? [...err.messages] : [];
      expect(realMessages, `ipvsadm said: ${real.stderr}`).toEqual(fakeMessages);
      expect(real.status === 2 || real.status === 255, `exit ${real.status}`).toBe(err instanceof IpvsRestoreError && err.syntax);
      expect(fake.saveText()).toBe(realTable);
      if (name.startsWith('kube-proxy')) {
        expect(realMessages).toEqual([]);
        expect(readFileSync(`${state}.log`, 'utf8')).toContain('ADD sctp 10.96.0.11:7777 sched=sh flags=0x18 timeout=0 netmask=ffffffff');
      }
    });
  }
});

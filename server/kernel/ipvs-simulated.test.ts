import { describe, expect, it } from 'vitest';
import { SimulatedIpvs } from './ipvs-simulated.ts';
import { IpvsRestoreError } from './ipvs.ts';

describe('SimulatedIpvs', () => {
  it('applies an ipvsadm -R batch and lists it like ipvsadm -Sn', async () => {
    const k = new SimulatedIpvs();
    await k.restore('-A -t 10.96.0.1:443 -s rr -p 10800\n-a -t 10.96.0.1:443 -r 10.0.0.11:6443 -m -w 1\n-a -t 10.96.0.1:443 -r 10.0.0.10:6443 -m -w 1\n-A -u 10.96.0.10:53 -s rr\n');
    expect(k.saveText()).toBe('-A -t 10.96.0.1:443 -s rr -p 10800\n-a -t 10.96.0.1:443 -r 10.0.0.10:6443 -m -w 1\n-a -t 10.96.0.1:443 -r 10.0.0.11:6443 -m -w 1\n-A -u 10.96.0.10:53 -s rr\n');
    const [tcp] = await k.save();
    expect(tcp.reals.map((r) => r.address)).toEqual(['10.0.0.10', '10.0.0.11']);
  });

  it('reports what the kernel refuses and goes on with the next line, as ipvsadm -R does', async () => {
    const k = new SimulatedIpvs();
    await k.restore('-A -t 10.0.0.1:80 -s rr\n');
    const err = await k
      .restore('-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.9:80 -r 10.1.1.1:80 -m\n-d -t 10.0.0.1:80 -r 10.1.1.1:80\n-A -t 10.0.0.2:80 -s nosuch\n-A -t 10.0.0.3:80 -s lc\n')
      .catch((e) => e);
    expect(err).toBeInstanceOf(IpvsRestoreError);
    expect(err.messages).toEqual(['Service already exists', 'Service not defined', 'No such destination', 'Scheduler or persistence engine not found']);
    expect(err.syntax).toBe(false);
    expect(k.services().map((s) => `${s.address} ${s.scheduler}`)).toEqual(['10.0.0.1 rr', '10.0.0.3 lc']);
  });

  it('stops at a bad value, keeping the lines before it (ipvsadm exits 2)', async () => {
    const k = new SimulatedIpvs();
    const err = await k.restore('-A -t 10.0.0.1:80 -s rr\n-A -t 10.0.0.300:80 -s rr\n-A -t 10.0.0.3:80 -s rr\n').catch((e) => e);
    expect(err.syntax).toBe(true);
    expect(err.messages).toEqual(['illegal virtual server address[:port] specified']);
    expect(k.services().map((s) => s.address)).toEqual(['10.0.0.1']);
  });

  it('skips a line with an unknown option and goes on, as popt makes ipvsadm do', async () => {
    const k = new SimulatedIpvs();
    const err = await k.restore('-A -t 10.0.0.1:80 -s rr\n-A -t 10.0.0.2:80 --frobnicate\n-A -t 10.0.0.3:80 -s rr\n').catch((e) => e);
    expect(err.syntax).toBe(false);
    expect(err.messages).toEqual(['--frobnicate: unknown option']);
    expect(k.services().map((s) => s.address)).toEqual(['10.0.0.1', '10.0.0.3']);
  });

  it('edits weights and schedulers in place and deletes what was asked', async () => {
    const k = new SimulatedIpvs();
    await k.restore('-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.1.1:80 -m -w 1\n-a -t 10.0.0.1:80 -r 10.1.1.2:80 -m -w 1\n');
    await k.restore('-e -t 10.0.0.1:80 -r 10.1.1.1:80 -m -w 0\n-E -t 10.0.0.1:80 -s wrr -p 60\n-d -t 10.0.0.1:80 -r 10.1.1.2:80\n');
    expect(k.saveText()).toBe('-A -t 10.0.0.1:80 -s wrr -p 60\n-a -t 10.0.0.1:80 -r 10.1.1.1:80 -m -w 0\n');
  });

  it('lists connection counts and traffic counters set by a test', async () => {
    const k = new SimulatedIpvs();
    await k.restore('-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.1.1:80 -m -w 1\n');
    k.setConnections('10.0.0.1:80/TCP', '10.1.1.1:80', 2, 7);
    k.addTraffic('10.0.0.1:80/TCP', '10.1.1.1:80', { conns: 9, inPackets: 90, outPackets: 80, inBytes: 9000, outBytes: 8000 });
    const [s] = await k.list();
    expect(s.reals[0]).toMatchObject({ activeConns: 2, inactiveConns: 7 });
    const stats = await k.stats();
    expect(stats.get('10.0.0.1:80/TCP')?.reals.get('10.1.1.1:80')).toEqual({ conns: 9, inPackets: 90, outPackets: 80, inBytes: 9000, outBytes: 8000 });
    // printf("%-33s") for the service, then "%9llu" per counter.
    expect(k.statsText()).toContain('TCP  10.0.0.1:80                         9       90       80     9000     8000\n');
  });

  it('keeps timeouts set with --set, 0 leaving one as it is', async () => {
    const k = new SimulatedIpvs();
    await k.restore('--set 600 0 120\n');
    expect(k.timeouts).toEqual({ tcp: 600, tcpFin: 120, udp: 120 });
  });
});

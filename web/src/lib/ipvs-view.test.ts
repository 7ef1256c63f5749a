import { describe, expect, it } from 'vitest';
import { ipvsPort, realServer } from '../testing/fixtures.ts';
import { fmtRate, ipvsCards, realServerKey, realServers, schedulerText, tableLayout } from './ipvs-view.ts';

describe('IPVS on the pages', () => {
  it('draws virtual servers with figures, sets and addresses as lists, and iptables tables as rules', () => {
    expect(['ipvs', 'ipsets', 'addresses', 'nat', 'filter'].map(tableLayout)).toEqual(['ipvs', 'list', 'list', 'rules', 'rules']);
  });

  it("gives each real server its weight's share of new connections; weight 0 gets none", () => {
    const rows = realServers({
      rules: [realServer('10.0.0.1:80', { weight: 3 }), realServer('10.0.0.2:80'), realServer('10.0.0.3:80', { weight: 0, draining: true }), realServer('10.0.0.4:80', { weight: 0 })],
    });
    expect(rows.map((r) => [r.key, r.share, r.state])).toEqual([
      ['10.0.0.1:80', 0.75, 'active'],
      ['10.0.0.2:80', 0.25, 'active'],
      ['10.0.0.3:80', 0, 'draining'],
      ['10.0.0.4:80', 0, 'weight-0'],
    ]);
    expect(realServers({ rules: [realServer('10.0.0.3:80', { weight: 0, draining: true })] })[0].share).toBe(0);
  });

  it('names schedulers and spells IPv6 real servers as endpoint keys', () => {
    expect(schedulerText({ scheduler: 'rr', persistence: 0, flags: [] })).toBe('round robin (rr)');
    expect(schedulerText({ scheduler: 'mh', persistence: 10800, flags: ['mh-port'] })).toBe('Maglev hashing (mh) · mh-port · persistent 10800 s');
    expect(schedulerText({ scheduler: 'twos', persistence: 0, flags: [] })).toBe('twos');
    expect(realServerKey({ address: 'fd00::5', port: 8080 })).toBe('[fd00::5]:8080');
  });

  it('formats rates, and says when there is none yet', () => {
    expect(fmtRate(null, 'conns')).toBe('–');
    expect(fmtRate({ conns: 0.4, packets: 1500, bytes: 2048 }, 'conns')).toBe('0.4/s');
    expect(fmtRate({ conns: 0.4, packets: 1500, bytes: 2048 }, 'packets')).toBe('1.5k/s');
    expect(fmtRate({ conns: 0.4, packets: 1500, bytes: 2048 }, 'bytes')).toBe('2.0 KiB/s');
    expect(fmtRate({ conns: 0, packets: 0, bytes: 0 }, 'conns')).toBe('0/s');
  });

  it("puts a port's virtual servers first, then its set members, then the rules matching its sets", () => {
    expect(ipvsCards(ipvsPort().chains).map((c) => `${c.table}/${c.name}`)).toEqual([
      'ipvs/TCP 10.96.10.30:443',
      'ipvs/TCP 192.0.2.10:443',
      'ipsets/KUBE-CLUSTER-IP',
      'ipsets/KUBE-LOAD-BALANCER',
      'nat/KUBE-SERVICES',
      'nat/KUBE-LOAD-BALANCER',
    ]);
  });
});

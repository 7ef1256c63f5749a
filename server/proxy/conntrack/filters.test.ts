import { describe, expect, it } from 'vitest';
import { describeFilter } from '../../kernel/conntrack.ts';
import { natFlow, plainFlow } from '../../kernel/conntrack-simulated.ts';
import { ep, makeService, makeSlice } from '../testing.ts';
import { FilterMatcher, ReconcileIndex, staleFlowFilters } from './filters.ts';
import { DNS, dnsService, dnsSlice, NODE_IP, newState, syslogService, syslogSlice } from './testing.ts';

const text = (r: ReturnType<typeof staleFlowFilters>) => [...r.filters.map(describeFilter), ...r.unnatedNodePorts.map((p) => `unNATed udp to *:${p}`)].sort();

describe('staleFlowFilters', () => {
  it('an endpoint that went away: its flows through every frontend, and only its', () => {
    const state = newState();
    state.onService(null, dnsService());
    state.onEndpointSlice(null, dnsSlice('10.244.1.5', '10.244.2.6'));
    const first = state.checkout();
    // The first endpoints make the service newly active: that is the next test's case.
    expect(text(staleFlowFilters('IPv4', { ...first, previous: new Map() }))).toHaveLength(4);
    state.onEndpointSlice(null, dnsSlice('10.244.2.6'));
    const c = state.checkout();
    expect(text(staleFlowFilters('IPv4', { ...c, previous: new Map() }))).toEqual([
      'udp to *:30053 answered by 10.244.1.5',
      'udp to 10.96.0.10:53 answered by 10.244.1.5',
      'udp to 192.0.2.10:53 answered by 10.244.1.5',
      'udp to 203.0.113.10:53 answered by 10.244.1.5',
    ]);
  });

  it('an endpoint that stops serving is stale; a terminating one that still serves is not', () => {
    const state = newState();
    state.onService(null, syslogService());
    state.onEndpointSlice(null, syslogSlice('10.244.1.5', '10.244.2.6'));
    state.checkout();
    state.onEndpointSlice(
      null,
      makeSlice(
        'logging',
        'syslog',
        'syslog-1',
        [ep('10.244.1.5', { ready: false, serving: true, terminating: true }), ep('10.244.2.6', { ready: false, serving: false })],
        [{ name: 'syslog', port: 514, protocol: 'UDP' }],
      ),
    );
    const c = state.checkout();
    expect(text(staleFlowFilters('IPv4', { ...c, previous: new Map() }))).toEqual(['udp to 10.96.0.20:514 answered by 10.244.2.6']);
  });

  it('a UDP service that gets its first endpoint: the unNATed entries of every frontend, DNATed flows stay', () => {
    const state = newState();
    state.onService(null, dnsService());
    state.checkout();
    state.onEndpointSlice(null, dnsSlice('10.244.1.5'));
    const c = state.checkout();
    expect([...c.newlyActiveUDPServices]).toEqual(['kube-system/dns:dns/UDP']);
    expect(text(staleFlowFilters('IPv4', { ...c, previous: new Map() }))).toEqual([
      'udp to 10.96.0.10:53 answered by 10.96.0.10',
      'udp to 192.0.2.10:53 answered by 192.0.2.10',
      'udp to 203.0.113.10:53 answered by 203.0.113.10',
      'unNATed udp to *:30053',
    ]);
  });

  it('a deleted UDP service: its cluster IP whatever the port; its endpoints through the frontends it had', () => {
    const state = newState();
    state.onService(null, dnsService());
    state.onEndpointSlice(null, dnsSlice('10.244.1.5'));
    const before = state.checkout();
    const previous = new Map(before.services);
    state.onService(dnsService(), null);
    state.onEndpointSlice(dnsSlice('10.244.1.5'), null);
    const c = state.checkout();
    expect(text(staleFlowFilters('IPv4', { ...c, previous }))).toEqual([
      'udp to *:30053 answered by 10.244.1.5',
      'udp to 10.96.0.10:*',
      'udp to 10.96.0.10:53 answered by 10.244.1.5',
      'udp to 192.0.2.10:53 answered by 10.244.1.5',
      'udp to 203.0.113.10:53 answered by 10.244.1.5',
    ]);
  });

  it('TCP services are left alone; SCTP ones are cleaned like UDP', () => {
    const state = newState();
    state.onService(null, makeService('ns', 'web', { clusterIP: '10.96.0.30', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }));
    state.onService(null, makeService('ns', 'sig', { clusterIP: '10.96.0.40', ports: [{ name: 'sig', port: 3868, protocol: 'SCTP' }] }));
    state.onEndpointSlice(null, makeSlice('ns', 'web', 'web-1', [ep('10.244.1.5')], [{ name: 'http', port: 8080, protocol: 'TCP' }]));
    state.onEndpointSlice(null, makeSlice('ns', 'sig', 'sig-1', [ep('10.244.1.5')], [{ name: 'sig', port: 3868, protocol: 'SCTP' }]));
    state.checkout();
    state.onEndpointSlice(null, makeSlice('ns', 'web', 'web-1', [], [{ name: 'http', port: 8080, protocol: 'TCP' }]));
    state.onEndpointSlice(null, makeSlice('ns', 'sig', 'sig-1', [], [{ name: 'sig', port: 3868, protocol: 'SCTP' }]));
    const c = state.checkout();
    expect(text(staleFlowFilters('IPv4', { ...c, previous: new Map() }))).toEqual(['sctp to 10.96.0.40:3868 answered by 10.244.1.5']);
  });
});

describe('ReconcileIndex', () => {
  function index(...slices: ReturnType<typeof dnsSlice>[]) {
    const state = newState();
    state.onService(null, dnsService());
    state.onService(null, syslogService());
    for (const s of slices) state.onEndpointSlice(null, s);
    const c = state.checkout();
    return new ReconcileIndex('IPv4', c.services, c.endpoints);
  }

  it('flags flows to a service frontend answered by anything but a serving endpoint', () => {
    const idx = index(dnsSlice('10.244.2.6'), syslogSlice('10.244.1.5'));
    const dead = (vip: string, port: number) => natFlow({ client: '10.0.0.2', clientPort: 40000, vip, port, endpoint: '10.244.1.5', targetPort: 5353 });
    expect(describeFilter(idx.staleFilter(dead(DNS.clusterIP, 53))!)).toBe('udp to 10.96.0.10:53 answered by 10.244.1.5');
    expect(describeFilter(idx.staleFilter(dead(DNS.lbIP, 53))!)).toBe('udp to 203.0.113.10:53 answered by 10.244.1.5');
    expect(describeFilter(idx.staleFilter(dead(NODE_IP, DNS.nodePort))!)).toBe(`udp to ${NODE_IP}:30053 answered by 10.244.1.5`);
    // 10.244.1.5 serves syslog: its flows to syslog are fine.
    expect(idx.staleFilter(natFlow({ client: '10.0.0.2', clientPort: 1, vip: '10.96.0.20', port: 514, endpoint: '10.244.1.5' }))).toBeNull();
    expect(idx.staleFilter(natFlow({ client: '10.0.0.2', clientPort: 1, vip: DNS.clusterIP, port: 53, endpoint: '10.244.2.6' }))).toBeNull();
    // Another port of the cluster IP is not this service port.
    expect(idx.staleFilter(dead(DNS.clusterIP, 54))).toBeNull();
    // An entry made while there was no endpoint (no DNAT) to the VIP is stale; to a node port it may be anyone's.
    expect(describeFilter(idx.staleFilter(plainFlow({ client: '10.0.0.2', clientPort: 1, dst: DNS.clusterIP, port: 53 }))!)).toBe('udp to 10.96.0.10:53 answered by 10.96.0.10');
    expect(idx.staleFilter(plainFlow({ client: '10.0.0.2', clientPort: 1, dst: '198.51.100.7', port: DNS.nodePort }))).toBeNull();
    expect(idx.staleFilter({ ...dead(DNS.clusterIP, 53), protocol: 'tcp' })).toBeNull();
  });

  it('leaves services without a serving endpoint out', () => {
    const idx = index(syslogSlice('10.244.1.5'));
    expect(idx.size).toBe(1);
    expect(idx.staleFilter(natFlow({ client: '10.0.0.2', clientPort: 1, vip: DNS.clusterIP, port: 53, endpoint: '10.244.9.9' }))).toBeNull();
  });
});

describe('FilterMatcher', () => {
  it('finds every filter a flow matches, whatever fields each names', () => {
    const m = new FilterMatcher<string>();
    m.add({ family: 'IPv4', protocol: 'udp', origDst: DNS.clusterIP, origDstPort: 53, replySrc: '10.244.1.5' }, 'vip+port+ep');
    m.add({ family: 'IPv4', protocol: 'udp', origDstPort: DNS.nodePort, replySrc: '10.244.1.5' }, 'nodeport+ep');
    m.add({ family: 'IPv4', protocol: 'udp', origDst: DNS.clusterIP }, 'vip');
    m.add({ family: 'IPv4', protocol: 'sctp', origDst: DNS.clusterIP }, 'sctp vip');
    const hits = (flow: ReturnType<typeof natFlow>) => {
      const out: string[] = [];
      m.match(flow, (v) => out.push(v));
      return out.sort();
    };
    expect(hits(natFlow({ client: '10.0.0.2', clientPort: 1, vip: DNS.clusterIP, port: 53, endpoint: '10.244.1.5' }))).toEqual(['vip', 'vip+port+ep']);
    expect(hits(natFlow({ client: '10.0.0.2', clientPort: 1, vip: DNS.clusterIP, port: 53, endpoint: '10.244.2.6' }))).toEqual(['vip']);
    expect(hits(natFlow({ client: '10.0.0.2', clientPort: 1, vip: NODE_IP, port: DNS.nodePort, endpoint: '10.244.1.5' }))).toEqual(['nodeport+ep']);
    expect(hits(natFlow({ protocol: 'tcp', client: '10.0.0.2', clientPort: 1, vip: DNS.clusterIP, port: 53, endpoint: '10.244.1.5' }))).toEqual([]);
    expect(hits(natFlow({ protocol: 'sctp', client: '10.0.0.2', clientPort: 1, vip: DNS.clusterIP, port: 53, endpoint: '10.244.1.5' }))).toEqual(['sctp vip']);
  });
});

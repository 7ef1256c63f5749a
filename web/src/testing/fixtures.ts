import type { Overview, PortDetail, RealServerFacts, RuleView, ServiceDetail, ServiceSummary, SyncEntry } from '../lib/protocol.ts';

/** Builders for the web tests: small, valid protocol objects a test bends to its case. */

export function summary(key: string, over: Partial<ServiceSummary> = {}): ServiceSummary {
  const [namespace, name] = key.split('/');
  const clusterIP = over.clusterIP ?? over.clusterIPs?.[0] ?? '10.96.0.10';
  const clusterIPs = over.clusterIPs ?? [clusterIP];
  return {
    key,
    namespace,
    name,
    type: 'ClusterIP',
    clusterIP,
    clusterIPs,
    families: clusterIPs.map((ip) => (ip.includes(':') ? 'IPv6' : 'IPv4')),
    ports: ['80/TCP'],
    ips: [],
    endpoints: { total: 2, ready: 2, serving: 2, terminating: 0, local: 1 },
    warnings: [],
    ...over,
  };
}

export function sync(seq: number, over: Partial<SyncEntry> = {}): SyncEntry {
  return {
    seq,
    family: 'IPv4',
    trigger: 'change',
    startedAt: 1_000_000 + seq * 1000,
    finishedAt: 1_000_000 + seq * 1000 + 20,
    full: false,
    ok: true,
    durationMs: 20,
    buildMs: 8,
    applyMs: 12,
    linesWritten: 40,
    bytesWritten: 2000,
    servicesChanged: 1,
    changed: ['shop/web'],
    servicePorts: 3,
    endpoints: 6,
    programmingMs: 250,
    ...over,
  };
}

export function overview(over: Partial<Overview> = {}): Overview {
  return {
    node: 'node-a',
    mode: 'iptables',
    backend: 'iptables (nft)',
    version: '0.1.0',
    startedAt: 1_000_000,
    now: 1_060_000,
    source: { kind: 'file', description: 'file:deploy/examples/', synced: true, objects: 20 },
    health: { healthy: true, lastUpdated: 1_050_000, nodeEligible: true, ready: true, readyReason: null },
    paused: false,
    counts: { services: 2, servicePorts: 3, endpoints: 6, localEndpoints: 2, rulesByTable: { filter: 4, nat: 40 }, noEndpoints: 0, noLocalEndpoints: 0, invalid: 0 },
    conntrack: { count: 1200, max: 262144, readAt: 1_059_000 },
    kernel: { kind: 'iptables', simulated: false, readAt: 1_058_000, readMs: 30, rules: 44, chains: 20, driftCount: 0 },
    stream: { clients: 1, slowClientsDropped: 0, lastSnapshotBytes: 4000, lastSnapshotMs: 1.5, refusedSignIns: 0, refusedRequests: 0 },
    syncPeriodMs: 30_000,
    nodeIPs: ['10.0.0.10'],
    memory: { rssBytes: 96 * 1024 * 1024, heapUsedBytes: 30 * 1024 * 1024, heapTotalBytes: 40 * 1024 * 1024 },
    ...over,
  };
}

/** webPort is shop/web:https: a load balancer with source ranges, two endpoints, one terminating. */
export function webPort(over: Partial<PortDetail> = {}): PortDetail {
  return {
    id: 'shop/web:https/TCP',
    portName: 'https',
    protocol: 'TCP',
    port: 443,
    nodePort: 30443,
    clusterIP: '10.96.10.30',
    externalIPs: [],
    loadBalancerIPs: ['192.0.2.10'],
    sourceRanges: ['203.0.113.0/24'],
    affinitySeconds: 0,
    externalPolicy: 'Cluster',
    internalPolicy: 'Cluster',
    healthCheckNodePort: 0,
    topologyMode: '',
    endpoints: [
      {
        key: '10.244.0.31:8443',
        ip: '10.244.0.31',
        port: 8443,
        ready: true,
        serving: true,
        terminating: false,
        local: true,
        node: 'node-a',
        zone: 'z1',
        clusterShare: 0.5,
        localShare: null,
        object: 'KUBE-SEP-AAAA',
      },
      {
        key: '10.244.1.32:8443',
        ip: '10.244.1.32',
        port: 8443,
        ready: true,
        serving: true,
        terminating: false,
        local: false,
        node: 'node-b',
        zone: 'z2',
        clusterShare: 0.5,
        localShare: null,
        object: 'KUBE-SEP-BBBB',
      },
      {
        key: '10.244.1.33:8443',
        ip: '10.244.1.33',
        port: 8443,
        ready: false,
        serving: true,
        terminating: true,
        local: false,
        node: 'node-b',
        zone: 'z2',
        clusterShare: null,
        localShare: null,
        object: null,
      },
    ],
    flows: [
      { kind: 'clusterIP', address: '10.96.10.30:443/TCP', path: ['KUBE-SERVICES', 'KUBE-SVC-WEB'], policy: 'Cluster', outcome: 'endpoints' },
      { kind: 'nodePort', address: 'node:30443/TCP', path: ['KUBE-SERVICES', 'KUBE-NODEPORTS', 'KUBE-EXT-WEB', 'KUBE-SVC-WEB'], policy: 'Cluster', outcome: 'endpoints' },
      {
        kind: 'loadBalancerIP',
        address: '192.0.2.10:443/TCP',
        path: ['KUBE-SERVICES', 'KUBE-FW-WEB', 'KUBE-EXT-WEB', 'KUBE-SVC-WEB'],
        policy: 'Cluster',
        outcome: 'endpoints',
        note: 'only from 203.0.113.0/24',
      },
    ],
    chains: [
      {
        table: 'nat',
        name: 'KUBE-SERVICES',
        role: 'entry',
        from: 'kernel',
        packets: 0,
        bytes: 0,
        rules: [{ text: '-m comment --comment "shop/web:https cluster IP" -j KUBE-SVC-WEB', target: 'KUBE-SVC-WEB', packets: 5, bytes: 300 }],
      },
      {
        table: 'nat',
        name: 'KUBE-SVC-WEB',
        role: 'service',
        from: 'kernel',
        packets: 0,
        bytes: 0,
        rules: [
          { text: '-m statistic --mode random --probability 0.5 -j KUBE-SEP-AAAA', target: 'KUBE-SEP-AAAA', packets: 3, bytes: 180 },
          { text: '-j KUBE-SEP-BBBB', target: 'KUBE-SEP-BBBB', packets: 2, bytes: 120 },
        ],
      },
      {
        table: 'nat',
        name: 'KUBE-SEP-AAAA',
        role: 'endpoint',
        from: 'kernel',
        packets: 0,
        bytes: 0,
        rules: [{ text: '-j DNAT --to-destination 10.244.0.31:8443', target: 'DNAT', packets: 3, bytes: 180 }],
      },
    ],
    ...over,
  };
}

export function detail(over: Partial<ServiceDetail> = {}): ServiceDetail {
  return { summary: summary('shop/web', { type: 'LoadBalancer', clusterIP: '10.96.10.30', ports: ['443/TCP:30443'], ips: ['192.0.2.10'] }), ports: [webPort()], kernelReadAt: 1_058_000, ...over };
}

const NO_TRAFFIC = { conns: 0, inPackets: 0, outPackets: 0, inBytes: 0, outBytes: 0, rate: null };

/** realServer is one IPVS real server's rule (weight 1, Masq) a test bends to its case. */
export function realServer(key: string, over: Partial<RealServerFacts> = {}): RuleView {
  const [address, port] = key.split(':');
  const facts: RealServerFacts = { address, port: Number(port), forward: 'Masq', weight: 1, active: 0, inactive: 0, draining: false, ...NO_TRAFFIC, ...over };
  return { text: `-> ${key} Masq weight ${facts.weight}`, target: null, packets: facts.inPackets + facts.outPackets, bytes: facts.inBytes + facts.outBytes, ipvs: facts };
}

/**
 * ipvsPort is shop/web:https in IPVS mode: cluster IP and LB IP virtual servers, two real
 * servers at weight 1 and one draining at weight 0 (its endpoint is terminating), its set members
 * and one glue rule.
 */
export function ipvsPort(over: Partial<PortDetail> = {}): PortDetail {
  const vsFacts = (address: string, port: number) => ({
    protocol: 'TCP',
    address,
    port,
    scheduler: 'rr',
    persistence: 0,
    flags: [],
    active: 5,
    inactive: 9,
    ...NO_TRAFFIC,
    conns: 120,
    rate: { conns: 2, packets: 40, bytes: 9000 },
  });
  const reals = [
    realServer('10.244.0.31:8443', { active: 3, inactive: 4, conns: 70, rate: { conns: 1.5, packets: 30, bytes: 7000 } }),
    realServer('10.244.1.32:8443', { active: 2, inactive: 5, conns: 50 }),
    realServer('10.244.1.33:8443', { weight: 0, draining: true, drainingSince: 1_000_000, active: 1 }),
  ];
  const base = webPort();
  return {
    ...base,
    endpoints: base.endpoints.map((e) => ({ ...e, object: e.clusterShare !== null ? 'TCP 10.96.10.30:443' : null })),
    flows: [
      { kind: 'clusterIP', address: '10.96.10.30:443/TCP', path: ['KUBE-SERVICES', 'KUBE-CLUSTER-IP', 'TCP 10.96.10.30:443'], policy: 'Cluster', outcome: 'endpoints' },
      {
        kind: 'loadBalancerIP',
        address: '192.0.2.10:443/TCP',
        path: ['KUBE-SERVICES', 'KUBE-LOAD-BALANCER', 'KUBE-SOURCE-RANGES-FIREWALL', 'TCP 192.0.2.10:443'],
        policy: 'Cluster',
        outcome: 'endpoints',
        note: 'only from 203.0.113.0/24',
      },
    ],
    chains: [
      { table: 'ipsets', name: 'KUBE-CLUSTER-IP', role: 'entry', from: 'kernel', packets: 0, bytes: 0, rules: [{ text: '10.96.10.30,tcp:443', target: null, packets: 0, bytes: 0 }] },
      { table: 'ipsets', name: 'KUBE-LOAD-BALANCER', role: 'entry', from: 'kernel', packets: 0, bytes: 0, rules: [{ text: '192.0.2.10,tcp:443', target: null, packets: 0, bytes: 0 }] },
      {
        table: 'nat',
        name: 'KUBE-SERVICES',
        role: 'entry',
        from: 'kernel',
        packets: 0,
        bytes: 0,
        rules: [{ text: '-m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT', target: 'ACCEPT', packets: 12, bytes: 720 }],
      },
      { table: 'nat', name: 'KUBE-LOAD-BALANCER', role: 'entry', from: 'kernel', packets: 0, bytes: 0, rules: [{ text: '-j KUBE-MARK-MASQ', target: 'KUBE-MARK-MASQ', packets: 3, bytes: 180 }] },
      { table: 'ipvs', name: 'TCP 10.96.10.30:443', role: 'cluster-ip', from: 'kernel', packets: 0, bytes: 0, rules: reals, ipvs: vsFacts('10.96.10.30', 443) },
      { table: 'ipvs', name: 'TCP 192.0.2.10:443', role: 'load-balancer-ip', from: 'kernel', packets: 0, bytes: 0, rules: reals.slice(0, 2), ipvs: vsFacts('192.0.2.10', 443) },
    ],
    ...over,
  };
}

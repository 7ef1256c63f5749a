import { FakeClock } from '../../clock-fake.ts';
import { natFlow, plainFlow, type SimulatedFlow } from '../../kernel/conntrack-simulated.ts';
import type { BackendSyncResult } from '../backend.ts';
import type { EndpointSlice, Service } from '../kube-objects.ts';
import { ProxyState } from '../proxy-state.ts';
import type { SyncRecord } from '../sync-loop.ts';
import { ep, makeService, makeSlice } from '../testing.ts';

/**
 * A small cluster for the conntrack tests: "dns" is a UDP LoadBalancer reached
 * on its cluster IP, an external IP, an LB IP and a node port; "syslog" is a
 * second UDP service sharing an endpoint address with dns; "web" is TCP.
 */
export const DNS = { clusterIP: '10.96.0.10', externalIP: '192.0.2.10', lbIP: '203.0.113.10', port: 53, nodePort: 30053, targetPort: 5353 };
export const SYSLOG = { clusterIP: '10.96.0.20', port: 514 };
export const NODE_IP = '172.18.0.2';

export function dnsService(): Service {
  return makeService(
    'kube-system',
    'dns',
    { type: 'LoadBalancer', clusterIP: DNS.clusterIP, externalIPs: [DNS.externalIP], ports: [{ name: 'dns', port: DNS.port, protocol: 'UDP', nodePort: DNS.nodePort }] },
    { status: { loadBalancer: { ingress: [{ ip: DNS.lbIP }] } } },
  );
}

export function dnsSlice(...ips: (string | ReturnType<typeof ep>)[]): EndpointSlice {
  return makeSlice(
    'kube-system',
    'dns',
    'dns-1',
    ips.map((x) => (typeof x === 'string' ? ep(x) : x)),
    [{ name: 'dns', port: DNS.targetPort, protocol: 'UDP' }],
  );
}

export function syslogService(): Service {
  return makeService('logging', 'syslog', { clusterIP: SYSLOG.clusterIP, ports: [{ name: 'syslog', port: SYSLOG.port, protocol: 'UDP' }] });
}

export function syslogSlice(...ips: string[]): EndpointSlice {
  return makeSlice(
    'logging',
    'syslog',
    'syslog-1',
    ips.map((ip) => ep(ip)),
    [{ name: 'syslog', port: SYSLOG.port, protocol: 'UDP' }],
  );
}

/** dnsFlows are one client flow through each frontend of dns, DNATed to endpoint. */
export function dnsFlows(endpoint: string, clientPortBase = 40000): SimulatedFlow[] {
  const via = (vip: string, port: number, i: number) => natFlow({ client: '10.0.0.2', clientPort: clientPortBase + i, vip, port, endpoint, targetPort: DNS.targetPort });
  return [via(DNS.clusterIP, DNS.port, 0), via(DNS.externalIP, DNS.port, 1), via(DNS.lbIP, DNS.port, 2), via(NODE_IP, DNS.nodePort, 3)];
}

/** blackholeFlows are the unNATed entries a client leaves while dns has no endpoint. */
export function blackholeFlows(): SimulatedFlow[] {
  return [plainFlow({ client: '10.0.0.2', clientPort: 41000, dst: DNS.clusterIP, port: DNS.port }), plainFlow({ client: '10.0.0.2', clientPort: 41001, dst: NODE_IP, port: DNS.nodePort })];
}

export function newState(clock = new FakeClock()): ProxyState {
  const state = new ProxyState({ family: 'IPv4', nodeName: 'node-a', clock });
  state.onSynced('Service');
  state.onSynced('EndpointSlice');
  return state;
}

/** syncRecord is a minimal record of a sync that succeeded (or failed). */
export function syncRecord(ok = true, seq = 1): SyncRecord {
  return {
    family: 'IPv4',
    seq,
    trigger: 'change',
    startedAt: 0,
    finishedAt: 0,
    full: false,
    ok,
    durationMs: 1,
    buildMs: 0,
    applyMs: 0,
    linesWritten: 0,
    bytesWritten: 0,
    servicesWritten: 0,
    servicesChanged: [],
    servicesChangedCount: 0,
    servicePorts: 0,
    endpoints: 0,
    rulesByTable: {},
    networkProgrammingMs: [],
    consecutiveFailures: ok ? 0 : 1,
    ...(ok ? {} : { error: { code: 'KPROXY_ERR_SYNC_FAILED', message: 'restore failed' } }),
  };
}

export const NO_RESULT: BackendSyncResult = { full: false, buildMs: 0, applyMs: 0, linesWritten: 0, bytesWritten: 0, servicesWritten: 0, rulesByTable: {} };

/** brief renders the simulated table's flows as "vip:port>endpoint" for assertions. */
export function brief(flows: readonly SimulatedFlow[]): string[] {
  return flows.map((f) => `${f.protocol} ${f.orig.dst}:${f.orig.dport}>${f.reply.src}`).sort();
}

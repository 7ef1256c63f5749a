import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import type { IPFamily } from '../net/ip.ts';
import { sliceInfoFromEndpointSlice } from './endpoint-slice-cache.ts';
import type { EndpointSlice, KubeObject, Node, Service, ServiceCIDR } from './kube-objects.ts';
import { nodeInfoFromNode } from './node-info.ts';
import { serviceCIDRsOf } from './service-cidrs.ts';
import { servicePortsFromService } from './service-port.ts';
import { keptFields, type KeptKind } from './kept-fields.ts';
import { ProxyState } from './proxy-state.ts';

const ROOT = join(import.meta.dirname, '..', '..');

/** objectsOf reads every Service, EndpointSlice, Node and ServiceCIDR of the golden cases and the example cluster. */
function objectsOf(): KubeObject[] {
  const files = [
    ...readdirSync(join(ROOT, 'deploy', 'examples')).map((f) => join(ROOT, 'deploy', 'examples', f)),
    ...['iptables', 'nftables', 'ipvs'].flatMap((mode) => {
      const dir = join(ROOT, 'server', 'proxy', mode, 'testdata');
      return readdirSync(dir).map((c) => join(dir, c, 'input.yaml'));
    }),
  ];
  return files.flatMap((f) => parseAllDocuments(readFileSync(f, 'utf8')).map((d) => d.toJS() as KubeObject));
}

/** outcome is what the trackers make of an object: the converted value, or the error that refuses it. */
function outcome(f: () => unknown): unknown {
  try {
    return { value: f() };
  } catch (err) {
    return { error: (err as Error).message };
  }
}

/** read runs every converter kproxy has for a kind, for both families. */
function read(kind: KeptKind, o: KubeObject): unknown {
  const families: IPFamily[] = ['IPv4', 'IPv6'];
  switch (kind) {
    case 'Service':
      return families.map((f) => outcome(() => servicePortsFromService(o as Service, f)));
    case 'EndpointSlice':
      return families.map((f) => outcome(() => sliceInfoFromEndpointSlice(o as EndpointSlice, f)));
    case 'Node':
      return outcome(() => nodeInfoFromNode(o.metadata?.name ?? '', o as Node));
    case 'ServiceCIDR':
      return outcome(() => serviceCIDRsOf(o as ServiceCIDR));
  }
}

const KINDS: readonly string[] = ['Service', 'EndpointSlice', 'Node', 'ServiceCIDR'];

/**
 * FULL: one object of each kind with every field kproxy reads, so that each is
 * read and held to keptFields even where the golden cases and examples have
 * none (a headless or other proxy's Service, a Node being deleted, node hints).
 */
const FULL: KubeObject[] = [
  {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'web', namespace: 'shop', uid: 'u1', resourceVersion: '7', labels: { app: 'web' } },
    spec: {
      type: 'LoadBalancer',
      clusterIP: '10.96.0.10',
      clusterIPs: ['10.96.0.10', 'fd00:96::10'],
      ipFamilies: ['IPv4', 'IPv6'],
      ipFamilyPolicy: 'RequireDualStack',
      ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30080, targetPort: 8080 }],
      externalIPs: ['192.0.2.10', '2001:db8::10'],
      loadBalancerSourceRanges: ['192.0.2.0/24', '2001:db8::/64'],
      externalTrafficPolicy: 'Local',
      internalTrafficPolicy: 'Cluster',
      healthCheckNodePort: 30256,
      sessionAffinity: 'ClientIP',
      sessionAffinityConfig: { clientIP: { timeoutSeconds: 600 } },
      trafficDistribution: 'PreferClose',
    },
    status: {
      loadBalancer: {
        ingress: [
          { ip: '198.51.100.10', ipMode: 'VIP' },
          { ip: '2001:db8:1::10', ipMode: 'Proxy' },
        ],
      },
    },
  } as Service,
  {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'headless', namespace: 'shop', labels: { 'service.kubernetes.io/headless': '' } },
    spec: { clusterIP: '10.96.0.11', ports: [{ port: 80 }] },
  } as Service,
  {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'other', namespace: 'shop', labels: { 'service.kubernetes.io/service-proxy-name': 'other' } },
    spec: { clusterIP: '10.96.0.12', ports: [{ port: 80 }] },
  } as Service,
  {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: 'web-1', namespace: 'shop', labels: { 'kubernetes.io/service-name': 'web' }, annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': '2024-01-01T00:00:00Z' } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: [
      {
        addresses: ['10.244.1.1'],
        conditions: { ready: true, serving: true, terminating: false },
        nodeName: 'node-a',
        zone: 'z1',
        hints: { forZones: [{ name: 'z1' }], forNodes: [{ name: 'node-a' }] },
      },
      {
        addresses: ['10.244.2.1'],
        conditions: { ready: false, serving: true, terminating: true },
        nodeName: 'node-b',
        zone: 'z2',
        hints: { forZones: [{ name: 'z2' }], forNodes: [{ name: 'node-b' }] },
      },
    ],
  } as EndpointSlice,
  {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: 'node-a', deletionTimestamp: '2024-01-01T00:00:00Z', labels: { 'topology.kubernetes.io/zone': 'z1' } },
    spec: { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24', 'fd00:244:1::/64'], taints: [{ key: 'ToBeDeletedByClusterAutoscaler', effect: 'NoSchedule' }] },
    status: {
      addresses: [
        { type: 'InternalIP', address: '192.168.1.20' },
        { type: 'InternalIP', address: 'fd00::20' },
        { type: 'Hostname', address: 'node-a' },
      ],
    },
  } as Node,
  { apiVersion: 'networking.k8s.io/v1', kind: 'ServiceCIDR', metadata: { name: 'kubernetes' }, spec: { cidrs: ['10.96.0.0/16', 'fd00:96::/112'] } } as ServiceCIDR,
];

/** A field's path: its names from the object down, "[]" for any element of a list. */
type FieldPath = readonly string[];

/**
 * recorded wraps a value so that every field read through it (at any depth)
 * adds its path to `reads`. A list's own machinery (length, map…) and
 * inherited members are not fields.
 */
function recorded(value: unknown, path: FieldPath, reads: Map<string, FieldPath>): unknown {
  if (typeof value !== 'object' || value === null) return value;
  return new Proxy(value, {
    get(target, key, receiver) {
      const v: unknown = Reflect.get(target, key, receiver);
      if (typeof key === 'symbol') return v;
      if (Array.isArray(target)) return /^\d+$/.test(key) ? recorded(v, [...path, '[]'], reads) : v;
      if (!Object.hasOwn(target, key) && key in target) return v;
      const p = [...path, key];
      reads.set(JSON.stringify(p), p);
      return recorded(v, p, reads);
    },
  });
}

/**
 * fieldsRead is every field of an object kproxy reads: the object goes,
 * recorded, to a ProxyState of each family as a source delivers it (the
 * trackers validate and convert it there), and each state is checked out.
 */
function fieldsRead(o: KubeObject): FieldPath[] {
  const reads = new Map<string, FieldPath>();
  for (const family of ['IPv4', 'IPv6'] as const) {
    const state = new ProxyState({ family, nodeName: o.kind === 'Node' ? (o.metadata?.name ?? '') : 'node-a', clock: new FakeClock() });
    const seen = recorded(structuredClone(o), [], reads);
    if (o.kind === 'Service') state.onService(null, seen as Service);
    else if (o.kind === 'EndpointSlice') state.onEndpointSlice(null, seen as EndpointSlice);
    else if (o.kind === 'Node') state.onNode(null, seen as Node);
    else if (o.kind === 'ServiceCIDR') state.onServiceCIDR(null, seen as ServiceCIDR);
    for (const kind of ['Service', 'EndpointSlice', 'Node'] as const) state.onSynced(kind);
    state.checkout();
  }
  return [...reads.values()];
}

/** valuesAt lists the values an object holds at a path (every element of a list at "[]"), undefined ones left out. */
function valuesAt(v: unknown, path: FieldPath): unknown[] {
  if (path.length === 0) return v === undefined ? [] : [v];
  const [head, ...rest] = path;
  if (head === '[]') return Array.isArray(v) ? v.flatMap((e) => valuesAt(e, rest)) : [];
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? valuesAt((v as Record<string, unknown>)[head], rest) : [];
}

describe('keptFields', () => {
  it('keeps all the trackers read: every golden case and example object converts the same, kept or whole', () => {
    const objects = objectsOf().filter((o) => KINDS.includes(o.kind ?? ''));
    expect(objects.length).toBeGreaterThan(100);
    for (const o of objects) {
      const kind = o.kind as KeptKind;
      expect(read(kind, keptFields(kind, structuredClone(o))), `${kind} ${o.metadata?.namespace}/${o.metadata?.name}`).toEqual(read(kind, o));
    }
  });

  it('keeps every field the trackers read, with its value: a field read but not kept fails here by name', () => {
    const objects = [...objectsOf().filter((o) => KINDS.includes(o.kind ?? '')), ...FULL];
    const lost: string[] = [];
    const held = new Set<string>();
    const read = new Set<string>();
    for (const o of objects) {
      const kind = o.kind as KeptKind;
      const kept = keptFields(kind, structuredClone(o));
      const paths = fieldsRead(o);
      // The fields read last on their way down: a metadata whose name is read is not read whole.
      const leaves = paths.filter((p) => !paths.some((q) => q.length > p.length && p.every((name, i) => q[i] === name)));
      for (const path of paths) if (valuesAt(o, path).length) held.add(`${kind} ${path.join('.')}`);
      for (const path of leaves) {
        const field = `${kind} ${path.join('.')}`;
        read.add(field);
        const whole = valuesAt(o, path);
        if (whole.length && JSON.stringify(valuesAt(kept, path)) !== JSON.stringify(whole)) lost.push(`${field} (${o.metadata?.namespace ?? ''}/${o.metadata?.name})`);
      }
    }
    expect(lost, 'read by the trackers but not kept by keptFields').toEqual([]);
    // A field read that no object here holds cannot be held to keptFields: give FULL one.
    expect(
      [...read].filter((f) => !held.has(f)),
      'read by the trackers, but in no object of this test',
    ).toEqual([]);
    expect(read.size).toBeGreaterThan(50);
  });

  it('keeps bad values as they are, so the trackers refuse the kept object with the same words', () => {
    const slice = (extra: Record<string, unknown>) => ({
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: 's', namespace: 'ns', labels: { 'kubernetes.io/service-name': 'web' } },
      addressType: 'IPv4',
      ...extra,
    });
    const service = (spec: unknown) => ({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'ns' }, spec });
    const cases: [KeptKind, unknown][] = [
      ['EndpointSlice', slice({ endpoints: 'all' })],
      ['EndpointSlice', slice({ endpoints: [null, 7] })],
      ['EndpointSlice', slice({ endpoints: [{ addresses: ['10.0.0.1'], conditions: { ready: 'yes' } }] })],
      ['EndpointSlice', slice({ endpoints: [{ addresses: ['10.0.0.1'], conditions: { ready: true, serving: 'no' } }] })],
      ['EndpointSlice', slice({ endpoints: [{ addresses: '10.0.0.1' }] })],
      ['EndpointSlice', slice({ endpoints: [{ addresses: ['10.0.0.1'], nodeName: 42 }] })],
      ['EndpointSlice', slice({ ports: [{ name: 'BAD', port: 80 }] })],
      ['EndpointSlice', slice({ ports: { name: 'http' } })],
      ['EndpointSlice', slice({ addressType: 'IPv7' })],
      ['EndpointSlice', { ...slice({}), metadata: { name: 's', namespace: 'ns', labels: 'web' } }],
      ['EndpointSlice', { ...slice({}), metadata: 'ns/s' }],
      ['Service', service({ clusterIP: '10.96.0.1', ports: [{ port: 70000 }] })],
      ['Service', service({ clusterIP: '10.96.0.1', ports: 'http' })],
      ['Service', service({ clusterIP: 'x', ports: [{ port: 80 }] })],
      ['Service', service({ clusterIP: '10.96.0.1', ports: [{ port: 80 }], sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: -1 } } })],
      ['Service', service('none')],
      ['Service', { ...service({ clusterIP: '10.96.0.1', type: 'LoadBalancer', ports: [{ port: 80 }] }), status: { loadBalancer: { ingress: { ip: '1.2.3.4' } } } }],
      ['Service', 'not an object'],
    ];
    for (const [kind, o] of cases) {
      const whole = read(kind, o as KubeObject);
      expect(JSON.stringify(whole), JSON.stringify(o)).toContain('error');
      expect(read(kind, keptFields(kind, structuredClone(o))), JSON.stringify(o)).toEqual(whole);
    }
  });

  it('drops what kproxy never reads: managed fields, other labels and annotations, selectors, targetRefs, hostnames', () => {
    const svc = keptFields('Service', {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: {
        name: 'web',
        namespace: 'shop',
        uid: 'u1',
        resourceVersion: '7',
        labels: { app: 'web', 'service.kubernetes.io/headless': '' },
        annotations: { 'kubectl.kubernetes.io/last-applied-configuration': '{}' },
        managedFields: [{ manager: 'kubectl' }],
      },
      spec: { clusterIP: '10.96.0.1', selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }] },
    });
    expect(svc).toEqual({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'web', namespace: 'shop', uid: 'u1', resourceVersion: '7', labels: { 'service.kubernetes.io/headless': '' } },
      spec: { clusterIP: '10.96.0.1', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] },
    });
    const slice = keptFields('EndpointSlice', {
      metadata: {
        name: 'web-1',
        namespace: 'shop',
        labels: { 'kubernetes.io/service-name': 'web', 'endpointslice.kubernetes.io/managed-by': 'x' },
        annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': '2024-01-01T00:00:00Z', other: 'x' },
        ownerReferences: [{ kind: 'Service' }],
      },
      addressType: 'IPv4',
      endpoints: [{ addresses: ['10.0.0.1'], hostname: 'pod-1', nodeName: 'n1', targetRef: { kind: 'Pod', name: 'pod-1' }, conditions: { ready: true, serving: true, terminating: false } }],
    });
    expect(slice).toEqual({
      metadata: {
        name: 'web-1',
        namespace: 'shop',
        labels: { 'kubernetes.io/service-name': 'web' },
        annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': '2024-01-01T00:00:00Z' },
      },
      addressType: 'IPv4',
      endpoints: [{ addresses: ['10.0.0.1'], nodeName: 'n1', conditions: { ready: true, serving: true, terminating: false } }],
    });
  });

  it('shares the common endpoint conditions between endpoints (one frozen object)', () => {
    const ep = (ip: string) => ({ addresses: [ip], nodeName: 'node-1', conditions: { ready: true, serving: true, terminating: false } });
    const a = keptFields('EndpointSlice', { endpoints: [ep('10.0.0.1')] }) as EndpointSlice;
    const b = keptFields('EndpointSlice', JSON.parse(JSON.stringify({ endpoints: [ep('10.0.0.2')] }))) as EndpointSlice;
    expect(a.endpoints![0].conditions).toBe(b.endpoints![0].conditions);
    expect(Object.isFrozen(a.endpoints![0].conditions)).toBe(true);
  });
});

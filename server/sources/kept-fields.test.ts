import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import type { IPFamily } from '../net/ip.ts';
import { sliceInfoFromEndpointSlice } from '../proxy/endpoint-slice-cache.ts';
import type { EndpointSlice, KubeObject, Node, Service, ServiceCIDR } from '../proxy/kube-objects.ts';
import { nodeInfoFromNode } from '../proxy/node-info.ts';
import { serviceCIDRsOf } from '../proxy/service-cidrs.ts';
import { servicePortsFromService } from '../proxy/service-port.ts';
import { keptFields, type KeptKind } from './kept-fields.ts';

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

describe('keptFields', () => {
  it('keeps all the trackers read: every golden case and example object converts the same, kept or whole', () => {
    const objects = objectsOf().filter((o) => KINDS.includes(o.kind ?? ''));
    expect(objects.length).toBeGreaterThan(100);
    for (const o of objects) {
      const kind = o.kind as KeptKind;
      expect(read(kind, keptFields(kind, structuredClone(o))), `${kind} ${o.metadata?.namespace}/${o.metadata?.name}`).toEqual(read(kind, o));
    }
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

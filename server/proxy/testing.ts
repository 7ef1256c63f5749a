import { FakeClock } from '../clock-fake.ts';
import type { IPFamily } from '../net/ip.ts';
import { parseManifest } from '../sources/file/manifest.ts';
import type { EndpointSlice, Node, Service, SliceEndpoint } from './kube-objects.ts';
import { ProxyState } from './proxy-state.ts';

/**
 * Builders for tests: small valid objects that a test then bends into the case
 * it needs. Kept in one place so every suite speaks about the same cluster.
 */
export function makeService(ns: string, name: string, spec: NonNullable<Service['spec']> = {}, extra: Partial<Service> = {}): Service {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: ns, ...(extra.metadata ?? {}) },
    spec: { type: 'ClusterIP', clusterIP: '10.96.0.1', ports: [{ name: 'p80', port: 80, protocol: 'TCP' }], ...spec },
    ...(extra.status ? { status: extra.status } : {}),
  };
}

export function makeSlice(
  ns: string,
  service: string,
  sliceName: string,
  endpoints: SliceEndpoint[],
  ports: EndpointSlice['ports'] = [{ name: 'p80', port: 80, protocol: 'TCP' }],
  annotations: Record<string, string> = {},
): EndpointSlice {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: sliceName, namespace: ns, labels: { 'kubernetes.io/service-name': service }, annotations },
    addressType: 'IPv4',
    ports,
    endpoints,
  };
}

export function ep(ip: string, opts: Partial<SliceEndpoint> & { ready?: boolean; serving?: boolean; terminating?: boolean } = {}): SliceEndpoint {
  const { ready, serving, terminating, ...rest } = opts;
  return {
    addresses: [ip],
    conditions: { ready: ready ?? true, serving: serving ?? ready ?? true, terminating: terminating ?? false },
    ...rest,
  };
}

/** stateFromObjects feeds objects to a fresh ProxyState and marks the sources synced. */
export function stateFromObjects(nodeName: string, objects: readonly (Service | EndpointSlice | Node)[], clock = new FakeClock(), family: IPFamily = 'IPv4'): ProxyState {
  const state = new ProxyState({ family, nodeName, clock });
  for (const o of objects) {
    if (o.kind === 'Service') state.onService(null, o as Service);
    else if (o.kind === 'EndpointSlice') state.onEndpointSlice(null, o as EndpointSlice);
    else if (o.kind === 'Node') state.onNode(null, o as Node);
  }
  state.onSynced('Service');
  state.onSynced('EndpointSlice');
  state.onSynced('Node');
  return state;
}

/**
 * objectsFromYaml reads multi-document manifests: a golden case's input.yaml,
 * whose `kind: GoldenOptions` document (the case's settings, no Kubernetes
 * object) is read as a comment, so the file source's rules apply to the rest.
 */
export function objectsFromYaml(file: string, text: string): (Service | EndpointSlice | Node)[] {
  return parseManifest(file, withoutGoldenOptions(text)).objects.map((o) => o.object as Service | EndpointSlice | Node);
}

/** withoutGoldenOptions turns the lines of `kind: GoldenOptions` documents into comments, every other line kept where it was. */
function withoutGoldenOptions(text: string): string {
  const docs = text.split(/^(?=---[ \t]*(?:#.*)?$)/m);
  return docs.map((d) => (/^kind: GoldenOptions[ \t]*$/m.test(d) ? d.replace(/^(?!---)/gm, '# ') : d)).join('');
}

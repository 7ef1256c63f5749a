/**
 * list-decode times the decoding of listed objects in process: the list
 * bodies the API server sends for a synthetic cluster's Services and
 * EndpointSlices (with the uid, resourceVersion and creationTimestamp a
 * server adds), decoded the way the Kubernetes source decodes them (plain
 * JSON, page by page, each object through keptFields: api-request.ts) and the
 * way client-node's generated list calls do (the whole list JSON.parse'd, then
 * ObjectSerializer into its model classes). Best of three runs each, a full GC
 * before each when --expose-gc is given. Prints one JSON line (ListDecode):
 *   node test/bench/list-decode.ts [SERVICES] [ENDPOINTS]
 */
import { ObjectSerializer } from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
import { LIST_PAGE } from '../../server/sources/k8s/api-request.ts';
import { keptFields } from '../../server/proxy/kept-fields.ts';
import type { KubeObject } from '../../server/proxy/kube-objects.ts';
import { generateCluster } from './cluster.ts';
import type { ListDecode } from './results.ts';

const [services = '10000', endpoints = '2'] = process.argv.slice(2);
const c = generateCluster({ services: Number(services), endpointsPerService: Number(endpoints), nodeName: 'bench-node', nodeIP: '10.250.0.2' });

let rv = 1000;
/** served: an object as a list item from the API server (no kind or apiVersion, server-set metadata added). */
function served(o: KubeObject): KubeObject {
  const { kind: _k, apiVersion: _a, ...rest } = o;
  return { ...rest, metadata: { ...o.metadata, uid: `0b1c${String(rv).padStart(8, '0')}-7d2e-4f60-9a1b-2c3d4e5f6a7b`, resourceVersion: String(++rv), creationTimestamp: '2024-06-11T08:00:00Z' } };
}

/** pages: the list bodies as the server sends them, LIST_PAGE items each (the continue token in all but the last). */
function pages(kind: string, apiVersion: string, items: KubeObject[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < items.length; i += LIST_PAGE) {
    const last = i + LIST_PAGE >= items.length;
    out.push(JSON.stringify({ kind, apiVersion, metadata: { resourceVersion: String(rv), ...(last ? {} : { continue: `page-${i}` }) }, items: items.slice(i, i + LIST_PAGE) }));
  }
  return out;
}

const svcItems = c.services.map(served);
const sliceItems = c.slices.map(served);
const lists = [
  {
    kind: 'Service' as const,
    type: 'V1ServiceList',
    pages: pages('ServiceList', 'v1', svcItems),
    whole: JSON.stringify({ kind: 'ServiceList', apiVersion: 'v1', metadata: { resourceVersion: String(rv) }, items: svcItems }),
  },
  {
    kind: 'EndpointSlice' as const,
    type: 'V1EndpointSliceList',
    pages: pages('EndpointSliceList', 'discovery.k8s.io/v1', sliceItems),
    whole: JSON.stringify({ kind: 'EndpointSliceList', apiVersion: 'discovery.k8s.io/v1', metadata: { resourceVersion: String(rv) }, items: sliceItems }),
  },
];

const gc = (globalThis as { gc?: () => void }).gc;
function best(f: () => number): number {
  const times: number[] = [];
  for (let i = 0; i < 3; i++) {
    gc?.();
    const t0 = performance.now();
    const n = f();
    times.push(performance.now() - t0);
    if (n !== svcItems.length + sliceItems.length) throw new Error(`decoded ${n} objects, expected ${svcItems.length + sliceItems.length}`);
  }
  return Math.min(...times);
}

const held: unknown[] = [];
const plainMs = best(() => {
  let n = 0;
  for (const l of lists) {
    const items: unknown[] = [];
    for (const p of l.pages) for (const item of (JSON.parse(p) as { items: unknown[] }).items) items.push(keptFields(l.kind, item));
    n += items.length;
    held.push(items);
  }
  held.length = 0;
  return n;
});
const modelsMs = best(() => {
  let n = 0;
  for (const l of lists) {
    const list = ObjectSerializer.deserialize(ObjectSerializer.parse(l.whole, 'application/json'), l.type, '') as { items: unknown[] };
    n += list.items.length;
    held.push(list);
  }
  held.length = 0;
  return n;
});

const bytes = lists.reduce((a, l) => a + Buffer.byteLength(l.whole), 0);
const result: ListDecode = { objects: svcItems.length + sliceItems.length, bytes, plainMs, modelsMs };
process.stdout.write(JSON.stringify(result) + '\n');

import { ANNOTATION_LAST_CHANGE_TRIGGER_TIME, LABEL_HEADLESS, LABEL_SERVICE_NAME, LABEL_SERVICE_PROXY_NAME, type KubeObject } from './kube-objects.ts';

/** KeptKind: the kinds the sources deliver. */
export type KeptKind = 'Service' | 'EndpointSlice' | 'Node' | 'ServiceCIDR';

/**
 * keptFields returns the part of an object kproxy reads, before any source
 * caches it: a node holds every Service and EndpointSlice of the cluster, and
 * an API object carries much kproxy never looks at (managed fields,
 * annotations, selectors, each endpoint's targetRef and hostname). Values are
 * copied as they are, valid or not: the change trackers validate them and
 * name a bad field exactly as they would in the whole object. Anything that
 * is not an object where one belongs is kept whole, for the same reason.
 * Repeated strings (namespaces, node names, zones, port names, protocols)
 * are shared, as are the common endpoint conditions. It sits beside the
 * trackers that read those fields, and the sources call it: when a tracker
 * reads a field this does not keep, kept-fields.test.ts fails and names it.
 */
export function keptFields(kind: KeptKind, obj: unknown): KubeObject {
  if (!isObject(obj)) return obj as KubeObject;
  const o = obj as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  copy(o, out, 'apiVersion', intern);
  copy(o, out, 'kind', intern);
  if (o.metadata !== undefined) out.metadata = metadata(kind, o.metadata);
  switch (kind) {
    case 'Service':
      if (o.spec !== undefined) out.spec = serviceSpec(o.spec);
      if (o.status !== undefined) out.status = serviceStatus(o.status);
      break;
    case 'EndpointSlice':
      copy(o, out, 'addressType', intern);
      copy(o, out, 'ports', (v) => list(v, slicePort));
      copy(o, out, 'endpoints', (v) => list(v, sliceEndpoint));
      break;
    case 'Node':
      if (o.spec !== undefined) out.spec = pick(o.spec, ['podCIDR', 'podCIDRs', 'taints']);
      if (o.status !== undefined) out.status = isObject(o.status) ? pickWith(o.status, { addresses: (v) => list(v, (a) => pick(a, ['type', 'address'], intern)) }) : o.status;
      break;
    case 'ServiceCIDR':
      if (o.spec !== undefined) out.spec = pick(o.spec, ['cidrs']);
      break;
  }
  return out as KubeObject;
}

/** LABELS, ANNOTATIONS: the ones kproxy reads, per kind (a Node keeps all its labels: they are shown, and there is one). */
const LABELS: Record<KeptKind, readonly string[] | 'all'> = {
  Service: [LABEL_SERVICE_PROXY_NAME, LABEL_HEADLESS],
  EndpointSlice: [LABEL_SERVICE_NAME, LABEL_SERVICE_PROXY_NAME],
  Node: 'all',
  ServiceCIDR: [],
};
const ANNOTATIONS: Record<KeptKind, readonly string[]> = { Service: [], EndpointSlice: [ANNOTATION_LAST_CHANGE_TRIGGER_TIME], Node: [], ServiceCIDR: [] };

function metadata(kind: KeptKind, m: unknown): unknown {
  if (!isObject(m)) return m;
  const out = pick(m, ['name', 'uid', 'resourceVersion', 'deletionTimestamp']) as Record<string, unknown>;
  copy(m, out, 'namespace', intern);
  const keep = LABELS[kind];
  copy(m, out, 'labels', (v) => (keep === 'all' || !isObject(v) ? v : only(v, keep)));
  const annotations = ANNOTATIONS[kind];
  if (annotations.length) copy(m, out, 'annotations', (v) => (isObject(v) ? only(v, annotations) : v));
  return out;
}

function serviceSpec(spec: unknown): unknown {
  if (!isObject(spec)) return spec;
  return pickWith(spec, {
    type: intern,
    clusterIP: same,
    clusterIPs: same,
    ipFamilies: (v) => list(v, intern),
    ipFamilyPolicy: intern,
    ports: (v) => list(v, (p) => pick(p, ['name', 'protocol', 'port', 'nodePort'], intern)),
    externalIPs: same,
    loadBalancerSourceRanges: same,
    externalTrafficPolicy: intern,
    internalTrafficPolicy: intern,
    healthCheckNodePort: same,
    sessionAffinity: intern,
    sessionAffinityConfig: same,
    trafficDistribution: intern,
  });
}

function serviceStatus(status: unknown): unknown {
  if (!isObject(status)) return status;
  return pickWith(status, {
    loadBalancer: (lb) => (isObject(lb) ? pickWith(lb, { ingress: (v) => list(v, (i) => pick(i, ['ip', 'ipMode'], intern)) }) : lb),
  });
}

function slicePort(p: unknown): unknown {
  return pick(p, ['name', 'port', 'protocol'], intern);
}

/** sliceEndpoint: the hot path (one call per endpoint of the cluster), written out field by field. */
function sliceEndpoint(e: unknown): unknown {
  if (!isObject(e)) return e;
  const out: Record<string, unknown> = {};
  if (e.addresses !== undefined) out.addresses = e.addresses;
  if (e.conditions !== undefined) out.conditions = conditions(e.conditions);
  if (e.nodeName !== undefined) out.nodeName = intern(e.nodeName);
  if (e.zone !== undefined) out.zone = intern(e.zone);
  if (e.hints !== undefined) out.hints = hints(e.hints);
  return out;
}

function hints(h: unknown): unknown {
  if (!isObject(h)) return h;
  return pickWith(h, { forZones: (v) => list(v, (z) => pick(z, ['name'], intern)), forNodes: (v) => list(v, (n) => pick(n, ['name'], intern)) });
}

/** SHARED_CONDITIONS: one frozen object per combination of the three flags (nearly every endpoint is ready, serving, not terminating). */
const SHARED_CONDITIONS = new Map<string, Readonly<Record<string, boolean>>>();

function conditions(c: unknown): unknown {
  if (!isObject(c)) return c;
  const { ready, serving, terminating } = c;
  let keys = 0;
  for (const k in c) if (Object.hasOwn(c, k)) keys++;
  const held = (ready !== undefined ? 1 : 0) + (serving !== undefined ? 1 : 0) + (terminating !== undefined ? 1 : 0);
  // Shared only when it holds nothing but booleans among the three: anything else is copied for the trackers to judge.
  if (keys !== held || !flag(ready) || !flag(serving) || !flag(terminating)) return pick(c, ['ready', 'serving', 'terminating']);
  const id = `${ready},${serving},${terminating}`;
  let shared = SHARED_CONDITIONS.get(id);
  if (!shared) SHARED_CONDITIONS.set(id, (shared = Object.freeze({ ...c }) as Readonly<Record<string, boolean>>));
  return shared;
}

function flag(v: unknown): boolean {
  return v === undefined || typeof v === 'boolean';
}

/** INTERN_LIMIT bounds the pool of shared strings: past it the pool starts over (sharing is lost for old strings, never correctness). */
const INTERN_LIMIT = 50_000;
const pool = new Map<string, string>();

/** intern returns the pool's copy of a string (other values as they are), so equal names are held once. */
export function intern(v: unknown): unknown {
  if (typeof v !== 'string') return v;
  const hit = pool.get(v);
  if (hit !== undefined) return hit;
  if (pool.size >= INTERN_LIMIT) pool.clear();
  pool.set(v, v);
  return v;
}

function same(v: unknown): unknown {
  return v;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function copy(from: Record<string, unknown>, to: Record<string, unknown>, key: string, f: (v: unknown) => unknown): void {
  if (from[key] !== undefined) to[key] = f(from[key]);
}

/** pick copies the listed fields of an object (each through f); a non-object is returned as it is. */
function pick(v: unknown, keys: readonly string[], f: (v: unknown) => unknown = same): unknown {
  if (!isObject(v)) return v;
  const out: Record<string, unknown> = {};
  for (const k of keys) copy(v, out, k, f);
  return out;
}

function pickWith(v: Record<string, unknown>, fields: Record<string, (v: unknown) => unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, f] of Object.entries(fields)) copy(v, out, k, f);
  return out;
}

/** NONE: the labels or annotations of an object that has none of those kproxy reads (most), shared. */
const NONE: Readonly<Record<string, unknown>> = Object.freeze({});

/** only keeps the listed keys of a string map (labels, annotations). */
function only(v: Record<string, unknown>, keys: readonly string[]): Readonly<Record<string, unknown>> {
  let out: Record<string, unknown> | null = null;
  for (const k of keys) if (v[k] !== undefined) (out ??= {})[k] = v[k];
  return out ?? NONE;
}

/** list maps an array's elements; anything else is kept for the trackers to refuse. */
function list(v: unknown, f: (e: unknown) => unknown): unknown {
  return Array.isArray(v) ? v.map(f) : v;
}

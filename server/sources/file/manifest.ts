import type { KubeObject } from '../../proxy/kube-objects.ts';
import { ManifestParseError } from '../../errors.ts';
import { yamlDocuments } from './yaml-stream.ts';

/** The kinds kproxy reads from manifests; anything else in a file is left alone. */
export const MANIFEST_KINDS = ['Service', 'EndpointSlice', 'Node', 'ServiceCIDR'] as const;
export type ManifestKind = (typeof MANIFEST_KINDS)[number];

const API_VERSIONS: Record<ManifestKind, string[]> = {
  Service: ['v1'],
  EndpointSlice: ['discovery.k8s.io/v1'],
  Node: ['v1'],
  // ServiceCIDR is GA in networking.k8s.io/v1 (Kubernetes 1.33); v1beta1 served it in 1.31 and 1.32.
  ServiceCIDR: ['networking.k8s.io/v1', 'networking.k8s.io/v1beta1'],
};

/** ManifestObject is one object read from a manifest, with where it came from. */
export interface ManifestObject {
  readonly kind: ManifestKind;
  /** key is "Kind ns/name", unique per object. */
  readonly key: string;
  readonly object: KubeObject;
  readonly file: string;
}

export interface ParsedManifest {
  readonly objects: ManifestObject[];
  /** skipped: objects left out, with why (other kinds are not listed). */
  readonly skipped: string[];
}

/**
 * parseManifest reads a YAML stream of any extension (JSON documents are YAML
 * too): single objects, Lists, JSON arrays. A file holds no objects legally
 * when it is empty or comments only, holds empty Lists, or only objects of
 * kinds kproxy does not read. Anything else that is not a Kubernetes object
 * (a document that is a string or a number, an object without apiVersion or
 * kind, an object of a kind kproxy reads without metadata.name: a clobbered or
 * half-written file) is an error of the whole file, as invalid YAML is: it
 * throws ManifestParseError naming file:line, the document and why, so the
 * caller keeps the file's last good state instead of removing its objects.
 * keep, when given, turns each object into what the caller holds (the file
 * source keeps only the fields kproxy reads) as soon as it is read.
 */
export function parseManifest(file: string, text: string, keep?: (kind: ManifestKind, object: KubeObject) => KubeObject): ParsedManifest {
  const objects: ManifestObject[] = [];
  const skipped: string[] = [];
  const visit = (doc: unknown, where: string) => {
    if (Array.isArray(doc)) return doc.forEach((d, i) => visit(d, `${where}[${i}]`));
    if (typeof doc !== 'object' || doc === null) throw new ManifestParseError(`${where}: not a Kubernetes object (${describe(doc)})`);
    const obj = doc as KubeObject & { items?: unknown };
    for (const field of ['apiVersion', 'kind'] as const) {
      const v = obj[field];
      if (typeof v !== 'string' || v === '')
        throw new ManifestParseError(`${where}: not a Kubernetes object (${v === undefined || v === null || v === '' ? `no ${field}` : `${field} is ${describe(v)}`})`);
    }
    const kind = obj.kind as string;
    if (kind.endsWith('List')) {
      // An explicitly empty List is a legal empty file; items that are not a list are not.
      if (obj.items === undefined || obj.items === null) return;
      if (!Array.isArray(obj.items)) throw new ManifestParseError(`${where}: ${kind} whose items are not a list (${describe(obj.items)})`);
      return obj.items.forEach((d, i) => visit(d, `${where}, items[${i}]`));
    }
    if (!MANIFEST_KINDS.includes(kind as ManifestKind)) return;
    const name = obj.metadata?.name;
    if (typeof name !== 'string' || name === '') throw new ManifestParseError(`${where}: ${kind} without metadata.name`);
    const k = kind as ManifestKind;
    if (!API_VERSIONS[k].includes(obj.apiVersion!)) {
      return void skipped.push(`${where}: ${kind} ${name} with apiVersion ${JSON.stringify(obj.apiVersion)} (want ${API_VERSIONS[k].join(' or ')})`);
    }
    // Nodes and ServiceCIDRs are cluster-scoped: no namespace.
    if (k !== 'Node' && k !== 'ServiceCIDR') {
      obj.metadata!.namespace ??= 'default';
    }
    const ns = obj.metadata?.namespace;
    objects.push({ kind: k, key: `${k} ${ns ? `${ns}/` : ''}${name}`, object: keep ? keep(k, obj) : obj, file });
  };
  // Each document is visited as it is read, so only what keep returns outlives it. An
  // invalid YAML document anywhere still wins over an object refused before it (the
  // error a whole-file read reports first): the first refusal is thrown after the last document.
  let refused: unknown = null;
  let i = 0;
  for (const d of yamlDocuments(file, text)) {
    i++;
    if (refused !== null) continue;
    try {
      visit(d.value, `${file}:${d.line}: document ${i}`);
    } catch (err) {
      refused = err;
    }
  }
  if (refused !== null) throw refused;
  return { objects, skipped };
}

/** describe names what a value is, for an error ("a string: \"oops\""), without quoting a large value whole. */
function describe(v: unknown): string {
  if (v === null || v === undefined) return 'null';
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'an object';
  const text = JSON.stringify(v);
  const shown = text.length > 40 ? `${text.slice(0, 37)}...` : text;
  return `${typeof v === 'string' ? 'a string' : typeof v === 'number' ? 'a number' : `a ${typeof v}`}: ${shown}`;
}

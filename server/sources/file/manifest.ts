import type { KubeObject } from '../../proxy/kube-objects.ts';
import { parseYamlStream } from './yaml-stream.ts';

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
 * too): single objects, Lists, JSON arrays. It throws ManifestParseError with
 * file:line:column when the text is not valid, so the caller can keep the
 * file's last good state.
 */
export function parseManifest(file: string, text: string): ParsedManifest {
  const docs = parseYamlStream(file, text);
  const objects: ManifestObject[] = [];
  const skipped: string[] = [];
  const visit = (doc: unknown, where: string) => {
    if (doc === null || doc === undefined) return;
    if (Array.isArray(doc)) return doc.forEach((d, i) => visit(d, `${where}[${i}]`));
    if (typeof doc !== 'object') return void skipped.push(`${where}: not an object`);
    const obj = doc as KubeObject & { items?: unknown[] };
    if (typeof obj.kind === 'string' && obj.kind.endsWith('List') && Array.isArray(obj.items)) {
      return obj.items.forEach((d, i) => visit(d, `${where}.items[${i}]`));
    }
    const kind = obj.kind as ManifestKind;
    if (!MANIFEST_KINDS.includes(kind)) return;
    if (!API_VERSIONS[kind].includes(obj.apiVersion ?? '')) {
      return void skipped.push(`${where}: ${kind} with apiVersion ${JSON.stringify(obj.apiVersion)} (want ${API_VERSIONS[kind].join(' or ')})`);
    }
    const name = obj.metadata?.name;
    if (typeof name !== 'string' || name === '') return void skipped.push(`${where}: ${kind} without metadata.name`);
    // Nodes and ServiceCIDRs are cluster-scoped: no namespace.
    if (kind !== 'Node' && kind !== 'ServiceCIDR') {
      obj.metadata!.namespace ??= 'default';
    }
    const ns = obj.metadata?.namespace;
    objects.push({ kind, key: `${kind} ${ns ? `${ns}/` : ''}${name}`, object: obj, file });
  };
  docs.forEach((d, i) => visit(d, docs.length > 1 ? `${file} document ${i + 1}` : file));
  return { objects, skipped };
}

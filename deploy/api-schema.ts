import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';

/**
 * api-schema checks Kubernetes manifests the way the API server's schema
 * validation with `kubectl apply --validate=strict` would, offline. Two
 * generated views of the same upstream OpenAPI spec do the work:
 *
 * - kubernetes-models' validators (JSON Schema compiled by ajv): which
 *   apiVersion/kind pairs exist, required fields, JSON types, enums, formats.
 *   They do not reject fields the schema does not name.
 * - @kubernetes/client-node's model metadata (every field of every API type,
 *   with its type): walked here, so an unknown or misspelt field anywhere in
 *   an object is an error, as with the API server's strict field validation.
 */

/** SchemaViolation is one way an object breaks the API schema; path is kubectl-style (`spec.ports[0].port`). */
export interface SchemaViolation {
  readonly path: string;
  readonly message: string;
}

/** Manifest is one object read from a YAML file, with where it came from. */
export interface Manifest {
  /** where names the file and the document's index in it, e.g. `deploy/rbac.yaml#1`. */
  readonly where: string;
  readonly object: Record<string, unknown>;
}

interface Attribute {
  readonly baseName: string;
  readonly type: string;
}

type ModelClass = { getAttributeTypeMap(): readonly Attribute[] };

const library = k8s as unknown as Record<string, Partial<ModelClass> | undefined>;

/** Types client-node leaves as plain values; kubernetes-models checks their JSON type. */
const LEAF_TYPES = new Set(['string', 'String', 'number', 'boolean', 'Date', 'any', 'object', 'IntOrString']);

function modelFields(type: string): Map<string, string> | null {
  const model = library[type];
  if (typeof model?.getAttributeTypeMap !== 'function') return null;
  return new Map(model.getAttributeTypeMap().map((a) => [a.baseName, a.type]));
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function child(path: string, key: string): string {
  return path === '' ? key : `${path}.${key}`;
}

/**
 * unknownFields walks value as the API type named type and reports every field
 * that type does not have. A type the metadata does not describe is a defect
 * of this checker, not of the manifest: it throws rather than pass blindly.
 */
function unknownFields(value: unknown, type: string, path: string, out: SchemaViolation[]): void {
  if (value === null || value === undefined) return;
  const array = /^Array<(.+)>$/.exec(type);
  if (array) {
    if (Array.isArray(value)) value.forEach((item, i) => unknownFields(item, array[1], `${path}[${i}]`, out));
    return;
  }
  const map = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (map) {
    if (isObject(value)) for (const [k, v] of Object.entries(value)) unknownFields(v, map[1], child(path, k), out);
    return;
  }
  if (LEAF_TYPES.has(type)) return;
  const fields = modelFields(type);
  if (!fields) throw new Error(`api-schema: no field list for API type ${type} (at ${path || 'the top level'})`);
  if (!isObject(value)) return; // kubernetes-models reports the wrong JSON type
  for (const [key, v] of Object.entries(value)) {
    const fieldType = fields.get(key);
    if (fieldType === undefined) out.push({ path: child(path, key), message: `unknown field "${key}"` });
    else unknownFields(v, fieldType, child(path, key), out);
  }
}

/** topLevelType names client-node's model for apiVersion/kind: `GroupV1Kind` where a group prefix disambiguates (CoreV1Event), else `V1Kind`. */
function topLevelType(apiVersion: string, kind: string): string | null {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/', 2) : ['', apiVersion];
  const capital = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);
  const groupPrefix = group === '' ? 'Core' : capital(group.split('.')[0]);
  for (const name of [`${groupPrefix}${capital(version)}${kind}`, `${capital(version)}${kind}`]) {
    if (modelFields(name)) return name;
  }
  return null;
}

function pathOf(instancePath: string): string {
  return instancePath
    .split('/')
    .slice(1)
    .map((s) => s.replaceAll('~1', '/').replaceAll('~0', '~'))
    .reduce((p, seg) => (/^\d+$/.test(seg) ? `${p}[${seg}]` : child(p, seg)), '');
}

interface AjvError {
  readonly instancePath: string;
  readonly keyword: string;
  readonly message?: string;
  readonly params?: { allowedValues?: unknown[] };
}

function messageOf(e: AjvError): string {
  const message = e.message ?? `fails ${e.keyword}`;
  const allowed = e.keyword === 'enum' ? e.params?.allowedValues : undefined;
  return allowed ? `${message}: ${allowed.map((v) => JSON.stringify(v)).join(', ')}` : message;
}

type ModelConstructor = new (data: unknown) => { validate(): void };

/** validateObject returns every schema violation of one API object; [] means valid. */
export async function validateObject(object: unknown): Promise<SchemaViolation[]> {
  if (!isObject(object)) return [{ path: '', message: 'not an object' }];
  const { apiVersion, kind } = object;
  if (typeof apiVersion !== 'string' || typeof kind !== 'string') {
    return [{ path: '', message: 'apiVersion and kind must be strings' }];
  }
  if (apiVersion === 'v1' && kind === 'List') {
    const items = Array.isArray(object.items) ? object.items : [];
    const nested = await Promise.all(items.map((item) => validateObject(item)));
    return nested.flatMap((violations, i) => violations.map((v) => ({ ...v, path: child(`items[${i}]`, v.path) })));
  }

  let models: Record<string, unknown>;
  try {
    models = (await import(`kubernetes-models/${apiVersion}`)) as Record<string, unknown>;
  } catch {
    return [{ path: 'apiVersion', message: `no API group version ${apiVersion}` }];
  }
  const Model = models[kind] as ModelConstructor | undefined;
  const type = topLevelType(apiVersion, kind);
  if (typeof Model !== 'function' || type === null) {
    return [{ path: 'kind', message: `no kind ${kind} in ${apiVersion}` }];
  }

  const out: SchemaViolation[] = [];
  try {
    new Model(object).validate();
  } catch (err) {
    const errors = (err as { errors?: AjvError[] }).errors;
    if (!errors) throw err;
    for (const e of errors) out.push({ path: pathOf(e.instancePath), message: messageOf(e) });
  }
  unknownFields(object, type, '', out);
  return out;
}

/**
 * parseManifests reads a multi-document YAML text as kubectl does (YAML 1.1:
 * `on`/`yes` are booleans, duplicate keys are errors) and converts each
 * document to its JSON form. Empty documents are skipped.
 */
export function parseManifests(text: string, file: string): Manifest[] {
  const manifests: Manifest[] = [];
  parseAllDocuments(text, { version: '1.1', uniqueKeys: true }).forEach((doc, i) => {
    const problems = [...doc.errors, ...doc.warnings];
    if (problems.length) throw new Error(`${file}#${i}: ${problems.map((p) => p.message).join('; ')}`);
    const value: unknown = JSON.parse(JSON.stringify(doc.toJS() ?? null));
    if (value === null) return;
    if (!isObject(value)) throw new Error(`${file}#${i}: a manifest must be a mapping`);
    manifests.push({ where: `${file}#${i}`, object: value });
  });
  return manifests;
}

/** loadManifests reads every *.yaml / *.yml file directly inside dir (not its subfolders), sorted by name. */
export function loadManifests(dir: string, label: string): Manifest[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isFile() && /\.ya?ml$/.test(e.name))
    .map((e) => e.name)
    .sort()
    .flatMap((name) => parseManifests(readFileSync(join(dir, name), 'utf8'), `${label}/${name}`));
}

import { isAlias, isMap, isScalar, isSeq, LineCounter, parseAllDocuments, type Document, type Node } from 'yaml';
import { DurationSyntaxError, parseDuration } from './duration.ts';
import type { FieldError } from './field-error.ts';
import { API_VERSION, KIND, KUBE_PROXY_CONFIGURATION_SCHEMA, type FieldSchema, type KubeProxyConfigurationDocument } from './v1alpha1.ts';

/** DecodeResult is a decoded document, or every problem found while decoding it. */
export type DecodeResult = { readonly ok: true; readonly document: KubeProxyConfigurationDocument } | { readonly ok: false; readonly errors: readonly FieldError[] };

const INT32_MIN = -(2 ** 31);
const INT32_MAX = 2 ** 31 - 1;
const UINT32_MAX = 2 ** 32 - 1;

/**
 * decodeKubeProxyConfiguration strictly decodes a --config file's text, like
 * kube-proxy's strict decoder: unknown fields, duplicate fields and values of
 * the wrong type are errors naming the field path (and line); every problem is
 * collected, not just the first. apiVersion and kind must be those of
 * KubeProxyConfiguration v1alpha1.
 */
export function decodeKubeProxyConfiguration(text: string): DecodeResult {
  const lineCounter = new LineCounter();
  // uniqueKeys off: the walk below reports duplicates itself, with their field path.
  // YAML 1.1, like the go-yaml v2 parser behind kube-proxy's decoder: `masqueradeAll: yes` is a boolean.
  const docs = parseAllDocuments(text, { lineCounter, uniqueKeys: false, version: '1.1' });
  const errors: FieldError[] = [];
  const lineOf = (node: Node | null | undefined) => (node?.range ? lineCounter.linePos(node.range[0]).line : undefined);

  if (!Array.isArray(docs)) return fail({ field: '', type: 'Document', detail: 'the file is empty; expected a KubeProxyConfiguration' });
  const syntax = docs.flatMap((d) => d.errors);
  if (syntax.length > 0) {
    return {
      ok: false,
      errors: syntax.map((e) => ({
        field: '',
        type: 'Syntax' as const,
        detail: e.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, ''),
        line: e.linePos?.[0].line,
      })),
    };
  }
  const nonEmpty = docs.filter((d) => d.contents != null);
  if (nonEmpty.length === 0) return fail({ field: '', type: 'Document', detail: 'the file is empty; expected a KubeProxyConfiguration' });
  if (nonEmpty.length > 1) {
    return fail({
      field: '',
      type: 'Document',
      detail: `expected one YAML document (a single KubeProxyConfiguration), found ${nonEmpty.length}`,
      line: lineOf(nonEmpty[1]!.contents),
    });
  }
  const doc = nonEmpty[0]!;
  const root = resolve(doc, doc.contents);
  if (!isMap(root)) {
    return fail({ field: '', type: 'Document', detail: 'the document must be a YAML mapping (a KubeProxyConfiguration object)', line: lineOf(root) });
  }

  const walk = (schema: FieldSchema, node: Node | null | undefined, path: string): unknown => {
    node = resolve(doc, node);
    // null leaves the field unset, as Go's JSON decoding does (nil pointer, zero value).
    if (node == null || (isScalar(node) && node.value === null)) return undefined;
    const bad = (detail: string, value: unknown = isScalar(node) ? node.value : undefined): undefined => {
      errors.push({ field: path, type: 'Invalid', value, detail, line: lineOf(node) });
      return undefined;
    };
    switch (schema.kind) {
      case 'object': {
        if (!isMap(node)) return bad('must be a mapping');
        const out: Record<string, unknown> = {};
        const seen = new Set<string>();
        for (const pair of node.items) {
          const keyNode = resolve(doc, pair.key as Node);
          const key = isScalar(keyNode) ? String(keyNode.value) : undefined;
          const childPath = path === '' ? (key ?? '?') : `${path}.${key ?? '?'}`;
          if (key === undefined) {
            errors.push({ field: childPath, type: 'Invalid', detail: 'keys must be plain strings', line: lineOf(keyNode) });
            continue;
          }
          if (seen.has(key)) {
            errors.push({ field: childPath, type: 'Duplicate', detail: '', line: lineOf(keyNode) });
            continue;
          }
          seen.add(key);
          const child = Object.hasOwn(schema.fields, key) ? schema.fields[key] : undefined;
          if (!child) {
            errors.push({ field: childPath, type: 'Unknown', detail: '', line: lineOf(keyNode) });
            continue;
          }
          const value = walk(child, pair.value as Node, childPath);
          if (value !== undefined) out[key] = value;
        }
        return out;
      }
      case 'list':
      case 'strings': {
        if (!isSeq(node)) return bad('must be a list');
        const item: FieldSchema = schema.kind === 'list' ? schema.item : { kind: 'string' };
        return node.items.map((n, i) => walk(item, n as Node, `${path}[${i}]`));
      }
      case 'boolMap': {
        if (!isMap(node)) return bad('must be a mapping of names to true/false');
        const out: Record<string, boolean> = {};
        for (const pair of node.items) {
          const keyNode = resolve(doc, pair.key as Node);
          const key = isScalar(keyNode) ? String(keyNode.value) : '?';
          if (Object.hasOwn(out, key)) {
            errors.push({ field: `${path}.${key}`, type: 'Duplicate', detail: '', line: lineOf(keyNode) });
            continue;
          }
          const value = walk({ kind: 'bool' }, pair.value as Node, `${path}.${key}`);
          if (typeof value === 'boolean') out[key] = value;
        }
        return out;
      }
      default:
        if (!isScalar(node)) return bad(`must be ${describe(schema)}`, undefined);
        // YAML 1.1 reads an unquoted 2024-01-02 as a timestamp; a string field wants the text.
        if (schema.kind === 'string' && node.value instanceof Date) return node.source;
        return scalar(schema, node.value, bad);
    }
  };

  const document = walk(KUBE_PROXY_CONFIGURATION_SCHEMA, root, '') as KubeProxyConfigurationDocument;
  const rootLine = lineOf(root);
  const header: FieldError[] = [];
  if (document.apiVersion === undefined) {
    header.push({ field: 'apiVersion', type: 'Required', detail: `must be ${JSON.stringify(API_VERSION)}`, line: rootLine });
  } else if (document.apiVersion !== API_VERSION) {
    header.push({ field: 'apiVersion', type: 'Unsupported', value: document.apiVersion, detail: `supported values: ${JSON.stringify(API_VERSION)}` });
  }
  if (document.kind === undefined) {
    header.push({ field: 'kind', type: 'Required', detail: `must be ${JSON.stringify(KIND)}`, line: rootLine });
  } else if (document.kind !== KIND) {
    header.push({ field: 'kind', type: 'Unsupported', value: document.kind, detail: `supported values: ${JSON.stringify(KIND)}` });
  }
  errors.unshift(...header);
  return errors.length > 0 ? { ok: false, errors } : { ok: true, document };
}

function fail(error: FieldError): DecodeResult {
  return { ok: false, errors: [error] };
}

function resolve(doc: Document, node: Node | null | undefined): Node | null | undefined {
  // Anchors and aliases are plain YAML; follow them (a dangling alias is a syntax error already reported).
  return isAlias(node) ? (node.resolve(doc) as Node | undefined) : node;
}

function describe(schema: FieldSchema): string {
  switch (schema.kind) {
    case 'string':
      return 'a string';
    case 'bool':
      return 'true or false';
    case 'int32':
      return 'a whole number';
    case 'uint32':
      return 'a whole number >= 0';
    case 'float':
      return 'a number';
    case 'duration':
      return 'a duration string such as "30s" or "1m30s"';
    case 'durationOrNanos':
      return 'a duration string such as "5s" or a number of nanoseconds';
    case 'quantity':
      return 'a quantity such as "0" or "64Ki"';
    default:
      return 'a scalar';
  }
}

function scalar(schema: FieldSchema, value: unknown, bad: (detail: string) => undefined): unknown {
  switch (schema.kind) {
    case 'string':
      return typeof value === 'string' ? value : bad(`must be ${describe(schema)}`);
    case 'bool':
      return typeof value === 'boolean' ? value : bad(`must be ${describe(schema)}`);
    case 'float':
      return typeof value === 'number' && Number.isFinite(value) ? value : bad(`must be ${describe(schema)}`);
    case 'int32':
      if (typeof value !== 'number' || !Number.isInteger(value)) return bad(`must be ${describe(schema)}`);
      return value >= INT32_MIN && value <= INT32_MAX ? value : bad('out of range for a 32-bit integer');
    case 'uint32':
      if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) return bad(`must be ${describe(schema)}`);
      return value <= UINT32_MAX ? value : bad('out of range for a 32-bit unsigned integer');
    case 'duration':
    case 'durationOrNanos':
      if (schema.kind === 'durationOrNanos' && typeof value === 'number' && Number.isInteger(value)) return value / 1e6;
      if (typeof value !== 'string') return bad(`must be ${describe(schema)}`);
      try {
        return parseDuration(value);
      } catch (err) {
        return bad(err instanceof DurationSyntaxError ? `${err.message.replace(/^invalid duration "[^"]*": /, 'not a duration: ')}` : String(err));
      }
    case 'quantity':
      if (typeof value === 'number') return String(value);
      return typeof value === 'string' && /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+|[KMGTPE]i?|[munk])?$/.test(value) ? value : bad(`must be ${describe(schema)}`);
    default:
      return bad('unexpected scalar');
  }
}

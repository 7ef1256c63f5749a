import { describe, expect, it } from 'vitest';
import { parseManifest } from './manifest.ts';

const svc = (name: string) => `apiVersion: v1\nkind: Service\nmetadata: { name: ${name}, namespace: ns }\nspec: { clusterIP: 10.96.0.1, ports: [{ port: 80 }] }\n`;

/** parseError runs parseManifest and returns its error (code and message), or null when it parsed. */
function parseError(text: string, file = '/m/a.yaml'): { code?: string; message: string } | null {
  try {
    parseManifest(file, text);
    return null;
  } catch (err) {
    return err as { code?: string; message: string };
  }
}

describe('parseManifest: what a legal empty file is', () => {
  it('holds no objects when empty, comments only, an explicitly empty List or JSON array, or only kinds kproxy does not read', () => {
    const empty = [
      '',
      '# nothing: this node serves no Services for now\n',
      '---\n# nothing\n---\n',
      '{"apiVersion": "v1", "kind": "List", "items": []}',
      'apiVersion: v1\nkind: ServiceList\nitems: []\n',
      'apiVersion: v1\nkind: List\nitems: null\n',
      '[]',
      'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: settings }\ndata: { a: b }\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: { name: web }\n',
    ];
    for (const text of empty) expect(parseManifest('/m/a.yaml', text), JSON.stringify(text)).toEqual({ objects: [], skipped: [] });
  });

  it('leaves out, and lists, an object of a kind it reads in an apiVersion it does not', () => {
    const parsed = parseManifest('/m/a.yaml', `${svc('web')}---\napiVersion: v2\nkind: Service\nmetadata: { name: future }\n`);
    expect(parsed.objects.map((o) => o.key)).toEqual(['Service ns/web']);
    expect(parsed.skipped).toEqual(['/m/a.yaml:6: document 2: Service future with apiVersion "v2" (want v1)']);
  });
});

describe('parseManifest: text that parses as YAML but holds no Kubernetes object is an error of the file', () => {
  it('refuses a file clobbered with a word, naming file, line, document and why', () => {
    expect(parseError('oops\n')).toEqual(expect.objectContaining({ code: 'KPROXY_ERR_MANIFEST_PARSE', message: '/m/a.yaml:1: document 1: not a Kubernetes object (a string: "oops")' }));
    expect(parseError('# header\n42\n')?.message).toBe('/m/a.yaml:2: document 1: not a Kubernetes object (a number: 42)');
    expect(parseError(`${svc('web')}---\n- a\n- b\n`)?.message).toBe('/m/a.yaml:6: document 2[0]: not a Kubernetes object (a string: "a")');
  });

  it('refuses an object without apiVersion or kind', () => {
    expect(parseError('kind: Service\nmetadata: { name: web }\n')?.message).toBe('/m/a.yaml:1: document 1: not a Kubernetes object (no apiVersion)');
    expect(parseError('apiVersion: v1\nmetadata: { name: web }\n')?.message).toBe('/m/a.yaml:1: document 1: not a Kubernetes object (no kind)');
    expect(parseError('{"apiVersion": "v1", "kind": 7}', '/m/a.json')?.message).toBe('/m/a.json:1: document 1: not a Kubernetes object (kind is a number: 7)');
  });

  it('refuses a Service or EndpointSlice without metadata.name, as a half-written file looks', () => {
    expect(parseError(`${svc('web')}---\napiVersion: v1\nkind: Service\n`)?.message).toBe('/m/a.yaml:6: document 2: Service without metadata.name');
    expect(parseError('apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  namespace: ns\n')?.message).toBe('/m/a.yaml:1: document 1: EndpointSlice without metadata.name');
    // Cut off in the middle of its metadata: the name is not there yet.
    expect(parseError('apiVersion: v1\nkind: Service\nmetadata:\n')?.message).toBe('/m/a.yaml:1: document 1: Service without metadata.name');
  });

  it('refuses a List whose items are not a list or hold something that is not an object', () => {
    const list = (items: unknown) => JSON.stringify({ apiVersion: 'v1', kind: 'List', items });
    expect(parseError(list('oops'), '/m/l.json')?.message).toBe('/m/l.json:1: document 1: List whose items are not a list (a string: "oops")');
    expect(parseError(list([{ apiVersion: 'v1', kind: 'Service', metadata: { name: 'a', namespace: 'ns' } }, null]), '/m/l.json')?.message).toBe(
      '/m/l.json:1: document 1, items[1]: not a Kubernetes object (null)',
    );
  });

  it('reads the objects of a file that holds only Kubernetes objects, whatever else a List holds', () => {
    const text = JSON.stringify({
      apiVersion: 'v1',
      kind: 'List',
      items: [
        { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'c' } },
        { apiVersion: 'v1', kind: 'Service', metadata: { name: 'a' } },
      ],
    });
    expect(parseManifest('/m/l.json', text).objects.map((o) => o.key)).toEqual(['Service default/a']);
  });
});

describe('parseManifest: keeping part of each object', () => {
  it('hands each object it reads to keep, defaulted namespace included, and holds what keep returns', () => {
    const kept: string[] = [];
    const parsed = parseManifest('/m/a.yaml', `${svc('web')}---\napiVersion: v1\nkind: Service\nmetadata: { name: api }\nspec: { clusterIP: 10.96.0.2 }\n`, (kind, o) => {
      kept.push(`${kind} ${o.metadata?.namespace}/${o.metadata?.name}`);
      return { kind, metadata: { name: `kept-${o.metadata?.name}` } };
    });
    expect(kept).toEqual(['Service ns/web', 'Service default/api']);
    expect(parsed.objects.map((o) => [o.key, o.object])).toEqual([
      ['Service ns/web', { kind: 'Service', metadata: { name: 'kept-web' } }],
      ['Service default/api', { kind: 'Service', metadata: { name: 'kept-api' } }],
    ]);
  });

  it('reports invalid YAML in a later document before an object refused in an earlier one, as a whole-file read does', () => {
    const text = `apiVersion: v1\nkind: Service\nmetadata: { namespace: ns }\n---\n${svc('web')}---\nkind: Service\nmetadata: { name: broken\n`;
    expect(parseError(text)?.message).toMatch(/^\/m\/a\.yaml:\d+:\d+: invalid YAML: /);
    expect(parseError(text.slice(0, text.lastIndexOf('---')))?.message).toBe('/m/a.yaml:1: document 1: Service without metadata.name');
  });
});

import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { loadAll } from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { readBlockYaml } from './block-yaml.ts';

/** jsYaml: what the file source read before (and reads when readBlockYaml declines): js-yaml, one document. */
function jsYaml(text: string): unknown {
  const docs = loadAll(text, { json: true, maxAliases: 0 });
  return docs.length === 0 ? null : docs[0];
}

/** expectSameAsJsYaml: the reader either declines or reads exactly what js-yaml reads, key order included. */
function expectSameAsJsYaml(text: string): unknown {
  const block = readBlockYaml(text);
  if (block === undefined) return block;
  let expected: unknown;
  try {
    expected = jsYaml(text);
  } catch (err) {
    throw new Error(`readBlockYaml read a document js-yaml refuses (${String(err)}):\n${text}`, { cause: err });
  }
  expect(block).toEqual(expected);
  expect(JSON.stringify(block)).toBe(JSON.stringify(expected));
  return block;
}

const service = {
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name: 'web', namespace: 'shop', labels: { 'app.kubernetes.io/name': 'web', tier: 'front' }, annotations: { 'example.com/count': '3' } },
  spec: {
    type: 'LoadBalancer',
    clusterIP: '10.96.0.10',
    clusterIPs: ['10.96.0.10', 'fd00::a'],
    ipFamilies: ['IPv4', 'IPv6'],
    ports: [
      { name: 'http', port: 80, protocol: 'TCP', targetPort: 8080, nodePort: 30080 },
      { name: 'dns', port: 53, protocol: 'UDP', targetPort: 'dns' },
    ],
    externalTrafficPolicy: 'Local',
    healthCheckNodePort: 32000,
    sessionAffinityConfig: { clientIP: { timeoutSeconds: 10800 } },
  },
  status: { loadBalancer: { ingress: [{ ip: '192.0.2.1' }] } },
};
const slice = {
  apiVersion: 'discovery.k8s.io/v1',
  kind: 'EndpointSlice',
  metadata: { name: 'web-x7k2p', namespace: 'shop', labels: { 'kubernetes.io/service-name': 'web' }, annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': '2020-01-01T00:00:00Z' } },
  addressType: 'IPv4',
  ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
  endpoints: [
    { addresses: ['10.64.0.10'], conditions: { ready: true, serving: true, terminating: false }, nodeName: 'node-1', zone: 'z-a', hints: { forZones: [{ name: 'z-a' }] } },
    { addresses: ['10.64.0.11'], conditions: { ready: false }, nodeName: null },
  ],
};

describe('readBlockYaml', () => {
  it('reads documents as the yaml package writes them, with sequences indented or not, as js-yaml does', () => {
    for (const obj of [service, slice]) {
      for (const indentSeq of [true, false]) {
        const text = stringify(obj, { indentSeq });
        expect(expectSameAsJsYaml(text)).toEqual(obj);
      }
    }
  });

  it("reads as kubectl writes: sequences at their key's indent, quoted numbers, comment lines, empty values", () => {
    const text = [
      '# exported',
      'apiVersion: v1',
      'kind: Service',
      'metadata:',
      '  name: web',
      "  namespace: 'shop'",
      '  annotations:',
      '    example.com/port: "8080"',
      "    example.com/quote: 'it''s'",
      '  labels:',
      '',
      '    # a comment line between entries',
      '    app: web',
      'spec:',
      '  clusterIP: None',
      '  ports:',
      '  - name: http',
      '    port: 80',
      '    targetPort: 08080',
      '  -   name: https',
      '      port: 443',
      '  - ',
      '  -',
      '    - nested',
      '    - - deeper',
      '  publishNotReadyAddresses: true',
      '  ipFamilyPolicy: ~',
      '  sessionAffinity:',
      '  weights: [1, 2]',
    ];
    // The last line is a flow sequence: declined, js-yaml reads the document.
    expect(readBlockYaml(text.join('\n'))).toBeUndefined();
    const block = expectSameAsJsYaml(text.slice(0, -1).join('\n') + '\n');
    expect(block).toMatchObject({
      metadata: { namespace: 'shop', annotations: { 'example.com/port': '8080', 'example.com/quote': "it's" }, labels: { app: 'web' } },
      spec: { clusterIP: 'None', ports: [{ name: 'http', port: 80, targetPort: 8080 }, { name: 'https', port: 443 }, null, ['nested', ['deeper']]], ipFamilyPolicy: null, sessionAffinity: null },
    });
  });

  it('reads a whole List in one document, as kubectl get -o yaml writes one, with a comment at its end', () => {
    const items = Array.from({ length: 2000 }, (_, i) => ({ ...service, metadata: { ...service.metadata, name: `web-${i}` } }));
    const text = stringify({ apiVersion: 'v1', kind: 'List', items, metadata: { resourceVersion: '' } }, { indentSeq: false, aliasDuplicateObjects: false }) + '# exported\n';
    const list = expectSameAsJsYaml(text) as { items: unknown[] };
    expect(list.items).toHaveLength(2000);
    expect(readBlockYaml(text.replace('web-1999', 'web-1999 # a comment after content'))).toBeUndefined();
  });

  it('resolves plain scalars by the core schema, as js-yaml does', () => {
    const scalars = [
      '0',
      '-1',
      '+3',
      '0x1F',
      '0o17',
      '1.5',
      '1e3',
      '.inf',
      '-.Inf',
      '.nan',
      'true',
      'False',
      'TRUE',
      'yes',
      'no',
      'on',
      'null',
      'Null',
      '~',
      '10.96.0.10',
      '2020-01-01T00:00:00Z',
      '08080',
      '1_000',
      'fd00::a',
      'a:b',
      '-x',
      'x y  z',
    ];
    const text = scalars.map((s, i) => `k${i}: ${s}`).join('\n') + '\nlist:\n' + scalars.map((s) => `- ${s}`).join('\n');
    const block = expectSameAsJsYaml(text) as Record<string, unknown>;
    expect(block).toMatchObject({ k0: 0, k1: -1, k5: 1.5, k10: true, k11: false, k13: 'yes', k16: null, k19: '10.96.0.10', k20: '2020-01-01T00:00:00Z', k23: 'fd00::a', k25: '-x' });
  });

  it('declines what it does not read, so js-yaml (or the yaml package) reads it', () => {
    const declined = [
      'a: |\n  block\n',
      'a: >\n  folded\n',
      'a: "esc\\"aped"',
      'a: "multi\n  line"',
      "a: 'multi\n  line'",
      'a: plain\n  continued',
      'a: {b: 1}',
      'a: [1]',
      'a: x, y',
      'a: value # trailing comment',
      'a: &anchor 1',
      'a: !!str 1',
      '"quoted key": 1',
      'true: 1',
      'null: 1',
      '1: one',
      '__proto__: 1',
      'a: 1\na: 2',
      'a:\tb',
      'a: 1\r\nb: 2',
      'a: ünïcode',
      'a: b: c',
      'a: 1\n- b',
      '- a\nb: 1',
      'just a scalar',
      '  a: 1\nb: 2',
      'a:\n    b: 1\n  c: 2',
      '? complex\n: key',
      '--- a: 1',
      'a: 1\n...',
      'a: - b',
    ];
    for (const text of declined) expect(readBlockYaml(text), text).toBeUndefined();
  });

  it('agrees with js-yaml on thousands of damaged documents: reads them the same, or declines them', () => {
    // A seeded generator: the same damage on every run.
    let seed = 18;
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed % n;
    };
    const pieces = [' ', '  ', '-', '- ', ':', ': ', "'", '"', '#', 'x', '0', '.', '~', '\n', '\n  ', '\n- ', 'a: ', '[', '{', '|', '>', '&', '*', '!', '?', 'true', 'null'];
    const originals = [stringify(service), stringify(slice, { indentSeq: false })];
    let read = 0;
    for (let i = 0; i < 4000; i++) {
      let text = originals[i % originals.length];
      for (let k = 0, n = 1 + random(3); k < n; k++) {
        const at = random(text.length);
        text = random(3) === 0 ? text.slice(0, at) + text.slice(at + 1 + random(4)) : text.slice(0, at) + pieces[random(pieces.length)] + text.slice(at);
      }
      if (expectSameAsJsYaml(text) !== undefined) read++;
    }
    expect(read).toBeGreaterThan(500);
  });

  it('reads a document of comments only as no document', () => {
    expect(readBlockYaml('# nothing\n\n   # here\n')).toBeNull();
  });

  it('reads every YAML document of the repository as js-yaml does, or declines it', () => {
    const root = join(import.meta.dirname, '..', '..', '..');
    const files: string[] = [];
    const walk = (dir: string) => {
      for (const name of readdirSync(dir)) {
        if (name === 'node_modules' || name.startsWith('.') || name === 'dist') continue;
        const path = join(dir, name);
        if (statSync(path).isDirectory()) walk(path);
        else if (/\.ya?ml$/.test(name)) files.push(path);
      }
    };
    for (const dir of ['deploy', 'test', 'server']) walk(join(root, dir));
    expect(files.length).toBeGreaterThan(10);
    let read = 0;
    for (const file of files) {
      for (const doc of readFileSync(file, 'utf8').split(/^---[ \t]*(?:#.*)?$/m)) {
        try {
          jsYaml(doc);
        } catch {
          continue; // broken on purpose (tests of errors): readBlockYaml must decline it too
        } finally {
          if (expectSameAsJsYaml(doc) !== undefined) read++;
        }
      }
    }
    // Many documents of the repository are in the block style it reads (the examples use flow mappings: declined).
    expect(read).toBeGreaterThan(10);
  });
});

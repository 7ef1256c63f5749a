import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { parseManifest } from './manifest.ts';
import { parseYamlStream } from './yaml-stream.ts';

const svcJson = (name: string) => JSON.stringify({ apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'ns' }, spec: { clusterIP: '10.96.0.1', ports: [{ port: 80 }] } }, null, 2);

describe('parseYamlStream', () => {
  it('reads JSON documents separated by --- in a .json file, as generators write them', () => {
    const text = `${svcJson('web')}\n---\n${svcJson('api')}\n`;
    const parsed = parseManifest('/m/services.json', text);
    expect(parsed.objects.map((o) => o.key)).toEqual(['Service ns/web', 'Service ns/api']);
  });

  it('reads the same values as the YAML parser, whichever way each document is read', () => {
    const text = [
      svcJson('json-doc'),
      'apiVersion: v1\nkind: Service\nmetadata: { name: yaml-doc, namespace: ns }\nspec: { ports: [{ port: 80, name: "a: b" }] }',
      '{apiVersion: v1, kind: Service, metadata: {name: flow-doc}}', // a YAML flow mapping, not JSON
      '[1, 2.5, "x", null, true, {"k": [ ]}]',
      '# only a comment',
      '--- {inline: after the marker}',
      'key: |\n  block\n  text\n',
    ].join('\n---\n');
    const expected = parseAllDocuments(text).map((d) => d.toJS());
    expect(parseYamlStream('/m/x.yaml', text)).toEqual(expected.filter((d) => d !== null));
  });

  it('names the line of an error in a later document, counted in the whole file', () => {
    const text = `${svcJson('web')}\n---\nkind: Service\nmetadata: { name: broken\n`;
    // The position the YAML parser reports when it reads the whole file.
    const whole = parseAllDocuments(text, { prettyErrors: true }).flatMap((d) => d.errors)[0].linePos![0];
    expect(whole.line).toBeGreaterThan(svcJson('web').split('\n').length + 1);
    expect(() => parseYamlStream('/m/a.json', text)).toThrow(new RegExp(`^/m/a\\.json:${whole.line}:${whole.col}: invalid YAML: `));
    try {
      parseYamlStream('/m/a.json', text);
    } catch (err) {
      // The YAML parser's position is relative to the document: it must not leak into the message.
      expect((err as Error).message).not.toMatch(/at line \d/);
      expect((err as { code?: string }).code).toBe('KPROXY_ERR_MANIFEST_PARSE');
    }
  });

  it('treats "{ broken" as an error whatever the extension, never as an empty file', () => {
    for (const file of ['/m/a.yaml', '/m/a.json', '/m/a.yml']) expect(() => parseYamlStream(file, '{ broken\n')).toThrow(/invalid YAML/);
  });

  it('reads a comment-only or empty text as no documents (a legal empty file)', () => {
    expect(parseYamlStream('/m/a.yaml', '# nothing\n')).toEqual([]);
    expect(parseYamlStream('/m/a.json', '---\n---\n')).toEqual([]);
  });

  it('cuts only at marker lines: "---" inside a value or indented stays content', () => {
    const text = 'a: "x --- y"\nb: |\n  ---not a marker\n  text\n---  # a marker with a comment\nc: 1\r\n---\r\nd: 2\r\n';
    expect(parseYamlStream('/m/a.yaml', text)).toEqual([{ a: 'x --- y', b: '---not a marker\ntext\n' }, { c: 1 }, { d: 2 }]);
  });

  it('leaves a stream with directives to the YAML parser whole', () => {
    expect(parseYamlStream('/m/a.yaml', '%YAML 1.2\n---\na: 1\n---\nb: 2\n')).toEqual([{ a: 1 }, { b: 2 }]);
  });

  it('reads every manifest of the repository the same with js-yaml as with the YAML parser alone', () => {
    const root = join(import.meta.dirname, '..', '..', '..');
    const files = [
      ...readdirSync(join(root, 'deploy'))
        .filter((f) => f.endsWith('.yaml'))
        .map((f) => join(root, 'deploy', f)),
      ...readdirSync(join(root, 'deploy', 'examples')).map((f) => join(root, 'deploy', 'examples', f)),
      ...['iptables', 'nftables', 'ipvs'].flatMap((mode) => {
        const dir = join(root, 'server', 'proxy', mode, 'testdata');
        return readdirSync(dir).map((c) => join(dir, c, 'input.yaml'));
      }),
    ];
    expect(files.length).toBeGreaterThan(40);
    for (const f of files) {
      const text = readFileSync(f, 'utf8');
      expect(parseYamlStream(f, text), f).toEqual(parseYamlStream(f, text, { fast: false }));
    }
  });

  it('leaves anchors, aliases and tags to the YAML parser, which limits aliases', () => {
    const text = 'a: &x {p: 1}\nb: *x\nc: !!str 5\n';
    const [doc] = parseYamlStream('/m/a.yaml', text) as [{ a: object; b: object; c: unknown }];
    expect(doc).toEqual({ a: { p: 1 }, b: { p: 1 }, c: '5' });
    // Each level names the one before ten times: a few lines for a million values.
    const levels = ['a', 'b', 'c', 'd', 'e', 'f', 'g'];
    const bomb = levels.map((l, i) => `${l}: &${l} [${Array.from({ length: 10 }, () => (i === 0 ? 'x' : `*${levels[i - 1]}`)).join(', ')}]`).join('\n');
    expect(() => parseYamlStream('/m/bomb.yaml', bomb)).toThrow(/alias/);
  });

  it('reads the scalars of YAML 1.2 core as the YAML parser does: no timestamps, octal only as 0o, yes and no as text', () => {
    const text = 'a: 2024-01-01\nb: 014\nc: 0o14\nd: yes\ne: 1_000\nf: .inf\ng: ~\nh: 0x1F\ni: "x: y"\nj: 1e3\nk: [a, {b: c}]\nl: >-\n  folded\n  text\n';
    expect(parseYamlStream('/m/s.yaml', text)).toEqual(parseYamlStream('/m/s.yaml', text, { fast: false }));
  });
});

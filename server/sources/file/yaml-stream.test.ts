import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { parseManifest } from './manifest.ts';
import { parseYamlStream, type YamlDocument } from './yaml-stream.ts';

const values = (docs: readonly YamlDocument[]) => docs.map((d) => d.value);
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
    expect(values(parseYamlStream('/m/x.yaml', text))).toEqual(expected.filter((d) => d !== null));
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
    expect(parseYamlStream('/m/a.yaml', '---\n# nothing\n---\n~\n')).toEqual([]);
    expect(parseYamlStream('/m/a.json', '---\n---\n')).toEqual([]);
  });

  it('cuts only at marker lines: "---" inside a value or indented stays content', () => {
    const text = 'a: "x --- y"\nb: |\n  ---not a marker\n  text\n---  # a marker with a comment\nc: 1\r\n---\r\nd: 2\r\n';
    expect(values(parseYamlStream('/m/a.yaml', text))).toEqual([{ a: 'x --- y', b: '---not a marker\ntext\n' }, { c: 1 }, { d: 2 }]);
  });

  it('leaves a stream with directives to the YAML parser whole', () => {
    expect(parseYamlStream('/m/a.yaml', '%YAML 1.2\n---\na: 1\n---\nb: 2\n')).toEqual([
      { value: { a: 1 }, line: 3 },
      { value: { b: 2 }, line: 5 },
    ]);
  });

  it('gives each document the line of its first content, whichever reader read it', () => {
    const text = ['# header', '---', '', '# web', svcJson('web'), '---', 'a: 1', '---', '# tagged', 'b: !!str 2', '--- {inline: 1}', '---', 'c: 3'].join('\n');
    const n = svcJson('web').split('\n').length;
    // JSON.parse, js-yaml, the yaml package for the tagged one, and for the two documents of one chunk.
    expect(parseYamlStream('/m/a.yaml', text).map((d) => d.line)).toEqual([5, 5 + n + 1, 5 + n + 4, 5 + n + 5, 5 + n + 7]);
  });

  it('reads plain YAML, anchors, aliases, tags and complex keys as the yaml package does', () => {
    const docs = [
      'a: yes\nb: 0x1F\nc: 0o17\nd: 017\ne: ~\nf: .inf\ng: 2020-01-01T00:00:00Z\nh: 1e3\ni: "q"\nj: |\n  x\n  y\nk: >-\n  x\n  y\nl: [1, {m: n}]\nkey: first\nkey: second',
      'base: &b {x: 1}\nuse: *b\nlist: [*b, *b]',
      'n: !!str 12\nf: !!float 1\nt: !!timestamp 2020-01-01',
      '? [a, b]\n: complex key',
      'nested:\n' + Array.from({ length: 120 }, (_, i) => `${'  '.repeat(i + 1)}l${i}:`).join('\n') + ' deep',
    ];
    for (const doc of docs) {
      expect(values(parseYamlStream('/m/a.yaml', doc)), doc.slice(0, 30)).toEqual([parseAllDocuments(doc, { uniqueKeys: false })[0].toJS({ maxAliasCount: 100 })]);
    }
  });

  it('refuses an alias bomb as the yaml package does', () => {
    const bomb = [
      'a: &a [x, x, x, x, x, x, x, x, x, x]',
      ...Array.from(
        { length: 8 },
        (_, i) =>
          `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [${Array(10)
            .fill(`*${String.fromCharCode(97 + i)}`)
            .join(', ')}]`,
      ),
    ].join('\n');
    expect(() => parseYamlStream('/m/a.yaml', bomb)).toThrow(/^\/m\/a\.yaml:1: invalid YAML: .*alias/i);
  });

  it('reads every manifest of the repository as the yaml package alone reads it', () => {
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
      const yamlPackage = parseAllDocuments(text, { uniqueKeys: false }).map((d) => d.toJS({ maxAliasCount: 100 }) as unknown);
      expect(values(parseYamlStream(f, text)), f).toEqual(yamlPackage.filter((v) => v !== null && v !== undefined));
    }
  });

  it('reads the scalars of YAML 1.2 core as the yaml package does: no timestamps, octal only as 0o, yes and no as text', () => {
    const text = 'a: 2024-01-01\nb: 014\nc: 0o14\nd: yes\ne: 1_000\nf: .inf\ng: ~\nh: 0x1F\ni: "x: y"\nj: 1e3\nk: [a, {b: c}]\nl: >-\n  folded\n  text\n';
    expect(values(parseYamlStream('/m/s.yaml', text))).toEqual([parseAllDocuments(text, { uniqueKeys: false })[0].toJS()]);
  });
});

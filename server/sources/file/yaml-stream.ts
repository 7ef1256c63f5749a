import { loadAll } from 'js-yaml';
import { parseAllDocuments } from 'yaml';
import { errorMessage, ManifestParseError } from '../../errors.ts';
import { readBlockYaml } from './block-yaml.ts';

/**
 * MARKER: a line that is only a document start marker ("---", optionally a
 * comment). YAML ends a document at such a line wherever it stands, even
 * inside a block or quoted scalar (the spec's "c-forbidden" lines), so cutting
 * the text there yields exactly the stream's documents.
 */
const MARKER = /^---[ \t]*(?:#.*)?$/;

/**
 * NOT_FOR_FAST_YAML: characters of the YAML features the fast parser reads
 * differently from the yaml package or not at all (tags, anchors and
 * aliases); a document holding one anywhere, even inside a string, is read by
 * the yaml package.
 */
const NOT_FOR_FAST_YAML = /[!&*]/;

/** YamlDocument is one non-empty document of a stream and the line it starts on. */
export interface YamlDocument {
  readonly value: unknown;
  /** line: 1-based line of the document's first content in the file. */
  readonly line: number;
}

/**
 * parseYamlStream reads a YAML stream (documents separated by `---`) into plain
 * values, whatever the file's extension: every JSON text is a YAML document, so
 * `.json` files with several documents (as generators write them) work too.
 * Empty documents (blank, comments only, `~`) are left out. Each document takes
 * the cheapest reader that reads it exactly as the YAML parser would:
 *
 * - one that looks like JSON (`{` or `[` first) is read with JSON.parse;
 * - one without tags, anchors or aliases in the plain block style generators
 *   write, a line at a time (readBlockYaml, which reads them as js-yaml does);
 * - other ones without tags, anchors or aliases with js-yaml (YAML 1.2 core
 *   schema, the later of two equal keys wins): about ten times faster than the
 *   yaml package on Kubernetes manifests (docs/performance.md, "Parsing manifests");
 * - the rest, and any document those refuse, with the yaml package, which
 *   reports the error.
 *
 * Throws ManifestParseError naming file:line:column of the first error.
 */
export function parseYamlStream(file: string, text: string): YamlDocument[] {
  return [...yamlDocuments(file, text)];
}

/**
 * yamlDocuments reads the documents of a stream one at a time, as
 * parseYamlStream does: a caller that keeps part of each document lets the
 * rest go before the next one is read (a big manifest's documents are then
 * never all held at once).
 */
export function* yamlDocuments(file: string, text: string): Generator<YamlDocument> {
  // A directive (%YAML, %TAG) applies to the document after it: leave such rare
  // streams to the YAML parser whole rather than cut them apart.
  if (hasDirective(text)) return yield* parseYaml(file, text, 0);
  for (const chunk of chunks(text)) {
    const body = chunk.text.trim();
    if (body === '') continue;
    const line = chunk.line + firstContentLine(chunk.text);
    if (body[0] === '{' || body[0] === '[') {
      let json: { value: unknown } | null = null;
      try {
        json = { value: JSON.parse(body) };
      } catch {
        // Not JSON (a YAML flow mapping, or broken): the YAML readers decide, and say where.
      }
      if (json) {
        yield { value: json.value, line };
        continue;
      }
    }
    const forJsYaml = !NOT_FOR_FAST_YAML.test(chunk.text);
    // Block-style documents (most of a generated or exported manifest) are read a line at a time.
    const block = forJsYaml ? readBlockYaml(chunk.text) : undefined;
    if (block !== undefined) {
      if (block !== null) yield { value: block, line };
      continue;
    }
    const fast = forJsYaml ? fastYaml(chunk.text) : null;
    if (fast) {
      if (fast.length === 1 && fast[0] !== null && fast[0] !== undefined) yield { value: fast[0], line };
      continue;
    }
    yield* parseYaml(file, chunk.text, chunk.line - 1);
  }
}

/**
 * fastYaml reads a chunk with js-yaml when it holds at most one document;
 * null means "let the yaml package read it" (an error, whose message the yaml
 * package words with its position, or several documents, whose lines only it
 * tells).
 */
function fastYaml(text: string): unknown[] | null {
  try {
    const docs = loadAll(text, { json: true, maxAliases: 0 });
    return docs.length <= 1 ? docs : null;
  } catch {
    return null;
  }
}

/**
 * hasDirective: a line starts with `%` (what /^%/m finds: after any of
 * JavaScript's line terminators), without a regular expression's walk over
 * every line of a big file.
 */
function hasDirective(text: string): boolean {
  return text[0] === '%' || text.includes('\n%') || text.includes('\r%') || text.includes('\u2028%') || text.includes('\u2029%');
}

/** firstContentLine: how many lines of `text` come before its first line that is neither blank nor a comment. */
function firstContentLine(text: string): number {
  let skipped = 0;
  let pos = 0;
  while (pos < text.length) {
    let end = text.indexOf('\n', pos);
    if (end < 0) end = text.length;
    const line = text.slice(pos, end).trim();
    if (line !== '' && line[0] !== '#') return skipped;
    skipped++;
    pos = end + 1;
  }
  return 0;
}

interface Chunk {
  /** line: 1-based line of the chunk's first line in the file. */
  readonly line: number;
  readonly text: string;
}

/** chunks cuts the text at marker lines (the markers themselves belong to no chunk). */
function chunks(text: string): Chunk[] {
  const out: Chunk[] = [];
  let start = 0;
  let startLine = 1;
  let line = 1;
  let pos = 0;
  while (pos <= text.length) {
    let end = text.indexOf('\n', pos);
    if (end < 0) end = text.length;
    // Only lines starting with "---" can be markers: test the cheap prefix first.
    if (text.startsWith('---', pos) && MARKER.test(text.slice(pos, end).replace(/\r$/, ''))) {
      out.push({ line: startLine, text: text.slice(start, pos) });
      start = end + 1;
      startLine = line + 1;
    }
    pos = end + 1;
    line++;
  }
  if (start < text.length) out.push({ line: startLine, text: text.slice(start) });
  return out;
}

function parseYaml(file: string, text: string, lineOffset: number): YamlDocument[] {
  const docs: YamlDocument[] = [];
  for (const doc of parseAllDocuments(text, { prettyErrors: true, uniqueKeys: false })) {
    const first = doc.errors[0];
    if (first) {
      const pos = first.linePos?.[0];
      const where = pos ? `${file}:${pos.line + lineOffset}:${pos.col}` : file;
      // The YAML parser's message repeats its position, relative to the document
      // it was given: keep its first line without it. No `cause`: its whole text is
      // this message, with the position translated to the file.
      const message = first.message.split('\n')[0].replace(/ at line \d+, column \d+:?$/, '');
      throw new ManifestParseError(`${where}: invalid YAML: ${message}`);
    }
    const line = lineOffset + lineOf(text, doc.contents?.range[0] ?? 0);
    let value: unknown;
    try {
      value = doc.toJS({ maxAliasCount: 100 });
    } catch (err) {
      // An alias bomb ("Excessive alias count indicates a resource exhaustion attack").
      throw new ManifestParseError(`${file}:${line}: invalid YAML: ${errorMessage(err)}`);
    }
    if (value === null || value === undefined) continue;
    docs.push({ value, line });
  }
  return docs;
}

/** lineOf: the 1-based line of an offset in text. */
function lineOf(text: string, offset: number): number {
  let line = 1;
  for (let i = text.indexOf('\n'); i >= 0 && i < offset; i = text.indexOf('\n', i + 1)) line++;
  return line;
}

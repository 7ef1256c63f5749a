import { CORE_SCHEMA, load } from 'js-yaml';
import { parseAllDocuments } from 'yaml';
import { ManifestParseError } from '../../errors.ts';

/**
 * MARKER: a line that is only a document start marker ("---", optionally a
 * comment). YAML ends a document at such a line wherever it stands, even
 * inside a block or quoted scalar (the spec's "c-forbidden" lines), so cutting
 * the text there yields exactly the stream's documents.
 */
const MARKER = /^---[ \t]*(?:#.*)?$/;

/**
 * parseYamlStream reads a YAML stream (documents separated by `---`) into plain
 * values, whatever the file's extension: every JSON text is a YAML document, so
 * `.json` files with several documents (as generators write them) work too. A
 * document that looks like JSON (`{` or `[` first) is read with JSON.parse,
 * several times faster than the YAML parser on large files; one that is not
 * valid JSON is read as YAML, which reports the error. Other documents are
 * read with js-yaml where it reads what the YAML parser reads (readFast),
 * about six times faster: 20,000 documents are a cold start's longest step
 * otherwise. Throws ManifestParseError naming file:line:column of the first
 * error. opts.fast false: the YAML parser only (tests compare the two).
 */
export function parseYamlStream(file: string, text: string, opts: { fast?: boolean } = {}): unknown[] {
  // A directive (%YAML, %TAG) applies to the document after it: leave such rare
  // streams to the YAML parser whole rather than cut them apart.
  if (/^%/m.test(text)) return parseYaml(file, text, 0);
  const docs: unknown[] = [];
  for (const chunk of chunks(text)) {
    const body = chunk.text.trim();
    if (body === '') continue;
    if (body[0] === '{' || body[0] === '[') {
      try {
        docs.push(JSON.parse(body));
        continue;
      } catch {
        // Not JSON (a YAML flow mapping, or broken): the YAML parser decides and says where.
      }
    }
    const fast = opts.fast === false ? NOT_READ : readFast(chunk.text);
    if (fast === NOT_READ) docs.push(...parseYaml(file, chunk.text, chunk.line - 1));
    // A document of comments only is no document, as for the YAML parser.
    else if (fast !== undefined) docs.push(fast);
  }
  return docs;
}

/** NOT_READ: readFast left the document to the YAML parser. */
const NOT_READ = Symbol('not read');

/**
 * SLOW_ONLY: characters that may start an anchor, an alias or a tag. js-yaml
 * puts no limit on aliases (a few lines can stand for billions of values) and
 * knows other tags: such documents, rare in manifests, go to the YAML parser
 * (maxAliasCount), as does any document js-yaml refuses (the YAML parser says
 * where the error is, in its words).
 */
const SLOW_ONLY = /[&*!]/;

/**
 * readFast reads one document with js-yaml's YAML 1.2 core schema, as the
 * YAML parser reads it (no timestamps, no merge keys, a repeated key's last
 * value wins), or returns NOT_READ; undefined: no document (comments only).
 */
function readFast(text: string): unknown {
  if (SLOW_ONLY.test(text)) return NOT_READ;
  try {
    return load(text, { schema: CORE_SCHEMA, json: true });
  } catch {
    return NOT_READ;
  }
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

function parseYaml(file: string, text: string, lineOffset: number): unknown[] {
  const docs: unknown[] = [];
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
    docs.push(doc.toJS({ maxAliasCount: 100 }));
  }
  return docs;
}

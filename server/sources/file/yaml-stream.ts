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
 * valid JSON is read as YAML, which reports the error. Throws
 * ManifestParseError naming file:line:column of the first error.
 */
export function parseYamlStream(file: string, text: string): unknown[] {
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
    docs.push(...parseYaml(file, chunk.text, chunk.line - 1));
  }
  return docs;
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

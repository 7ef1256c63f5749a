import { CORE_SCHEMA } from 'js-yaml';

/**
 * readBlockYaml reads one document written in the plain block style that
 * generators and `kubectl get -o yaml` write (nested `key: value` mappings and
 * `- ` sequences, plain or simply quoted scalars, whole-line comments), or
 * returns undefined for anything else: a flow collection, a block or
 * multi-line scalar, an escape, a tab, a carriage return, any character that
 * is not printable ASCII, a duplicate or unusual key, a `#` anywhere but at the
 * start of a comment line, or a structure it does not follow. The caller then
 * reads the document with js-yaml, which reads everything this reader reads
 * the same way: plain scalars resolve through js-yaml's own core schema, and
 * mappings are plain objects as js-yaml builds them. A node's first read of a
 * big cluster exported as YAML is mostly this: parseManifest on 20,000 such
 * documents takes half the CPU it took with js-yaml (docs/performance.md,
 * "Memory and cold start").
 * Returns null for a document with no content (comments only).
 */
export function readBlockYaml(text: string): unknown {
  if (NOT_PLAIN_ASCII.test(text)) return undefined;
  const r = new BlockReader(text);
  try {
    const n = r.lines();
    if (n === 0) return null;
    const value = r.block(r.firstIndent());
    return r.at === n ? value : undefined;
  } catch (err) {
    if (err === NOT_BLOCK) return undefined;
    throw err;
  }
}

/** NOT_PLAIN_ASCII: anything but printable ASCII and newlines (tabs, carriage returns, control characters, non-ASCII). */
const NOT_PLAIN_ASCII = /[^\n\x20-\x7e]/;

/** NOT_BLOCK is thrown inside the reader when the document leaves the block style it reads. */
const NOT_BLOCK = Symbol('not block YAML');

/**
 * KEYS: keys already checked to read as themselves (a key like `true` or
 * `null` would not), each held once: the object built from a document then
 * uses the same string as its property name, which V8 looks up only once.
 */
const KEYS = new Map<string, string>();
/** KEYS_LIMIT bounds KEYS: past it the map starts over (only speed is lost). */
const KEYS_LIMIT = 10_000;

/**
 * BlockReader reads the content lines of one document. A line is three
 * numbers: its indent (the column of its content, moved in for `- key:
 * value`), and where its content starts and ends in the text (trailing
 * spaces left out); nothing is cut from the text but keys and scalars.
 */
class BlockReader {
  readonly #text: string;
  #indent: number[] = [];
  #start: number[] = [];
  #end: number[] = [];
  /** at: the next line to read. */
  at = 0;

  constructor(text: string) {
    this.#text = text;
  }

  /** lines finds the content lines, leaving blank and comment lines out (a `#` elsewhere throws NOT_BLOCK), and counts them. */
  lines(): number {
    const text = this.#text;
    let pos = 0;
    // hash: the next `#` at or after the line being read (found once per `#`, not per line: a
    // document of many lines, a whole List, would otherwise be searched to its end for each).
    let hash = -1;
    while (pos < text.length) {
      let end = text.indexOf('\n', pos);
      if (end < 0) end = text.length;
      let i = pos;
      while (i < end && text.charCodeAt(i) === 32) i++;
      if (i < end && text.charCodeAt(i) !== 35) {
        let e = end;
        while (text.charCodeAt(e - 1) === 32) e--;
        if (hash !== Infinity && hash < i) {
          hash = text.indexOf('#', i);
          if (hash < 0) hash = Infinity;
        }
        if (hash < e) throw NOT_BLOCK;
        this.#indent.push(i - pos);
        this.#start.push(i);
        this.#end.push(e);
      }
      pos = end + 1;
    }
    return this.#indent.length;
  }

  firstIndent(): number {
    return this.#indent[0];
  }

  /** block reads the mapping or sequence whose first line is the next one, at `indent`. */
  block(indent: number): unknown {
    if (this.#indent[this.at] !== indent) throw NOT_BLOCK;
    return this.#isEntry(this.#start[this.at], this.#end[this.at]) ? this.#sequence(indent) : this.#mapping(indent);
  }

  #mapping(indent: number): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    const text = this.#text;
    const n = this.#indent.length;
    while (this.at < n) {
      const at = this.at;
      const lineIndent = this.#indent[at];
      if (lineIndent < indent) break;
      if (lineIndent > indent) throw NOT_BLOCK;
      const start = this.#start[at];
      const end = this.#end[at];
      if (this.#isEntry(start, end)) break; // the parent's sequence (or an error the caller finds)
      const colon = keyEnd(text, start, end);
      if (colon < 0) throw NOT_BLOCK;
      const key = readKey(text.slice(start, colon));
      if (Object.hasOwn(out, key)) throw NOT_BLOCK;
      let v = colon + 1;
      while (v < end && text.charCodeAt(v) === 32) v++;
      this.at++;
      out[key] = v === end ? this.#nested(indent, true) : this.#inline(v, end, indent);
    }
    return out;
  }

  #sequence(indent: number): unknown[] {
    const out: unknown[] = [];
    const text = this.#text;
    const n = this.#indent.length;
    while (this.at < n) {
      const at = this.at;
      const lineIndent = this.#indent[at];
      if (lineIndent < indent) break;
      if (lineIndent > indent) throw NOT_BLOCK;
      const start = this.#start[at];
      const end = this.#end[at];
      if (!this.#isEntry(start, end)) break;
      let v = start + 1;
      while (v < end && text.charCodeAt(v) === 32) v++;
      if (v === end) {
        this.at++;
        out.push(this.#nested(indent, false));
        continue;
      }
      if (this.#isEntry(v, end) || keyEnd(text, v, end) >= 0) {
        // `- key: value` (or `- - item`): a collection whose column is that of its first entry.
        this.#indent[at] = indent + v - start;
        this.#start[at] = v;
        out.push(this.block(this.#indent[at]));
        continue;
      }
      this.at++;
      out.push(this.#inline(v, end, indent));
    }
    return out;
  }

  /** #nested: the value of a `key:` or `-` with nothing after it: a collection on the next lines, or null. */
  #nested(indent: number, inMapping: boolean): unknown {
    if (this.at === this.#indent.length) return null;
    const next = this.#indent[this.at];
    if (next > indent) return this.block(next);
    // A mapping's value may be a sequence at the mapping's own indent (`ports:` then `- name: …`).
    if (inMapping && next === indent && this.#isEntry(this.#start[this.at], this.#end[this.at])) return this.#sequence(indent);
    return null;
  }

  /** #inline: a scalar after `key: ` or `- `; nothing may follow on more indented lines. */
  #inline(start: number, end: number, indent: number): unknown {
    if (this.at < this.#indent.length && this.#indent[this.at] > indent) throw NOT_BLOCK;
    return scalar(this.#text.slice(start, end));
  }

  /** #isEntry: a sequence entry (`-` alone or followed by a space). */
  #isEntry(start: number, end: number): boolean {
    return this.#text.charCodeAt(start) === 45 && (start + 1 === end || this.#text.charCodeAt(start + 1) === 32);
  }
}

/**
 * keyEnd: where the `:` after a key as generators write one (a letter or `_`,
 * then letters, digits, `_`, `.`, `/`, `-`) stands, followed by a space or the
 * line's end; -1 when the line does not start so.
 */
function keyEnd(text: string, start: number, end: number): number {
  let c = text.charCodeAt(start);
  if (!((c >= 97 && c <= 122) || (c >= 65 && c <= 90) || c === 95)) return -1;
  for (let i = start + 1; i < end; i++) {
    c = text.charCodeAt(i);
    if ((c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 45 && c <= 57) || c === 95) continue; // 45-57: - . / 0-9
    if (c !== 58) return -1;
    return i + 1 === end || text.charCodeAt(i + 1) === 32 ? i : -1;
  }
  return -1;
}

/** readKey: the shared copy of a key that reads as itself; throws NOT_BLOCK for `-1` (no key), `true`, `null`, `__proto__`... */
function readKey(text: string): string {
  const known = KEYS.get(text);
  if (known !== undefined) return known;
  if (text === '' || text === '__proto__' || CORE_SCHEMA.resolveImplicitScalarTag(text).value !== text) throw NOT_BLOCK;
  if (KEYS.size >= KEYS_LIMIT) KEYS.clear();
  KEYS.set(text, text);
  return text;
}

/** scalar reads a one-line scalar: plain (resolved by the core schema), single-quoted, or double-quoted without escapes. */
function scalar(text: string): unknown {
  const c = text[0];
  if (c === "'") {
    let out = '';
    let i = 1;
    for (;;) {
      const q = text.indexOf("'", i);
      if (q < 0) throw NOT_BLOCK;
      out += text.slice(i, q);
      if (text[q + 1] === "'") {
        out += "'";
        i = q + 2;
        continue;
      }
      if (q !== text.length - 1) throw NOT_BLOCK;
      return out;
    }
  }
  if (c === '"') {
    const q = text.indexOf('"', 1);
    if (q !== text.length - 1 || text.includes('\\')) throw NOT_BLOCK;
    return text.slice(1, q);
  }
  // Indicators, flow collections, and a `: ` inside (a mapping where a scalar belongs, an error): js-yaml decides.
  if (PLAIN_REFUSED.test(text) || text.includes(': ') || text.endsWith(':')) throw NOT_BLOCK;
  return CORE_SCHEMA.resolveImplicitScalarTag(text).value;
}

/** PLAIN_REFUSED: a plain scalar starting with an indicator (a lone `-` or `- ` too), or holding a flow indicator. */
const PLAIN_REFUSED = /^(?:[?:,[\]{}#&*!|>'"%@`]|-(?: |$))|[[\]{},]/;

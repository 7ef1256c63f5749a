import { RuleBuildError } from '../../errors.ts';

/**
 * Helpers that put values into iptables-restore text. Everything that reaches
 * the text goes through them: a value that could change the meaning of a line
 * (a quote, a backslash, a newline, an over-long comment) is refused with a
 * RuleBuildError instead of being written, so one bad Service can be skipped
 * without breaking the batch every other Service shares.
 */

/** The kernel's comment match keeps at most 255 characters (XT_MAX_COMMENT_LEN - 1). */
export const MAX_COMMENT_LENGTH = 255;

/** Characters a comment may carry without quotes; kube-proxy writes such comments bare. */
const BARE = /^[A-Za-z0-9_./:@,+=[\]-]+$/;
/** Characters a comment may carry at all (printable ASCII minus quote and backslash). */
const PRINTABLE = /^[\x20-\x21\x23-\x5b\x5d-\x7e]*$/;

/**
 * comment renders a comment argument as kube-proxy does: bare when it is one
 * word ("ns1/svc1:p80"), in double quotes when it has spaces
 * ("\"ns1/svc1:p80 cluster IP\""). Throws RuleBuildError for text that cannot
 * be written safely.
 */
export function comment(text: string): string {
  if (text.length === 0 || text.length > MAX_COMMENT_LENGTH) {
    throw new RuleBuildError(`comment ${JSON.stringify(text.slice(0, 60))} must be 1 to ${MAX_COMMENT_LENGTH} characters`);
  }
  if (BARE.test(text)) return text;
  if (!PRINTABLE.test(text)) throw new RuleBuildError(`comment ${JSON.stringify(text.slice(0, 60))} holds a quote, backslash or control character`);
  return `"${text}"`;
}

/** chainLine declares (and, under --noflush, flushes) a user chain. */
export function chainLine(chain: string): string {
  return `:${chain} - [0:0]`;
}

/**
 * LineBuffer collects restore lines; text() joins them once. Fragments that
 * are already newline-terminated text (cached per service) go in with
 * writeText so they are not split again.
 */
export class LineBuffer {
  readonly #parts: string[] = [];
  #lines = 0;

  /** write adds one line made of words. */
  write(...words: string[]): void {
    this.#parts.push(words.join(' ') + '\n');
    this.#lines++;
  }

  /** writeLine adds one complete line (no newline). */
  writeLine(line: string): void {
    this.#parts.push(line + '\n');
    this.#lines++;
  }

  /** writeText adds text of lineCount newline-terminated lines. */
  writeText(text: string, lineCount: number): void {
    if (lineCount === 0) return;
    this.#parts.push(text);
    this.#lines += lineCount;
  }

  get lines(): number {
    return this.#lines;
  }

  text(): string {
    return this.#parts.join('');
  }
}

/**
 * extractLines returns the blamed lines of a restore input with `context`
 * lines around each, numbered, the blamed ones marked with ">" (what the log
 * and the error carry so an operator sees the rule that broke).
 */
export function extractLines(input: string, lines: readonly number[], context = 2): string {
  if (lines.length === 0) return '';
  const all = input.split('\n');
  const show = new Set<number>();
  for (const n of lines) for (let i = Math.max(1, n - context); i <= Math.min(all.length, n + context); i++) show.add(i);
  const blamed = new Set(lines);
  return [...show]
    .sort((a, b) => a - b)
    .map((i) => `${blamed.has(i) ? '>' : ' '}${String(i).padStart(6)}: ${all[i - 1]}`)
    .join('\n');
}

/**
 * probability formats 1/n like Go's fmt "%0.10f" (kube-proxy's
 * computeProbability). JavaScript's toFixed rounds exact halves up where Go
 * rounds them to even; 1/2048 = 0.00048828125 is the one such case in range.
 */
export function probability(n: number): string {
  const scaled = 1e10 / n;
  if (!Number.isInteger(scaled) && Number.isInteger(scaled * 2)) {
    const down = Math.floor(scaled);
    const even = down % 2 === 0 ? down : down + 1;
    return (even / 1e10).toFixed(10);
  }
  return (1 / n).toFixed(10);
}

/** ProbabilityCache memoizes probability(n) (kube-proxy precomputes them too: float formatting is slow). */
export class ProbabilityCache {
  readonly #values: string[] = ['<bad value>'];
  get(n: number): string {
    for (let i = this.#values.length; i <= n; i++) this.#values.push(probability(i));
    return this.#values[n];
  }
}

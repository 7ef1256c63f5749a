/**
 * Label and field selectors as the Kubernetes API server parses them, for the
 * fake API server. Label selectors: `key`, `!key`, `key=v`, `key==v`, `key!=v`,
 * `key in (a,b)`, `key notin (a,b)`, joined by commas (AND). Field selectors:
 * `path=v`, `path==v`, `path!=v`, joined by commas, over the fields a resource
 * supports (anything else is a 400, as on a real server).
 */
export type Matcher = (obj: Record<string, unknown>) => boolean;

export class SelectorError extends Error {}

/** splitTopLevel splits on commas outside parentheses ("a in (x,y),!b" -> two terms). */
function splitTopLevel(s: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of s) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      out.push(cur);
      cur = '';
    } else cur += ch;
  }
  out.push(cur);
  return out.map((t) => t.trim()).filter((t) => t !== '');
}

function labelsOf(obj: Record<string, unknown>): Record<string, string> {
  const meta = obj.metadata as { labels?: Record<string, string> } | undefined;
  return meta?.labels ?? {};
}

/** parseLabelSelector turns a label selector string into a matcher. */
export function parseLabelSelector(selector: string | null | undefined): Matcher {
  if (!selector) return () => true;
  const reqs: Matcher[] = splitTopLevel(selector).map((term) => {
    let m = /^!\s*([\w./-]+)$/.exec(term);
    if (m) {
      const key = m[1];
      return (o) => !(key in labelsOf(o));
    }
    m = /^([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(term);
    if (m) {
      const [, key, op, list] = m;
      const values = new Set(list.split(',').map((v) => v.trim()));
      return op === 'in' ? (o) => values.has(labelsOf(o)[key]) : (o) => !values.has(labelsOf(o)[key]);
    }
    m = /^([\w./-]+)\s*(==|=|!=)\s*([\w.-]*)$/.exec(term);
    if (m) {
      const [, key, op, value] = m;
      return op === '!=' ? (o) => labelsOf(o)[key] !== value : (o) => labelsOf(o)[key] === value;
    }
    m = /^([\w./-]+)$/.exec(term);
    if (m) {
      const key = m[1];
      return (o) => key in labelsOf(o);
    }
    throw new SelectorError(`unable to parse requirement: ${JSON.stringify(term)}`);
  });
  return (o) => reqs.every((r) => r(o));
}

function fieldValue(obj: Record<string, unknown>, path: string): string {
  let cur: unknown = obj;
  for (const part of path.split('.')) {
    if (cur == null || typeof cur !== 'object') return '';
    cur = (cur as Record<string, unknown>)[part];
  }
  return cur == null ? '' : String(cur);
}

/** parseFieldSelector turns a field selector into a matcher, refusing fields the resource does not index. */
export function parseFieldSelector(selector: string | null | undefined, supported: readonly string[]): Matcher {
  if (!selector) return () => true;
  const reqs: Matcher[] = splitTopLevel(selector).map((term) => {
    const m = /^([\w.]+)\s*(==|=|!=)\s*(.*)$/.exec(term);
    if (!m) throw new SelectorError(`invalid selector: ${JSON.stringify(term)}; can't understand it`);
    const [, path, op, value] = m;
    if (!supported.includes(path)) throw new SelectorError(`field label not supported: ${path}`);
    return op === '!=' ? (o) => fieldValue(o, path) !== value : (o) => fieldValue(o, path) === value;
  });
  return (o) => reqs.every((r) => r(o));
}

/** FLATTEN: any RegExp; testing a string with one makes V8 flatten it (see flatString). */
const FLATTEN = /^/;

/**
 * flatString returns s held as one flat string. V8 keeps the result of a
 * concatenation as a tree of its parts (a cons string, 32 bytes a node) until
 * something needs it flat, and a string built piece by piece (a chain name, an
 * "ip:port" key) can take several times its text: at 10,000 Services × 10
 * endpoints the chain names and endpoint keys kept between syncs held about
 * 15 MB of such trees. A RegExp test flattens its subject in place, and the
 * garbage collector then drops the tree. For strings held long; a short-lived
 * one is not worth it.
 */
export function flatString(s: string): string {
  FLATTEN.test(s);
  return s;
}

/**
 * ownCopy returns a string equal to s that holds no reference to a text s may
 * be a slice of: V8 keeps a slice's whole parent alive, so a chain name or a
 * rule kept from a 30 MB listing would keep the listing. Concatenating makes
 * a new string, and slicing it flattens that into a string of its own.
 */
export function ownCopy(s: string): string {
  return (' ' + s).slice(1);
}

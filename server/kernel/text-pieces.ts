/**
 * textPieces cuts a text into pieces of at most `size` characters, each to be
 * encoded on its own (written to a process or a file, deflated, sent): a long
 * text encoded whole would first be copied into one buffer of its full size.
 * A piece never ends between the two halves of a surrogate pair, which would
 * encode as two replacement characters.
 */
export function* textPieces(text: string, size: number): Generator<string> {
  for (let at = 0; at < text.length;) {
    let end = Math.min(at + Math.max(size, 2), text.length);
    if (end < text.length && isHighSurrogate(text.charCodeAt(end - 1))) end--;
    yield text.slice(at, end);
    at = end;
  }
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

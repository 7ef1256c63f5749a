import { promisify } from 'node:util';
import { deflate, inflate, inflateSync } from 'node:zlib';

const deflateAsync = promisify(deflate);
const inflateAsync = promisify(inflate);

/** PACK_MIN_CHARS: a text shorter than this stays text (a small node's rules: not worth a thread). */
export const PACK_MIN_CHARS = 256 * 1024;

/**
 * PackedText keeps a text that is held long and read rarely (the last restore
 * input, for the dashboard's download; the base of its record of what kproxy
 * wrote) deflated: at 10,000 Services × 10 endpoints a restore input is 33 MB
 * of text and about 5 MB deflated. The text is kept as given until the
 * deflate, on libuv's threads off the event loop, is done; from then on only
 * the deflated bytes, and each read inflates them again (nothing stays
 * inflated once the reader is done: a download, a dashboard looking).
 */
export class PackedText {
  /** length: the text's length in characters. */
  readonly length: number;
  #text: string | null;
  #packed: Buffer | null = null;
  #packing: Promise<void> | null = null;

  constructor(text: string, minChars = PACK_MIN_CHARS) {
    this.length = text.length;
    this.#text = text;
    if (text.length >= minChars) this.#pack(text);
  }

  /** heldBytes: what is held now, deflated bytes or the text's characters. */
  get heldBytes(): number {
    return this.#packed?.length ?? this.#text?.length ?? 0;
  }

  /** isPacked: only the deflated bytes are held. */
  get isPacked(): boolean {
    return this.#packed !== null;
  }

  /** packed resolves once the text is deflated (or kept as text: too small, or the deflate failed). */
  async packed(): Promise<void> {
    await this.#packing;
  }

  /** text returns the text, inflating it off the event loop when it is held deflated. */
  async text(): Promise<string> {
    if (this.#text !== null) return this.#text;
    return (await inflateAsync(this.#packed!)).toString('utf8');
  }

  /** textSync returns the text at once (tests, and what must not wait); prefer text() on the daemon's paths. */
  textSync(): string {
    return this.#text ?? inflateSync(this.#packed!).toString('utf8');
  }

  #pack(text: string): void {
    this.#packing = (async () => {
      try {
        this.#packed = await deflateAsync(Buffer.from(text, 'utf8'), { level: 1 });
        this.#text = null;
      } catch {
        // Out of memory in zlib, at worst: the text stays, which costs memory but loses nothing.
      } finally {
        this.#packing = null;
      }
    })();
  }
}

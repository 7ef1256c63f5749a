import { once } from 'node:events';
import { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { createDeflate, createInflate, inflateSync } from 'node:zlib';
import { textPieces } from '../kernel/text-pieces.ts';

/** DEFLATE_CHUNK: characters encoded and handed to zlib at a time. */
const DEFLATE_CHUNK = 1 << 20;

/**
 * deflateText deflates a text a piece at a time: handed over whole, a 33 MB
 * text would first be copied into a 33 MB buffer, right after the sync that
 * made it, when memory is at its highest.
 */
async function deflateText(texts: Iterable<string>): Promise<Buffer> {
  const z = createDeflate({ level: 1 });
  const out: Buffer[] = [];
  z.on('data', (b: Buffer) => out.push(b));
  const ended = once(z, 'end');
  for (const text of texts) {
    for (const piece of textPieces(text, DEFLATE_CHUNK)) if (!z.write(piece)) await once(z, 'drain');
  }
  z.end();
  await ended;
  return Buffer.concat(out);
}

/** STREAM_CHUNK: deflated bytes handed to the inflater at a time when a packed text is streamed. */
const STREAM_CHUNK = 64 * 1024;

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
  #length: number;
  #text: string | null;
  #packed: Buffer | null = null;
  #packing: Promise<void> | null = null;

  constructor(text: string, minChars = PACK_MIN_CHARS) {
    this.#length = text.length;
    this.#text = text;
    if (text.length >= minChars) this.#pack(text);
  }

  /**
   * fromPieces packs a text given in pieces (a formatted file) without ever
   * joining them into one string: the pieces are deflated as they come and
   * only the deflated bytes are kept.
   */
  static async fromPieces(pieces: readonly string[]): Promise<PackedText> {
    const p = new PackedText('', Infinity);
    p.#length = pieces.reduce((n, x) => n + x.length, 0);
    p.#text = null;
    p.#packed = await deflateText(pieces);
    return p;
  }

  /** length: the text's length in characters. */
  get length(): number {
    return this.#length;
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

  /**
   * text returns the text, inflating it off the event loop when it is held
   * deflated. The inflated bytes are decoded as they come, a chunk per turn of
   * the event loop, and joined once at the end: inflated whole, 33 MB of bytes
   * were concatenated and decoded in one piece (about 50 ms with the event
   * loop held, in the middle of a dashboard's first look).
   */
  async text(): Promise<string> {
    if (this.#text !== null) return this.#text;
    const decoder = new StringDecoder('utf8');
    const pieces: string[] = [];
    for await (const chunk of this.stream()) pieces.push(decoder.write(chunk as Buffer));
    pieces.push(decoder.end());
    return pieces.join('');
  }

  /**
   * deflated returns the deflated bytes (zlib format: what HTTP's
   * `Content-Encoding: deflate` carries), null when the text is held as text.
   */
  async deflated(): Promise<Buffer | null> {
    await this.#packing;
    return this.#packed;
  }

  /**
   * stream gives the text as a stream of UTF-8 pieces, inflated on libuv's
   * threads a chunk at a time: a download of a large text never holds it
   * whole nor encodes it in one go on the event loop.
   */
  stream(): Readable {
    const packed = this.#packed;
    if (packed === null) {
      const text = this.#text ?? '';
      return Readable.from(
        (function* () {
          for (const piece of textPieces(text, DEFLATE_CHUNK)) yield Buffer.from(piece, 'utf8');
        })(),
      );
    }
    const chunks = (function* () {
      for (let at = 0; at < packed.length; at += STREAM_CHUNK) yield packed.subarray(at, at + STREAM_CHUNK);
    })();
    const inflater = createInflate();
    Readable.from(chunks).pipe(inflater);
    return inflater;
  }

  /** textSync returns the text at once (tests, and what must not wait); prefer text() on the daemon's paths. */
  textSync(): string {
    return this.#text ?? inflateSync(this.#packed!).toString('utf8');
  }

  #pack(text: string): void {
    this.#packing = (async () => {
      try {
        this.#packed = await deflateText([text]);
        this.#text = null;
      } catch {
        // Out of memory in zlib, at worst: the text stays, which costs memory but loses nothing.
      } finally {
        this.#packing = null;
      }
    })();
  }
}

import { IptablesParseError } from '../../errors.ts';
import { IptablesSyntaxError, parseIptablesScript, type ChainLine, type CommandLine } from '../../kernel/iptables-save-parser.ts';
import type { Yield } from '../yield.ts';

/** CHUNK_LINES: lines parsed between two yields (about 5 ms of work). */
export const CHUNK_LINES = 2000;

/**
 * forEachIptablesEntry walks iptables-save output or restore input with the
 * shared parser (kernel/iptables-save-parser.ts), a few thousand lines at a
 * time, yielding in between. A node with 10,000 services lists about 400,000
 * lines: parsed in one go that is over a second of blocked event loop and
 * hundreds of MB of parse trees alive at once; in chunks the trees die young
 * and syncs run in between. Each chunk is parsed as its own table block
 * ("*nat … COMMIT"), which the script parser accepts because it does not
 * check references between lines; errors name the line of the whole text.
 */
export async function forEachIptablesEntry(text: string, visit: (table: string, entry: ChainLine | CommandLine) => void, pause: Yield, chunkLines = CHUNK_LINES): Promise<void> {
  let table = '';
  let chunk: string[] = [];
  /** numbers: the line number in `text` of each chunk line. */
  let numbers: number[] = [];
  let lineNo = 0;
  const flush = async () => {
    if (chunk.length === 0) return;
    const body = chunk;
    const at = numbers;
    chunk = [];
    numbers = [];
    let script;
    try {
      script = parseIptablesScript(`*${table}\n${body.join('\n')}\nCOMMIT\n`);
    } catch (err) {
      // Line 1 of the chunk's text is the synthetic "*table": shift back onto the real numbering.
      if (err instanceof IptablesSyntaxError) {
        const real = at[Math.min(Math.max(err.line - 2, 0), at.length - 1)];
        throw new IptablesParseError(`line ${real}: ${err.message.replace(/^line \d+: /, '')}`, { cause: err });
      }
      throw err;
    }
    for (const block of script.tables) for (const e of block.entries) visit(table, e);
    await pause();
  };
  let start = 0;
  while (start < text.length) {
    let end = text.indexOf('\n', start);
    if (end < 0) end = text.length;
    const line = text.slice(start, end).trim();
    start = end + 1;
    lineNo++;
    if (line === '' || line[0] === '#') continue;
    if (line[0] === '*') {
      await flush();
      table = line.slice(1).trim();
      continue;
    }
    if (line === 'COMMIT') {
      await flush();
      continue;
    }
    if (table === '') throw new IptablesParseError(`line ${lineNo}: rule or chain line outside of a table (missing "*table")`);
    chunk.push(line);
    numbers.push(lineNo);
    if (chunk.length >= chunkLines) await flush();
  }
  await flush();
}

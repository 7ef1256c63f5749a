/**
 * Records the netlink batches nft sends for a set of transactions
 * (server/kernel/testdata/nfnl/*.hex), which the unit tier's encoder test
 * (server/kernel/nft-netlink-encode.test.ts) requires kproxy's encoder to
 * reproduce byte for byte. Each transaction runs through `nft -f` under
 * strace in a namespace of its own (with a `cbr0` bridge for `iif "cbr0"`, as
 * the golden tests have it), after its setup transaction if it has one; the
 * batch nft sent is written one message per line, in hex. Run as root with
 * nft and strace installed (nft 1.0.6, Debian 12, is what kproxy matches):
 *
 *   node test/kernel/record-nfnl-testdata.ts
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { captureNftBatch } from './harness/nft-capture.ts';
import { addNamespace, deleteNamespace, HARNESS_PREFIX, ipBatch, nsRun } from './harness/netns.ts';

const ROOT = join(import.meta.dirname, '../..');
const OUT = join(ROOT, 'server/kernel/testdata/nfnl');
const GOLDEN = join(ROOT, 'server/proxy/nftables/testdata');

/** GOLDEN_CASES: the golden tables that between them hold every statement kproxy writes. */
const GOLDEN_CASES = ['upstream-overall', 'session-affinity', 'load-balancer-source-ranges', 'detect-local-bridge', 'detect-local-interface-prefix'];
/** PROBES: hand-written transactions in OUT (NAME.nft, and NAME.setup.nft applied first when present). */
const PROBES = ['ip6', 'prefixes', 'partial', 'delete', 'big-vmap', 'big-ranges', 'big-ranges6'];

/** splitMessages: a batch, one netlink message per item. */
function splitMessages(b: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let off = 0; off < b.length;) {
    const len = b.readUInt32LE(off);
    out.push(b.subarray(off, off + len));
    off += (len + 3) & ~3;
  }
  return out;
}

const nftVersion = execFileSync('nft', ['--version'], { encoding: 'utf8' }).trim();
let n = 0;
async function record(name: string, source: string, setup: string | null): Promise<void> {
  const ns = `${HARNESS_PREFIX}nfnl-${n++}`;
  await addNamespace(ns);
  try {
    // cbr0 gets index 2 (lo is 1): the encoder test resolves it the same way.
    await ipBatch(ns, ['link add cbr0 type bridge']);
    if (setup) await nsRun(ns, ['nft', '-f', setup]);
    const capture = await captureNftBatch(ns, readFileSync(source, 'utf8'));
    if (capture.code !== 0) throw new Error(`nft refused ${source}: ${capture.stderr}`);
    const lines = [
      `# ${nftVersion}: the batch \`nft -f\` sent for ${relative(ROOT, source)}${setup ? ` (after ${relative(ROOT, setup)})` : ''}.`,
      '# One netlink message per line, in hex. Written by test/kernel/record-nfnl-testdata.ts.',
      `# source: ${relative(ROOT, source)}`,
      ...splitMessages(capture.batch).map((m) => m.toString('hex')),
    ];
    writeFileSync(join(OUT, `${name}.hex`), lines.join('\n') + '\n');
    console.log(`${name}: ${lines.length - 3} messages`);
  } finally {
    await deleteNamespace(ns);
  }
}

for (const c of GOLDEN_CASES) await record(c, join(GOLDEN, c, 'expected.nft'), null);
for (const p of PROBES) {
  const setup = join(OUT, `${p}.setup.nft`);
  await record(p, join(OUT, `${p}.nft`), existsSync(setup) ? setup : null);
}

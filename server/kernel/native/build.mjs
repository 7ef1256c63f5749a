/**
 * build compiles kproxy's one native program, nfnl-pipe (nfnl-pipe.c: the
 * netfilter netlink socket nftables mode writes through), into
 * dist/native/nfnl-pipe. `npm run build` runs it after the TypeScript.
 *
 * Without a C compiler the build goes on with a warning: kproxy then writes
 * nftables through `nft -f` alone, as it logs at start. A compiler that
 * refuses the source fails the build. KPROXY_NATIVE_BUILD=skip skips it (the
 * image's build stage, which runs on the build machine's platform: the image
 * compiles the program in a stage of the target platform instead).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..', '..', '..');
const source = join(import.meta.dirname, 'nfnl-pipe.c');
const output = join(root, 'dist', 'native', 'nfnl-pipe');

/** CFLAGS: the flags the image's native stage uses too (deploy/Dockerfile). */
const CFLAGS = ['-O2', '-Wall', '-Wextra', '-Werror'];

if (process.env.KPROXY_NATIVE_BUILD === 'skip') {
  console.log('native: skipped (KPROXY_NATIVE_BUILD=skip)');
} else {
  const cc = process.env.CC || 'cc';
  mkdirSync(join(root, 'dist', 'native'), { recursive: true });
  const r = spawnSync(cc, [...CFLAGS, '-o', output, source], { stdio: 'inherit' });
  if (r.error && r.error.code === 'ENOENT') {
    console.warn(`native: no C compiler (${cc}): nfnl-pipe not built; nftables mode will write through nft -f alone`);
  } else if (r.status !== 0) {
    console.error(`native: ${cc} failed to build ${source}`);
    process.exit(1);
  } else {
    console.log(`native: built ${output}`);
  }
}

import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * packageRoot is the directory holding kproxy's package.json, found by walking
 * up from this module: the source tree (server/config/) and the compiled tree
 * (dist/server/config/) sit at different depths, and the daemon may be started
 * from any working directory. The embedded default source lives below it.
 */
export function packageRoot(from: string = import.meta.url): string {
  let dir = dirname(fileURLToPath(from));
  for (let depth = 0; depth < 6; depth++) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string };
      if (pkg.name === 'kproxy') return dir;
    } catch {
      // no package.json here (or not readable): keep walking up
    }
    const parent = dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  throw new Error(`cannot find kproxy's package.json above ${fileURLToPath(from)}`);
}

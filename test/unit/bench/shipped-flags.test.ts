import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SHIPPED_NODE_FLAGS } from '../../bench/daemon.ts';

const ROOT = join(import.meta.dirname, '..', '..', '..');

/** The benchmark measures kproxy as it ships: the same Node.js flags as the image and `npm run kproxy`. */
describe('the Node.js flags kproxy ships with', () => {
  it("are the image entrypoint's", () => {
    const dockerfile = readFileSync(join(ROOT, 'deploy', 'Dockerfile'), 'utf8');
    const entry = /^ENTRYPOINT (\[.*\])$/m.exec(dockerfile);
    expect(entry).not.toBeNull();
    const argv = JSON.parse(entry![1]) as string[];
    expect(argv[0]).toBe('node');
    expect(argv.slice(1, -1)).toEqual(SHIPPED_NODE_FLAGS);
    expect(argv.at(-1)).toBe('/opt/kproxy/dist/server/cli.js');
  });

  it("are `npm run kproxy`'s", () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    expect(pkg.scripts.kproxy).toBe(['node', ...SHIPPED_NODE_FLAGS, 'dist/server/cli.js'].join(' '));
  });
});

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SHIPPED_ENV, SHIPPED_NODE_FLAGS } from '../../bench/daemon.ts';

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

  it("are `npm run kproxy`'s, with the same malloc settings", () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    const env = Object.entries(SHIPPED_ENV).map(([k, v]) => `${k}=${v}`);
    expect(pkg.scripts.kproxy).toBe([...env, 'node', ...SHIPPED_NODE_FLAGS, 'dist/server/cli.js'].join(' '));
  });

  it("come with the image's malloc settings", () => {
    const dockerfile = readFileSync(join(ROOT, 'deploy', 'Dockerfile'), 'utf8');
    const set: Record<string, string> = {};
    for (const line of dockerfile.split('\n').filter((l) => /^ENV MALLOC_/.test(l))) {
      for (const word of line.slice(4).trim().split(/\s+/)) {
        const [k, v] = word.split('=');
        set[k!] = v!;
      }
    }
    expect(set).toEqual(SHIPPED_ENV);
  });
});

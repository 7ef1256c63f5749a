import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * The built CLI on an older Node: one line saying which Node it found, that it
 * needs 24, and the command that runs it with the Node 24 `npm ci` installed,
 * instead of a crash inside a dependency. Runs with every Node older than 24
 * on the machine's PATH (Debian 12 ships Node 20), outside node_modules.
 */
const ROOT = join(import.meta.dirname, '../..');
const CLI = join(ROOT, 'dist/server/cli.js');

function oldNodes(): { path: string; version: string }[] {
  let paths: string[];
  try {
    paths = execFileSync('sh', ['-c', 'which -a node'], {
      encoding: 'utf8',
      env: {
        PATH: process.env
          .PATH!.split(':')
          .filter((p) => !p.includes('node_modules'))
          .join(':'),
      },
    })
      .split('\n')
      .filter(Boolean);
  } catch {
    return []; // no node on PATH outside node_modules
  }
  const out = new Map<string, string>();
  // process.execPath is the resolved path (/bin/node is /usr/bin/node on a merged /usr).
  for (const path of new Set(paths.map((p) => realpathSync(p)))) {
    const version = spawnSync(path, ['--version'], { encoding: 'utf8' }).stdout?.trim() ?? '';
    if (/^v\d+\./.test(version) && Number(version.slice(1).split('.')[0]) < 24) out.set(path, version);
  }
  return [...out].map(([path, version]) => ({ path, version }));
}

const nodes = existsSync(CLI) ? oldNodes() : [];

describe('the CLI on an older Node', () => {
  it.skipIf(nodes.length === 0)(
    `exits 1 with one line naming the Node found and the command to use (${nodes.map((n) => `${n.path} ${n.version}`).join(', ') || 'no Node < 24 outside node_modules, or dist/ not built: skipped'})`,
    () => {
      for (const { path, version } of nodes) {
        const r = spawnSync(path, [CLI, '--dry-run', '--source', 'file:my manifests/'], { cwd: ROOT, encoding: 'utf8' });
        expect(r.status).toBe(1);
        expect(r.stdout).toBe('');
        expect(r.stderr).toBe(
          `kproxy: Node.js 24 or later is needed, found ${version} (${path}); run it with the bundled Node 24: ` +
            "npm run kproxy -- --dry-run --source 'file:my manifests/' (or node_modules/.bin/node dist/server/cli.js --dry-run --source 'file:my manifests/')\n",
        );
        // The command it names works.
        const bundled = spawnSync(join(ROOT, 'node_modules/.bin/node'), [CLI, '--version'], { cwd: ROOT, encoding: 'utf8' });
        expect(bundled.status).toBe(0);
        expect(bundled.stdout).toMatch(/^kproxy .* \(node v2[4-9]\./);
      }
    },
    30_000,
  );

  it.skipIf(nodes.length === 0)(
    'names absolute paths when started from another folder',
    () => {
      const { path, version } = nodes[0];
      const r = spawnSync(path, [CLI, '--version'], { cwd: '/', encoding: 'utf8' });
      expect(r.status).toBe(1);
      expect(r.stderr).toBe(`kproxy: Node.js 24 or later is needed, found ${version} (${path}); run it with the bundled Node 24: ${join(ROOT, 'node_modules/.bin/node')} ${CLI} --version\n`);
    },
    30_000,
  );
});

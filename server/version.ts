import { readFileSync } from 'node:fs';

/** KPROXY_VERSION is the package version, read once from package.json. */
export const KPROXY_VERSION: string = (() => {
  for (const rel of ['../package.json', '../../package.json']) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(rel, import.meta.url), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'kproxy' && pkg.version) return pkg.version;
    } catch {
      // not at this depth: the source tree and the compiled dist/ differ by one level
    }
  }
  return 'unknown';
})();

/** versionLine is what `kproxy --version` prints. */
export function versionLine(): string {
  return `kproxy ${KPROXY_VERSION} (node ${process.version}, ${process.platform}/${process.arch})`;
}

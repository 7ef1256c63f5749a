import { readFile, writeFile } from 'node:fs/promises';
import { SysctlError } from '../errors.ts';

/**
 * Sysctl reads and writes kernel parameters under /proc/sys. Names are the
 * path below /proc/sys with slashes ("net/ipv4/conf/all/route_localnet"), as
 * kube-proxy names them. Values are the text without the trailing newline.
 */
export interface Sysctl {
  read(name: string): Promise<string>;
  write(name: string, value: string): Promise<void>;
}

const NAME = /^[a-z0-9_]+(\/[A-Za-z0-9_.+-]+)+$/;

/** checkName refuses names that could leave /proc/sys ("..", absolute paths, odd characters). */
export function checkSysctlName(name: string): void {
  if (!NAME.test(name) || name.split('/').some((p) => p === '..' || p === '.')) {
    throw new SysctlError(`invalid sysctl name ${JSON.stringify(name)}`);
  }
}

/** procSysctl is the real /proc/sys (of the network namespace the process runs in, for net/*). */
export function procSysctl(root = '/proc/sys'): Sysctl {
  return {
    async read(name) {
      checkSysctlName(name);
      try {
        return (await readFile(`${root}/${name}`, 'utf8')).trim();
      } catch (err) {
        throw new SysctlError(`cannot read sysctl ${name}`, { cause: err });
      }
    },
    async write(name, value) {
      checkSysctlName(name);
      try {
        await writeFile(`${root}/${name}`, value + '\n');
      } catch (err) {
        throw new SysctlError(`cannot set sysctl ${name} to ${value}`, { cause: err });
      }
    },
  };
}

/**
 * ensureSysctl sets a sysctl unless it already holds the value (kube-proxy's
 * EnsureSysctl); returns whether it wrote.
 */
export async function ensureSysctl(sysctl: Sysctl, name: string, value: string): Promise<boolean> {
  const cur = await sysctl.read(name);
  if (cur === value) return false;
  await sysctl.write(name, value);
  return true;
}

/** sysctlInt reads a numeric sysctl; null when missing or not a number. */
export async function sysctlInt(sysctl: Sysctl, name: string): Promise<number | null> {
  try {
    const n = Number.parseInt(await sysctl.read(name), 10);
    return Number.isNaN(n) ? null : n;
  } catch {
    // Missing sysctls (module not loaded) read as "unknown"; callers keep their default.
    return null;
  }
}

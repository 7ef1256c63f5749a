import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { loadConfiguration, type ConfigEnv, type LoadedConfiguration } from '../server/config/load.ts';
import { SERVICE_ACCOUNT_TOKEN } from '../server/config/source-selection.ts';
import { loadManifests } from './api-schema.ts';

/**
 * What the deploy/ tests share: the shipped manifests, a pod's start through
 * kproxy's own configuration loader, and kubectl's two patch kinds as the
 * documentation uses them.
 */

// Loose views of the objects, enough to read the fields the tests check.
export type Obj = Record<string, any>;

export const deployDir = fileURLToPath(new URL('.', import.meta.url));
export const shipped = loadManifests(deployDir, 'deploy');
export const examples = loadManifests(`${deployDir}examples`, 'deploy/examples');

/** only returns the one shipped object of a kind (and name); anything else is an error. */
export function only(kind: string, name?: string): Obj {
  const found = shipped.filter((m) => m.object.kind === kind && (name === undefined || (m.object.metadata as Obj)?.name === name));
  if (found.length !== 1) {
    throw new Error(`expected exactly one ${kind}${name ? ` ${name}` : ''} in deploy/, found ${found.length}: ${found.map((m) => m.where).join(', ')}`);
  }
  return found[0].object;
}

export const daemonSet = only('DaemonSet', 'kproxy');
export const shippedConfigText: string = only('ConfigMap', 'kproxy').data['config.conf'];

/** argValue reads a flag's value from a container's args ("--flag value" or "--flag=value"). */
export function argValue(flag: string, c: Obj = daemonSet.spec.template.spec.containers[0]): string | undefined {
  const args: string[] = c.args ?? [];
  const i = args.indexOf(flag);
  if (i >= 0) return args[i + 1];
  return args.find((a) => a.startsWith(`${flag}=`))?.slice(flag.length + 1);
}

/**
 * podStart runs kproxy's own configuration loader on what a pod of ds sees:
 * its arguments with $(VAR) expanded from the container env, the ConfigMap
 * mounted at --config, the in-cluster token, and any extra files (Secrets).
 */
export function podStart(ds: Obj, configText: string, extraFiles: string[] = [], opts: { token?: boolean } = {}): Promise<LoadedConfiguration> {
  const c = ds.spec.template.spec.containers[0];
  const env: Record<string, string> = { NODE_NAME: 'node-a' };
  for (const e of c.env) if (typeof e.value === 'string') env[e.name] = e.value;
  const args = (c.args as string[]).map((a) => a.replace(/\$\((\w+)\)/g, (_m, name: string) => env[name] ?? _m));
  const configPath = argValue('--config', c)!;
  const machine: ConfigEnv = {
    env,
    hostname: () => 'ip-10-0-0-10.internal',
    exists: async (p) => [configPath, ...(opts.token === false ? [] : [SERVICE_ACCOUNT_TOKEN]), ...extraFiles].includes(p),
    readFile: async (p) => {
      if (p !== configPath) throw Object.assign(new Error(`ENOENT: ${p}`), { code: 'ENOENT' });
      return configText;
    },
  };
  return loadConfiguration(args, machine);
}

/**
 * strategicMerge applies a strategic-merge patch as `kubectl patch` does, for
 * the lists these patches touch: containers, volumes and env merge by name,
 * volumeMounts by mountPath; other lists (args) are replaced, maps merge.
 */
export function strategicMerge(target: unknown, patch: unknown, key = ''): unknown {
  if (Array.isArray(patch)) {
    const mergeKey = ['containers', 'initContainers', 'volumes', 'env'].includes(key) ? 'name' : key === 'volumeMounts' ? 'mountPath' : null;
    if (!mergeKey || !Array.isArray(target)) return patch;
    const merged = [...target];
    for (const item of patch as Obj[]) {
      const i = merged.findIndex((t: Obj) => t[mergeKey] === item[mergeKey]);
      if (i >= 0) merged[i] = strategicMerge(merged[i], item);
      else merged.push(item);
    }
    return merged;
  }
  if (patch && typeof patch === 'object' && target && typeof target === 'object' && !Array.isArray(target)) {
    const merged: Obj = { ...(target as Obj) };
    for (const [k, v] of Object.entries(patch)) merged[k] = strategicMerge(merged[k], v, k);
    return merged;
  }
  return patch;
}

/** patched is a DaemonSet (the shipped one by default) with deploy/patches/NAME applied (`kubectl patch --patch-file`). */
export function patched(name: string, base: Obj = daemonSet): Obj {
  const text = readFileSync(`${deployDir}patches/${name}`, 'utf8');
  return strategicMerge(base, parseYaml(text, { version: '1.1', uniqueKeys: true })) as Obj;
}

/**
 * jsonPatch applies RFC 6902 "add" operations as `kubectl patch --type=json`
 * does (the only operation the documentation uses): into an object, or into an
 * array at an index or at its end ("-"). Anything else throws.
 */
export function jsonPatch(target: Obj, ops: readonly { op: string; path: string; value: unknown }[]): Obj {
  const out = structuredClone(target);
  for (const { op, path, value } of ops) {
    if (op !== 'add') throw new Error(`jsonPatch: operation ${op} is not supported here`);
    const keys = path
      .split('/')
      .slice(1)
      .map((k) => k.replaceAll('~1', '/').replaceAll('~0', '~'));
    const last = keys.pop()!;
    let at: Obj = out;
    for (const k of keys) {
      if (at[k] === undefined) throw new Error(`jsonPatch: ${path}: ${k} does not exist`);
      at = at[k];
    }
    if (Array.isArray(at)) at.splice(last === '-' ? at.length : Number(last), 0, value);
    else at[last] = value;
  }
  return out;
}

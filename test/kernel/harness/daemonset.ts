import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { NODE_A } from './plan.ts';

const DEPLOY = join(import.meta.dirname, '../../../deploy');

/** writeShippedConfig writes the shipped ConfigMap's config.conf (deploy/configmap.yaml) to dir and returns its path. */
export function writeShippedConfig(dir: string): string {
  const configMap = parseYaml(readFileSync(join(DEPLOY, 'configmap.yaml'), 'utf8')) as { data: Record<string, string> };
  const path = join(dir, 'config.conf');
  writeFileSync(path, configMap.data['config.conf']);
  return path;
}

/**
 * daemonSetStart is how the shipped DaemonSet starts kproxy on node-a: its
 * container's arguments with $(VAR) expanded, the ConfigMap's config.conf
 * written to dir in place of the mounted volume, and the container's env.
 */
export function daemonSetStart(dir: string): { args: string[]; env: Record<string, string> } {
  const daemonSet = parseYaml(readFileSync(join(DEPLOY, 'daemonset.yaml'), 'utf8')) as {
    spec: { template: { spec: { containers: { args: string[]; env: { name: string; value?: string }[] }[] } } };
  };
  const container = daemonSet.spec.template.spec.containers[0];
  const config = writeShippedConfig(dir);
  const env: Record<string, string> = { NODE_NAME: NODE_A.name };
  for (const e of container.env) if (e.value !== undefined) env[e.name] = e.value;
  const args = container.args.map((a) => (a === '/var/lib/kproxy/config.conf' ? config : a.replace(/\$\((\w+)\)/g, (_m, v: string) => env[v] ?? _m)));
  return { args, env };
}

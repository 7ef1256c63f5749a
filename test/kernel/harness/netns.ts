import { execFileSync } from 'node:child_process';
import { execFile, type ExecOptions, type ExecResult } from '../../../server/kernel/exec.ts';

/**
 * netns: the few `ip netns` operations the kernel tier needs. Every command
 * runs inside a namespace the harness made (`ip -n NS …` or `ip netns exec NS
 * …`); nothing here addresses the root namespace's interfaces or firewall.
 */

/** HARNESS_PREFIX: every namespace this harness makes is named `kpt-<pid>-…`. */
export const HARNESS_PREFIX = `kpt-${process.pid}-`;

/** HARNESS_NAME matches names made by any harness process: `kpt-<pid>-…`. */
export const HARNESS_NAME = /^kpt-(\d+)-/;

/** run runs a program and fails with its stderr when it exits non-zero. */
export async function run(file: string, args: readonly string[], opts: ExecOptions = {}): Promise<string> {
  const r = await execFile(file, args, { timeoutMs: 30_000, ...opts });
  if (r.code !== 0) throw new Error(`${file} ${args.join(' ')} exited ${r.code}: ${r.stderr.trim() || r.stdout.trim()}`);
  return r.stdout;
}

/** nsExec runs a program inside a namespace and returns its result whatever the exit code. */
export function nsExec(ns: string, argv: readonly string[], opts: ExecOptions = {}): Promise<ExecResult> {
  return execFile('ip', ['netns', 'exec', ns, ...argv], { timeoutMs: 30_000, ...opts });
}

/** nsRun runs a program inside a namespace and fails when it exits non-zero. */
export function nsRun(ns: string, argv: readonly string[], opts: ExecOptions = {}): Promise<string> {
  return run('ip', ['netns', 'exec', ns, ...argv], opts);
}

/** ipBatch applies `ip` commands (one per line, without the leading `ip`) inside a namespace in one process. */
export function ipBatch(ns: string, commands: readonly string[]): Promise<string> {
  return run('ip', ['-n', ns, '-batch', '-'], { stdin: commands.join('\n') + '\n' });
}

export function addNamespace(name: string): Promise<string> {
  return run('ip', ['netns', 'add', name]);
}

/** deleteNamespace removes a namespace (and with it its veth ends); a missing one is not an error. */
export async function deleteNamespace(name: string): Promise<void> {
  const r = await execFile('ip', ['netns', 'del', name], { timeoutMs: 30_000 });
  if (r.code !== 0 && listNamespaces().includes(name)) throw new Error(`ip netns del ${name} exited ${r.code}: ${r.stderr.trim()}`);
}

/** listNamespaces lists the named network namespaces (`ip netns list`, first word of each line). */
export function listNamespaces(): string[] {
  const out = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  return out
    .split('\n')
    .map((l) => l.trim().split(/\s+/)[0])
    .filter((n): n is string => Boolean(n));
}

/** namespacePids lists the processes living in a namespace (`ip netns pids`). */
export function namespacePids(name: string): number[] {
  try {
    const out = execFileSync('ip', ['netns', 'pids', name], { encoding: 'utf8' });
    return out
      .split('\n')
      .map((l) => Number(l.trim()))
      .filter((n) => Number.isInteger(n) && n > 0);
  } catch {
    // The namespace is already gone: no process lives in it.
    return [];
  }
}

/**
 * nsSysctl sets a kernel parameter inside a namespace (net.* parameters are
 * per namespace: /proc/sys/net shows the namespace of the process that opens
 * it). It writes /proc/sys with coreutils' tee, as procps may not be installed.
 */
export function nsSysctl(ns: string, name: string, value: string): Promise<string> {
  return nsRun(ns, ['tee', `/proc/sys/${name.replaceAll('.', '/')}`], { stdin: value });
}

/**
 * netns holds the benchmark's network namespaces: every name starts with
 * kpt-bench-<pid>-, every namespace made is removed by removeAll() (run.ts
 * calls it in finally and on signals). Nothing here touches the root
 * namespace's interfaces or firewall.
 */
import { execFileSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';

const made = new Set<string>();
let counter = 0;

/** NETNS_PREFIX: every namespace of this run starts with it. */
export const NETNS_PREFIX = `kpt-bench-${process.pid}-`;

export function sh(file: string, args: readonly string[], input?: string): string {
  return execFileSync(file, args as string[], { encoding: 'utf8', input, maxBuffer: 1024 * 1024 * 1024, stdio: ['pipe', 'pipe', 'pipe'] });
}

/** createNetns makes a fresh namespace with loopback up. */
export function createNetns(role: string): string {
  const name = `${NETNS_PREFIX}${role}-${++counter}`;
  sh('ip', ['netns', 'add', name]);
  made.add(name);
  sh('ip', ['-n', name, 'link', 'set', 'lo', 'up']);
  return name;
}

export function deleteNetns(name: string): void {
  try {
    sh('ip', ['netns', 'del', name]);
  } catch {
    // Already gone (a test deleted it first): nothing left to remove.
  }
  made.delete(name);
}

/** removeAll deletes every namespace this process made. */
export function removeAll(): void {
  for (const n of [...made]) deleteNetns(n);
}

/** inNetns runs a program inside a namespace and returns stdout (throws on failure). */
export function inNetns(ns: string, file: string, args: readonly string[], input?: string): string {
  return sh('ip', ['netns', 'exec', ns, file, ...args], input);
}

/**
 * spawnInNetns starts a long-lived process in a namespace. `ip netns exec`
 * execs the program in place, so child.pid is the program's own pid (its
 * /proc entries are the program's).
 */
export function spawnInNetns(ns: string, file: string, args: readonly string[], opts: SpawnOptions = {}): ChildProcess {
  return spawn('ip', ['netns', 'exec', ns, file, ...args], { stdio: ['pipe', 'pipe', 'pipe'], ...opts });
}

/** vethPair joins two namespaces with a veth pair, addresses a/b (CIDR) on each end. */
export function vethPair(nsA: string, ifA: string, addrA: string, nsB: string, ifB: string, addrB: string): void {
  // Created inside nsA so the pair never appears in the root namespace.
  sh('ip', ['-n', nsA, 'link', 'add', ifA, 'type', 'veth', 'peer', 'name', ifB, 'netns', nsB]);
  sh('ip', ['-n', nsA, 'addr', 'add', addrA, 'dev', ifA]);
  sh('ip', ['-n', nsB, 'addr', 'add', addrB, 'dev', ifB]);
  sh('ip', ['-n', nsA, 'link', 'set', ifA, 'up']);
  sh('ip', ['-n', nsB, 'link', 'set', ifB, 'up']);
}

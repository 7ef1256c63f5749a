import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readdir, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { execFile } from '../../server/kernel/exec.ts';

/**
 * A small network for the conntrack kernel tests, in namespaces of its own
 * (named kpt-ct-<pid>-<tag>-…; nothing touches the root namespace):
 *
 *   client 10.0.0.2 ── 10.0.0.1 node ─┬─ 10.244.1.1 ── 10.244.1.5 b1
 *                                      └─ 10.244.2.1 ── 10.244.2.6 b2
 *
 * veth pairs are created inside the namespaces (`ip -n NS link add … peer
 * … netns OTHER`), so even for a moment no interface appears in the root one.
 */

export const ADDR = { client: '10.0.0.2', node: '10.0.0.1', b1: '10.244.1.5', b2: '10.244.2.6' } as const;
export const ROOT = join(import.meta.dirname, '../..');
export const CLI = join(ROOT, 'dist/server/cli.js');

/** sh runs a program and fails with its output when it exits non-zero. */
export async function sh(file: string, args: readonly string[], stdin?: string): Promise<string> {
  const r = await execFile(file, args, { timeoutMs: 30_000, stdin });
  if (r.code !== 0) throw new Error(`${file} ${args.join(' ')} exited ${r.code}: ${(r.stderr || r.stdout).trim()}`);
  return r.stdout;
}

/** Line is one line a spawned process wrote, with when it arrived. */
export interface Line {
  readonly at: number;
  readonly text: string;
}

/** Proc is a spawned process and what it has written so far. */
export interface Proc {
  readonly child: ChildProcess;
  readonly out: Line[];
  readonly err: Line[];
}

export class CtNet {
  readonly ns: { client: string; node: string; b1: string; b2: string };
  readonly #procs: Proc[] = [];
  #dirs: string[] = [];

  constructor(tag: string) {
    const p = `kpt-ct-${process.pid}-${tag}`;
    this.ns = { client: `${p}-c`, node: `${p}-n`, b1: `${p}-b1`, b2: `${p}-b2` };
  }

  /** up builds the namespaces, links, addresses and routes. */
  async up(): Promise<void> {
    const { client, node, b1, b2 } = this.ns;
    for (const ns of [client, node, b1, b2]) await sh('ip', ['netns', 'add', ns]);
    const batch = (ns: string, lines: string[]) => sh('ip', ['-n', ns, '-batch', '-'], lines.join('\n') + '\n');
    await batch(node, [
      `link add n0 type veth peer name c0 netns ${client}`,
      `link add nb1 type veth peer name eth0 netns ${b1}`,
      `link add nb2 type veth peer name eth0 netns ${b2}`,
      'addr add 10.0.0.1/24 dev n0',
      'addr add 10.244.1.1/24 dev nb1',
      'addr add 10.244.2.1/24 dev nb2',
      'link set lo up',
      'link set n0 up',
      'link set nb1 up',
      'link set nb2 up',
    ]);
    await batch(client, ['addr add 10.0.0.2/24 dev c0', 'link set lo up', 'link set c0 up', 'route add default via 10.0.0.1']);
    await batch(b1, ['addr add 10.244.1.5/24 dev eth0', 'link set lo up', 'link set eth0 up', 'route add default via 10.244.1.1']);
    await batch(b2, ['addr add 10.244.2.6/24 dev eth0', 'link set lo up', 'link set eth0 up', 'route add default via 10.244.2.1']);
    // Through /proc/sys directly: the sysctl program (procps) may be absent on a CI machine.
    await this.exec(node, ['sh', '-c', 'echo 1 > /proc/sys/net/ipv4/ip_forward']);
  }

  /** exec runs a program in a namespace and fails when it exits non-zero. */
  exec(ns: string, argv: readonly string[]): Promise<string> {
    return sh('ip', ['netns', 'exec', ns, ...argv]);
  }

  /** spawn starts a long-running program in a namespace; down() ends it by its PID. */
  spawn(ns: string, argv: readonly string[], env: NodeJS.ProcessEnv = process.env): Proc {
    const child = spawn('ip', ['netns', 'exec', ns, ...argv], { stdio: ['ignore', 'pipe', 'pipe'], cwd: ROOT, env });
    const proc: Proc = { child, out: [], err: [] };
    const collect = (stream: NodeJS.ReadableStream, into: Line[]) => {
      let rest = '';
      stream.setEncoding('utf8');
      stream.on('data', (chunk: string) => {
        const parts = (rest + chunk).split('\n');
        rest = parts.pop() ?? '';
        for (const text of parts) into.push({ at: Date.now(), text });
      });
    };
    collect(child.stdout!, proc.out);
    collect(child.stderr!, proc.err);
    this.#procs.push(proc);
    return proc;
  }

  /** udpServer answers every datagram on each port with "<tag>:<port>". */
  udpServer(ns: string, tag: string, ports: readonly number[]): Proc {
    const code = `const d=require('node:dgram');for(const p of ${JSON.stringify(ports)}){const s=d.createSocket('udp4');s.on('message',(m,r)=>s.send('${tag}:'+p,r.port,r.address));s.bind(p,()=>console.log('listening '+p))}`;
    return this.spawn(ns, [process.execPath, '-e', code]);
  }

  /**
   * udpClient sends "ping" from a fixed source port to dst:port every
   * intervalMs (count 0 = forever) and prints each answer as JSON.
   */
  udpClient(ns: string, o: { sport: number; dst: string; port: number; intervalMs?: number; count?: number }): Proc {
    const code =
      `const d=require('node:dgram');const s=d.createSocket('udp4');let n=0;` +
      `s.on('message',(m)=>console.log(JSON.stringify({t:Date.now(),from:m.toString()})));` +
      `s.bind(${o.sport},()=>{const tick=()=>{if(${o.count ?? 0}&&n>=${o.count ?? 0})return;n++;s.send('ping',${o.port},'${o.dst}');};tick();setInterval(tick,${o.intervalMs ?? 100});});`;
    return this.spawn(ns, [process.execPath, '-e', code]);
  }

  /** tempDir makes a folder (manifests for the file source, PATH shims), removed by down(). */
  async tempDir(): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), 'kpt-ct-'));
    this.#dirs.push(dir);
    return dir;
  }

  /** down ends every spawned process (by PID) and removes the namespaces and folders, also after a failure. */
  async down(): Promise<void> {
    for (const p of this.#procs) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGTERM');
    await Promise.all(this.#procs.map((p) => exited(p.child, 5000)));
    for (const p of this.#procs) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
    for (const ns of Object.values(this.ns)) await execFile('ip', ['netns', 'del', ns], { timeoutMs: 30_000 });
    for (const d of this.#dirs) await rm(d, { recursive: true, force: true });
    this.#dirs = [];
  }

  /**
   * pathWithout returns a PATH on which the named programs cannot be found:
   * /usr/sbin is replaced by a folder of links to everything in it but them.
   */
  async pathWithout(...programs: string[]): Promise<string> {
    const dir = await this.tempDir();
    for (const name of await readdir('/usr/sbin')) if (!programs.includes(name)) await symlink(join('/usr/sbin', name), join(dir, name));
    return [dir, '/usr/local/bin', '/usr/bin'].join(':');
  }
}

function exited(child: ChildProcess, ms: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    child.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
  });
}

/** writeAtomically replaces a file in one rename, so the file source never reads half of it. */
export async function writeAtomically(file: string, text: string): Promise<void> {
  // A dot file: the file source skips those, so it never reads the half-written copy.
  const tmp = join(dirname(file), `.${basename(file)}.tmp`);
  await writeFile(tmp, text);
  await rename(tmp, file);
}

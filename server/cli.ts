#!/usr/bin/env node
import { existsSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The kproxy command's entry point. It checks the runtime before anything else
 * is loaded: on an older Node, kproxy's dependencies fail while loading, deep
 * inside undici ("Cannot read properties of undefined (reading 'bind')"),
 * which says nothing about the cause. Only Node built-ins are imported here,
 * and the syntax stays what Node 18 and 20 parse.
 */

/** REQUIRED_NODE_MAJOR: kproxy runs on Node.js 24 LTS (the package pins it through the `node` package). */
const REQUIRED_NODE_MAJOR = 24;

/** shellWord quotes an argument for a POSIX shell, only when it needs quoting. */
function shellWord(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}

/**
 * runtimeProblem says, in one line, which Node was found, that 24 is needed,
 * and the command that runs the same arguments with the Node 24 that `npm ci`
 * installed into the package.
 */
function runtimeProblem(found: string, execPath: string, args: readonly string[]): string {
  const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
  const here = process.cwd() === root;
  const bundled = join(root, 'node_modules', '.bin', 'node');
  const cli = join(root, 'dist', 'server', 'cli.js');
  const rest = args.map(shellWord).join(' ');
  const tail = rest ? ` ${rest}` : '';
  const head = `kproxy: Node.js ${REQUIRED_NODE_MAJOR} or later is needed, found ${found} (${execPath})`;
  if (!existsSync(bundled)) return `${head}; install Node.js ${REQUIRED_NODE_MAJOR}, or run npm ci in ${root}, which installs it into the package`;
  const direct = here ? `${relative(root, bundled)} ${relative(root, cli)}${tail}` : `${bundled} ${cli}${tail}`;
  return here ? `${head}; run it with the bundled Node ${REQUIRED_NODE_MAJOR}: npm run kproxy --${tail} (or ${direct})` : `${head}; run it with the bundled Node ${REQUIRED_NODE_MAJOR}: ${direct}`;
}

if (Number(process.versions.node.split('.')[0]) < REQUIRED_NODE_MAJOR) {
  process.stderr.write(runtimeProblem(process.version, process.execPath, process.argv.slice(2)) + '\n');
  process.exit(1);
}
if (process.argv[2] === 'trace') {
  // `kproxy trace` loads the tracer alone (not the daemon's Kubernetes client and servers): quick to start on a node.
  const { runTrace } = await import('./trace-command.ts');
  const code = await runTrace(process.argv.slice(3), { out: (t) => process.stdout.write(t), err: (t) => process.stderr.write(t) }).catch((err: unknown) => {
    process.stderr.write(`kproxy trace: unexpected failure: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    return 2;
  });
  process.exit(code);
} else {
  await import('./command.ts');
}

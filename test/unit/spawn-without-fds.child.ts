// Run by spawn-without-fds.test.ts in a process of its own: takes every file
// descriptor, then runs a command through execFile and through the conntrack
// runner's stream, and prints what each call settled with. The process must
// live to print it.
import { closeSync, openSync } from 'node:fs';
import { execConntrack } from '../../server/kernel/conntrack.ts';
import { execFile } from '../../server/kernel/exec.ts';

const held: number[] = [];
try {
  for (;;) held.push(openSync('/dev/null', 'r'));
} catch {
  // EMFILE: every descriptor is taken.
}
const settle = (p: Promise<unknown>) =>
  p.then(
    () => ({ ok: true }),
    (e: unknown) => ({ ok: false, code: (e as { code?: string }).code, message: (e as Error).message }),
  );
const exec = await settle(execFile('true', []));
const stream = await settle(execConntrack({ binary: 'true' }).stream([], () => {}));
for (const fd of held) closeSync(fd);
// With descriptors back, the same call works again.
const after = await settle(execFile('true', []));
process.stdout.write(JSON.stringify({ held: held.length, exec, stream, after }) + '\n');
